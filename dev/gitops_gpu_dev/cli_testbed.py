"""`gitops-gpu testbed up|down|build`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gitops_gpu import kube
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import (
    build,
    controlplane,
    operator,
    operator_build,
    prometheus,
    session,
    simulator,
    smoke_fault,
)
from gitops_gpu_dev.testbed import gitea as forge
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.reports import SnapshotReports

DEFAULT_OPERATOR = operator.DEFAULT_MODE


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("testbed", help="local control plane: build, up, down")
    tsub = p.add_subparsers(dest="testbed_cmd", required=True)
    b = tsub.add_parser(
        "build", help="build or reuse the control-plane binaries and the GPU Operator"
    )
    b.set_defaults(func=_build)
    u = tsub.add_parser("up", help="start etcd, kube-apiserver, kube-controller-manager, kwok")
    u.add_argument(
        "--dir", required=True, type=Path, help="the testbed's directory (state, logs, kubeconfig)"
    )
    u.add_argument("--fleet", type=Path, help="fleet repo whose pools get fake GPU nodes")
    u.add_argument(
        "--cluster",
        help="with --fleet: nodes only for the pools of this fleet cluster (one testbed per "
        "cluster of a multi-cluster fleet)",
    )
    u.add_argument("--nodes-per-pool", type=int, default=2, help="fake GPU nodes per pool (2)")
    u.add_argument("--crds", type=Path, help="GPU Operator CRDs (default ../shared/upstream/...)")
    u.add_argument(
        "--operator",
        choices=operator.OPERATOR_MODES,
        default=DEFAULT_OPERATOR,
        help="real: run the GPU Operator v26.7.0 as a process; sim: the simulator plays it "
        f"(default {DEFAULT_OPERATOR})",
    )
    u.add_argument(
        "--simulate",
        action="store_true",
        help="also play the hosts (NVML reports, MIG manager, GFD driver labels, faults) and, "
        "with --operator sim, the GPU Operator (stopped by `down`)",
    )
    u.add_argument("--tick", type=float, default=0.5, help="simulator time step in seconds")
    u.add_argument(
        "--forge",
        action="store_true",
        help="also run Gitea with the fleet repo pushed to it (see DIR/forge.json)",
    )
    u.add_argument(
        "--forge-webhook",
        default=forge.DEFAULT_WEBHOOK_URL,
        help="where Gitea sends signed push webhooks (default: the controller's default address)",
    )
    u.add_argument(
        "--prometheus",
        action="store_true",
        help="also run a real Prometheus (Debian's package) scraping DCGM-exporter metrics of "
        "every fake node and the controllers in DIR/prometheus/controllers.json; its URL in "
        "DIR/prometheus-url",
    )
    u.set_defaults(func=_up)
    s = tsub.add_parser("simulate", help="run the GPU Operator/NVML simulator in the foreground")
    s.add_argument(
        "--dir", required=True, type=Path, help="the testbed's directory (state, logs, kubeconfig)"
    )
    s.add_argument("--tick", type=float, default=0.5, help="simulator time step in seconds")
    s.add_argument(
        "--operator",
        choices=("auto", *operator.OPERATOR_MODES),
        default="auto",
        help="real: play only the hosts beside the real operator; auto: real when the testbed "
        "in DIR runs it",
    )
    s.set_defaults(func=_simulate)
    f = tsub.add_parser("fault", help="inject (or --clear) a fault on a fake node")
    f.add_argument("node", help="the fake node")
    f.add_argument("fault", nargs="?", choices=sim.FAULTS, help="the fault to inject")
    f.add_argument("--clear", action="store_true", help="remove the fault instead")
    f.add_argument(
        "--dir", required=True, type=Path, help="the testbed's directory (state, logs, kubeconfig)"
    )
    f.set_defaults(func=_fault)
    d = tsub.add_parser("down", help="stop the processes and remove DIR")
    d.add_argument(
        "--dir", required=True, type=Path, help="the testbed's directory (state, logs, kubeconfig)"
    )
    d.set_defaults(func=_down)


def _build(_args: argparse.Namespace) -> int:
    try:
        bins = build.ensure_binaries()
        op = operator_build.ensure_operator()
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, value in vars(bins).items():
        print(f"{name}: {value}")
    print(f"gpu_operator: {op.binary} (assets {op.assets})")
    print(f"gitea: {forge.ensure_gitea()}")
    return 0


def _up(args: argparse.Namespace) -> int:
    try:
        tb = session.start(
            args.dir,
            fleet=args.fleet,
            nodes_per_pool=args.nodes_per_pool,
            crds_dir=args.crds,
            operator_mode=args.operator,
            cluster=args.cluster,
        )
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.simulate:
        controlplane.spawn_simulator(tb.state, args.tick, plays_operator=args.operator == "sim")
        print(f"simulator running (tick {args.tick}s); log in {tb.dir / 'logs' / 'simulator.log'}")
    if args.forge:
        try:
            _up_forge(args, tb)
        except GitopsGpuError as exc:
            print(f"error: {exc}", file=sys.stderr)
            session.stop(args.dir)
            return 1
    if args.prometheus:
        try:
            url = prometheus.start(tb.state)
        except GitopsGpuError as exc:
            print(f"error: {exc}", file=sys.stderr)
            session.stop(args.dir)
            return 1
        print(f"prometheus up: {url} ({tb.dir / 'prometheus-url'})")
        print(f"  gitops-gpu controller ... --prometheus-url {url}")
    print(f"testbed up: {tb.state.server} (GPU Operator: {args.operator})")
    print(f"  export KUBECONFIG={tb.kubeconfig}")
    print(f"  {len(tb.node_names)} fake GPU nodes; logs in {tb.dir / 'logs'}")
    print(f"  stop with: gitops-gpu testbed down --dir {args.dir}")
    return 0


def _up_forge(args: argparse.Namespace, tb: session.Testbed) -> None:
    fleet = args.fleet or paths.fleet_example()
    f = forge.up(tb.state, fleet, webhook_url=args.forge_webhook, progress=build._stderr)
    print(f"forge up: {f.url} (repo {f.repo}); {tb.dir / 'forge.json'}")
    print(f"  export GITOPS_GPU_GIT_TOKEN=$(cat {f.token_file})")
    print(f"  export GITOPS_GPU_STATUS_TOKEN=$(cat {f.token_file})")
    print(
        f"  gitops-gpu controller --repo {f.clone_url} --status-backend {f.status_backend}"
        f" --kubeconfig {tb.kubeconfig} --webhook-secret-file {f.work / 'webhook-secret'}"
    )


def _down(args: argparse.Namespace) -> int:
    stopped = session.stop(args.dir)
    print(
        "testbed stopped" if stopped else f"no testbed state in {args.dir}; removed what was there"
    )
    return 0


def _client(directory: Path) -> kube.Client:
    state = controlplane.State.load(directory.resolve())
    if state is None:
        raise GitopsGpuError(f"no testbed in {directory}", fix="gitops-gpu testbed up --dir DIR")
    return kube.Client.from_kubeconfig(str(state.kubeconfig))


def _simulate(args: argparse.Namespace) -> int:
    mode = args.operator
    if mode == "auto":
        state = controlplane.State.load(args.dir.resolve())
        mode = "real" if state is not None and operator.PROCESS in state.pids else "sim"
    sim_ = simulator.Simulator(
        _client(args.dir),
        tick=args.tick,
        report_fn=SnapshotReports(),
        plays_operator=mode == "sim",
    )
    what = "the GPU Operator and the hosts" if mode == "sim" else "the hosts (operator: real)"
    print(f"simulating {what} every {args.tick}s (Ctrl-C stops)", flush=True)
    try:
        sim_.run()
    except KeyboardInterrupt:
        sim_.stop()
    return 0


def _fault(args: argparse.Namespace) -> int:
    if not args.clear and args.fault is None:
        print("error: name a fault or pass --clear", file=sys.stderr)
        return 2
    value = None if args.clear else args.fault
    client = _client(args.dir)
    client.patch("v1", "Node", args.node, {"metadata": {"annotations": {sim.FAULT_ANN: value}}})
    smoke_fault.apply_fault(client, args.node, value)
    print(f"{args.node}: fault {'cleared' if value is None else value}")
    return 0
