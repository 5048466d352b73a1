"""`gitops-gpu agent` (the node agent) and `gitops-gpu nodes` (per-node health from the ladder).

``agent`` runs on every GPU node (a DaemonSet; NODE_NAME from the downward API) and publishes
its NodeGPUReport; ``--nvml-snapshot`` swaps pynvml for the snapshot-driven fake, ``--stdout``
prints reports instead of publishing. ``nodes`` compiles the fleet repo, reads each pool's nodes,
reports and operator pods, and prints every node's verdict: exit 0 when every node is Healthy,
1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

from gitops_gpu import kube
from gitops_gpu.agent import fake_nvml, loop
from gitops_gpu.cli.options import duration
from gitops_gpu.errors import GitopsGpuError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = sub.add_parser("agent", help="node agent: publish this node's NVML facts (NodeGPUReport)")
    a.add_argument(
        "--node", default=os.environ.get("NODE_NAME"), help="this node's name (default: $NODE_NAME)"
    )
    a.add_argument("--interval", type=duration, default=30.0, help="read interval (default 30s)")
    a.add_argument("--once", action="store_true", help="read and publish once, then exit")
    a.add_argument("--kubeconfig", help="default: in-cluster service account, else ~/.kube/config")
    a.add_argument(
        "--nvml-snapshot",
        metavar="FILE",
        help="fake NVML from a snapshot file or bundled name "
        f"({', '.join(fake_nvml.snapshot_names())})",
    )
    a.add_argument(
        "--stdout",
        action="store_true",
        help="print reports as JSON lines instead of publishing them",
    )
    a.set_defaults(func=_agent)


# -- agent ----------------------------------------------------------------------------------------
def _agent_client(kubeconfig: str | None) -> kube.Client:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if kubeconfig is None and host and port and (SA_DIR / "token").exists():
        token = (SA_DIR / "token").read_text().strip()
        return kube.Client.from_token(f"https://{host}:{port}", token, str(SA_DIR / "ca.crt"))
    return kube.Client.from_kubeconfig(kubeconfig)


def _agent(args: argparse.Namespace) -> int:
    if not args.node:
        raise GitopsGpuError("agent: no node name", fix="pass --node NAME or set NODE_NAME")
    nvml: Any = None
    if args.nvml_snapshot:
        nvml = fake_nvml.from_snapshot_file(args.nvml_snapshot, seed=args.node)
    client = None if args.stdout else _agent_client(args.kubeconfig)
    stop = threading.Event()
    # The kubelet stops a DaemonSet pod with SIGTERM: finish the pass, shut NVML down, exit 0.
    previous = signal.signal(signal.SIGTERM, lambda _sig, _frame: stop.set())
    try:
        return loop.run_agent(args.node, args.interval, args.once, nvml, client, stop=stop)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if client is not None:
            client.close()


# -- nodes ----------------------------------------------------------------------------------------
