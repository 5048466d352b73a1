"""Plan accuracy on the real GPU Operator: what `plan --base` predicts vs what the testbed saw.

    python bench/plan_accuracy.py

The testbed with the real GPU Operator v26.7.0 (the e2e harness), fleet-repo-example with fast
gates, one KWOK node per pool, a controller. For each kind of change (driver bump, toolkit
bump, device-plugin config switch, MIG profile change, a comment-only change, a cluster-wide
operand change) it asks `gitops-gpu plan --base` what will happen, pushes the commit, watches
every node and operand pod until the rollout settles, and compares per pool: operand pods
replaced (pod UIDs), driver pod replaced, node cordoned (tests/e2e/plan_accuracy.py; what the
testbed cannot show is said there). Prints the table; exits non-zero on any miss.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]
from conftest import FleetRemote  # noqa: E402
from e2e_harness import Env  # noqa: E402
from plan_accuracy import measure, table  # noqa: E402

from gitops_gpu_dev import paths  # noqa: E402
from gitops_gpu_dev.testbed import session  # noqa: E402


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="plan-accuracy-"))
    tb = session.start(tmp / "tb", die_with_parent=True, progress=lambda m: print(f"  {m}"))
    env = Env(tb, FleetRemote(tmp, paths.fleet_example()), tmp, operator="real")
    try:
        rows = measure(env, print)
    finally:
        env.close()
        session.stop(tmp / "tb")
    print()
    print(table(rows), end="")
    misses = [r for r in rows if not r.ok]
    print(f"target: every prediction matches what the operator did; misses: {len(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
