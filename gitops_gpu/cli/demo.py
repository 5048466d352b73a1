"""`gitops-gpu demo`: testbed + simulator + controller on fleet-repo-example, live."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from gitops_gpu import demo, paths
from gitops_gpu.testbed import session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="staged rollout on a local control plane with fake GPU nodes")
    p.add_argument(
        "--dir",
        type=Path,
        default=paths.PROJECT_ROOT / ".testbed" / "demo",
        help="working directory (testbed state, fleet repo, caches)",
    )
    p.add_argument("--keep", action="store_true", help="leave the control plane running")
    p.add_argument("--nodes-per-pool", type=int, default=2)
    p.add_argument(
        "--verify-signatures",
        action="store_true",
        help="sign the demo's commits with a generated key, trust only it, and show an "
        "unsigned commit held back (docs/trust.md)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.dir.exists():
        # A previous demo's state: stop what it left running, start clean.
        session.stop(args.dir / "testbed")
        shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    return demo.run(
        args.dir,
        keep=args.keep,
        nodes_per_pool=args.nodes_per_pool,
        verify_signatures=args.verify_signatures,
    )
