"""`gitops-gpu agent` (the node agent) and `gitops-gpu nodes` (per-node health from the ladder).

``agent`` runs on every GPU node (a DaemonSet; NODE_NAME from the downward API) and publishes
its NodeGPUReport; ``--nvml-snapshot`` swaps pynvml for the snapshot-driven fake, ``--stdout``
prints reports instead of publishing. ``nodes`` compiles the fleet repo, reads each pool's nodes,
reports and operator pods, and prints every node's verdict: exit 0 when every node is Healthy,
1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gitops_gpu import kube
from gitops_gpu.agent import fake_nvml, loop
from gitops_gpu.cli.exits import Exit
from gitops_gpu.cli.options import duration
from gitops_gpu.components import drift, evidence, ladder
from gitops_gpu.components.health import Health, PoolHealth
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import loader
from gitops_gpu.fleet.compiled import CompiledFleet, PoolTarget

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

    n = sub.add_parser("nodes", help="per-node health: the first failing component rung")
    n.add_argument("--kubeconfig", required=True)
    n.add_argument("--repo", required=True, type=Path, help="fleet repo checkout (a directory)")
    n.add_argument("--pool", help="only this pool")
    n.add_argument("--format", choices=("text", "json"), default="text")
    n.add_argument(
        "--namespace",
        default=evidence.OPERATOR_NAMESPACE,
        help="the GPU Operator's namespace (default gpu-operator)",
    )
    n.set_defaults(func=_nodes)


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
def _compile(repo: Path) -> CompiledFleet:
    return fleet_compile.compile_fleet(loader.load_repo(repo), "worktree")


def _selected(compiled: CompiledFleet, pool: str | None) -> list[tuple[str | None, PoolTarget]]:
    out = []
    for cluster in compiled.clusters.values():
        for target in cluster.pools.values():
            if pool is None or target.name == pool:
                out.append((cluster.context, target))
    if pool is not None and not out:
        raise GitopsGpuError(
            f"nodes: no pool {pool!r} in the fleet repo",
            fix="pass --pool with a pool under nodepools/",
        )
    return out


def judge(
    client: kube.Client, pools: Sequence[PoolTarget], namespace: str = evidence.OPERATOR_NAMESPACE
) -> list[tuple[PoolHealth, list[drift.NvmlDrift]]]:
    """Ladder verdict and NVML drift for each pool, read from one cluster."""
    found = evidence.read_evidence(client, pools, namespace=namespace)
    return [
        (ladder.judge_pool(p, found[p.name]), drift.pool_drift(p, found[p.name])) for p in pools
    ]


def _nodes(args: argparse.Namespace) -> int:
    selected = _selected(_compile(args.repo), args.pool)
    results: list[tuple[PoolHealth, list[drift.NvmlDrift]]] = []
    for context in dict.fromkeys(ctx for ctx, _ in selected):
        client = kube.Client.from_kubeconfig(args.kubeconfig, context=context)
        try:
            pools = [t for ctx, t in selected if ctx == context]
            results.extend(judge(client, pools, args.namespace))
        finally:
            client.close()
    print(json.dumps(as_json(results), indent=2) if args.format == "json" else as_text(results))
    return Exit.OK if all(ph.health is Health.HEALTHY for ph, _ in results) else Exit.FAILED


def as_json(results: Sequence[tuple[PoolHealth, list[drift.NvmlDrift]]]) -> dict[str, Any]:
    return {
        "pools": [
            {
                "pool": ph.pool,
                "health": str(ph.health),
                "reason": ph.reason,
                "counts": {str(h): n for h, n in ph.counts.items()},
                "nodes": [
                    {
                        "node": nh.node,
                        "health": str(nh.health),
                        "reason": nh.reason,
                        "rungs": [
                            {
                                "component": r.component,
                                "health": str(r.health),
                                "reason": r.reason,
                                "skipped": r.skipped,
                            }
                            for r in nh.rungs
                        ],
                    }
                    for nh in ph.nodes
                ],
                "nvmlDrift": [d.as_dict() for d in drifts],
            }
            for ph, drifts in results
        ]
    }


def as_text(results: Sequence[tuple[PoolHealth, list[drift.NvmlDrift]]]) -> str:
    rows = [("POOL", "NODE", "HEALTH", "REASON")]
    rows += [(ph.pool, nh.node, str(nh.health), nh.reason) for ph, _ in results for nh in ph.nodes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
        for r in rows
    ]
    for ph, drifts in results:
        lines.append(f"pool {ph.reason} -> {ph.health}")
        lines.extend(f"  NVML drift: {d}" for d in drifts)
    return "\n".join(lines)
