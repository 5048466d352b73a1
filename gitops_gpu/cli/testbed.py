"""`gitops-gpu testbed up|down|build`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.testbed import build, session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("testbed", help="local control plane: build, up, down")
    tsub = p.add_subparsers(dest="testbed_cmd", required=True)
    b = tsub.add_parser("build", help="build or reuse the control-plane binaries")
    b.set_defaults(func=_build)
    u = tsub.add_parser("up", help="start etcd, kube-apiserver, kube-controller-manager, kwok")
    u.add_argument("--dir", required=True, type=Path)
    u.add_argument("--fleet", type=Path, help="fleet repo whose pools get fake GPU nodes")
    u.add_argument("--nodes-per-pool", type=int, default=2)
    u.add_argument("--crds", type=Path, help="GPU Operator CRDs (default ../shared/upstream/...)")
    u.set_defaults(func=_up)
    d = tsub.add_parser("down", help="stop the processes and remove DIR")
    d.add_argument("--dir", required=True, type=Path)
    d.set_defaults(func=_down)


def _build(_args: argparse.Namespace) -> int:
    bins = build.ensure_binaries()
    for name, value in vars(bins).items():
        print(f"{name}: {value}")
    return 0


def _up(args: argparse.Namespace) -> int:
    try:
        tb = session.start(
            args.dir, fleet=args.fleet, nodes_per_pool=args.nodes_per_pool, crds_dir=args.crds
        )
    except GitopsGpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"testbed up: {tb.state.server}")
    print(f"  export KUBECONFIG={tb.kubeconfig}")
    print(f"  {len(tb.node_names)} fake GPU nodes; logs in {tb.dir / 'logs'}")
    print(f"  stop with: gitops-gpu testbed down --dir {args.dir}")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = session.stop(args.dir)
    print(
        "testbed stopped" if stopped else f"no testbed state in {args.dir}; removed what was there"
    )
    return 0
