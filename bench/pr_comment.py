"""The pull-request comment at fleet size: a driver bump plus a toolkit bump on a 125-pool fleet.

    python bench/pr_comment.py [--pools 125]

Runs `gitops-gpu check --base` (in its own process, as CI runs it) on real git history, renders
the comment `--post-comment` would keep on the pull request, and prints its size and the time of
the check. Targets: the comment fits GitHub's 65,535 characters with its summary intact, and the
check takes under 15 s of wall time on 2 cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fleetbench import git, write_fleet

from gitops_gpu.cli.check import comment_body
from gitops_gpu.preflight import run_preflight
from gitops_gpu.rollout import pr_comment
from gitops_gpu_dev import paths

MAX_CHECK_SECONDS = 15.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pools", type=int, default=125)
    args = ap.parse_args()
    crds = str(paths.default_crds_dir())
    with tempfile.TemporaryDirectory(prefix="bench-comment-") as tmp:
        work = Path(tmp) / "fleet"
        work.mkdir()
        git(work, "init", "-q", "-b", "main")
        git(work, "config", "user.email", "b@example.com")
        git(work, "config", "user.name", "bench")
        write_fleet(work, args.pools)
        git(work, "add", "-A")
        git(work, "commit", "-qm", "base")
        base = git(work, "rev-parse", "HEAD")
        write_fleet(work, args.pools, driver="580.142.01")
        policy = work / "base" / "clusterpolicy.yaml"
        policy.write_text(policy.read_text().replace("v1.19.1", "v1.19.2"))  # the toolkit
        git(work, "commit", "-qam", "driver and toolkit bump")
        head = git(work, "rev-parse", "HEAD")
        t0 = time.perf_counter()
        argv = [sys.executable, "-m", "gitops_gpu", "check", str(work), "--base", base]
        out = subprocess.run(
            [*argv, "--crds", crds, "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - t0
        result = run_preflight(work, base_rev=base, crds_dir=crds)
        body = comment_body(result, head, pr_comment.LIMITS["github"])
    summary = next(line for line in body.splitlines() if line.startswith("- **"))
    cut = "more lines" in body
    print(f"pools: {args.pools}")
    print(
        f"check --base wall: {wall:.2f}s (target < {MAX_CHECK_SECONDS:.0f}s), exit {out.returncode}"
    )
    print(
        f"comment: {len(body)} characters (GitHub limit {pr_comment.LIMITS['github']}), cut: {cut}"
    )
    print(f"summary line: {summary}")
    ok = (
        out.returncode in (0, 1)
        and wall < MAX_CHECK_SECONDS
        and len(body) <= pr_comment.LIMITS["github"]
        and summary.startswith("- **cordons")
    )
    print("result: OK" if ok else "result: MISSED a target")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
