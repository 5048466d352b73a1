"""`gitops-gpu demo`: testbed + simulator + controller on fleet-repo-example, live."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from gitops_gpu_dev import demo, demo_clusters, demo_forge, demo_gates, paths
from gitops_gpu_dev.testbed import operator, session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="staged rollout on a local control plane with fake GPU nodes")
    p.add_argument(
        "--dir",
        type=Path,
        default=paths.PROJECT_ROOT / ".testbed" / "demo",
        help="working directory (testbed state, fleet repo, caches)",
    )
    p.add_argument("--keep", action="store_true", help="leave the control plane running")
    p.add_argument(
        "--forge",
        action="store_true",
        help="instead: the pull-request story on a real Gitea (in DIR-forge): preflight status, "
        "branch protection, merge, webhook, stage statuses in Gitea",
    )
    p.add_argument(
        "--gates",
        action="store_true",
        help="instead: gates that test the GPUs (in DIR-gates): a canary smoke test and an Xid "
        "metric on a real Prometheus, failing once on each",
    )
    p.add_argument(
        "--clusters",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: instead, fleet-repo-example-two-clusters on two control planes (in "
        "DIR-clusters), one controller per cluster, a stage spanning both (docs/multi-cluster.md)",
    )
    p.add_argument("--nodes-per-pool", type=int, default=2, help="fake GPU nodes per pool (2)")
    p.add_argument(
        "--verify-signatures",
        action="store_true",
        help="sign the demo's commits with a generated key, trust only it, and show an "
        "unsigned commit held back (docs/trust.md)",
    )
    p.add_argument(
        "--operator",
        choices=operator.OPERATOR_MODES,
        default=operator.DEFAULT_MODE,
        help="the GPU Operator: real (v26.7.0 as a process) or sim "
        f"(default {operator.DEFAULT_MODE})",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.forge:
        return _run_forge(args)
    if args.gates:
        return _run_gates(args)
    if args.clusters == 2:
        workdir: Path = args.dir.with_name(args.dir.name + "-clusters")
        demo_clusters.reset(workdir)
        return demo_clusters.run(workdir, keep=args.keep, nodes_per_pool=1)
    if args.dir.exists():
        # A previous demo's state: stop what it left running, start clean.
        session.stop(args.dir / "testbed")
        shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    return demo.run(
        args.dir,
        keep=args.keep,
        nodes_per_pool=args.nodes_per_pool,
        operator_mode=args.operator,
        verify_signatures=args.verify_signatures,
    )


def _run_gates(args: argparse.Namespace) -> int:
    workdir: Path = args.dir.with_name(args.dir.name + "-gates")
    if workdir.exists():
        session.stop(workdir / "testbed")
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return demo_gates.run(
        workdir, keep=args.keep, nodes_per_pool=args.nodes_per_pool, operator_mode=args.operator
    )


def _run_forge(args: argparse.Namespace) -> int:
    workdir: Path = args.dir.with_name(args.dir.name + "-forge")
    if workdir.exists():
        session.stop(workdir / "testbed")
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return demo_forge.run(
        workdir, keep=args.keep, nodes_per_pool=args.nodes_per_pool, operator_mode=args.operator
    )
