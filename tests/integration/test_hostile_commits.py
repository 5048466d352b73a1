"""Hostile commits through `gitops-gpu check` (its own process, peak RSS measured by the
kernel) and through controller passes on the real testbed: no traceback, bounded memory,
nothing applied from a failing commit, and a fix-forward still rolls out."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hostile_cases import CASES, Case, crafted_escape_commit, git

from gitops_gpu import names
from gitops_gpu.controller import Controller
from gitops_gpu.pass_types import Config
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration
EXTRA_RSS_LIMIT = 256 << 20


def run_check(*args: str, cwd: Path | None = None) -> tuple[int, str, int]:
    """`gitops-gpu check ARGS` as its own process: (exit code, stdout+stderr, peak RSS bytes)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitops_gpu", "check", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
    )
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out, usage.ru_maxrss * 1024


@pytest.fixture(scope="module")
def baseline_rss() -> int:
    """Peak RSS of `check` on the untouched example fleet: what every case is measured from."""
    rc, out, rss = run_check(str(paths.fleet_example()))
    assert rc == 0, out
    return rss


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_survives_hostile_commit(case: Case, fleet_remote: Any, baseline_rss: int) -> None:
    fleet_remote.commit(case.name, case.edit)
    rc, out, rss = run_check(str(fleet_remote.work))
    assert "Traceback" not in out, out
    if case.message is None:
        assert rc == 0, out
    else:
        assert rc == 1 and case.message in out, out
    assert rss - baseline_rss < EXTRA_RSS_LIMIT, f"peak RSS {rss >> 20} MiB"


def test_check_base_never_writes_outside_the_export(fleet_remote: Any, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    crafted = crafted_escape_commit(fleet_remote.work, outside)
    rc, out, _ = run_check(str(fleet_remote.work), "--base", crafted)
    assert "Traceback" not in out, out
    assert not (outside / "pwn.txt").exists()
    assert rc == 0 and "GG040" in out and "below the symlink zz" in out, out


def _canary_commit(tb: Testbed) -> str | None:
    items = tb.client.list(*names.NVIDIA_DRIVER_API)["items"]
    by_pool = {
        (i["metadata"].get("annotations") or {}).get(names.POOL_ANNOTATION): i for i in items
    }
    canary = by_pool.get("canary")
    return (
        (canary["metadata"].get("annotations") or {}).get(names.COMMIT_ANNOTATION)
        if canary
        else None
    )


def test_controller_passes_survive_every_hostile_commit(
    clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path
) -> None:
    cfg = Config(repo=fleet_remote.url, cache_dir=tmp_path / "ctl", interval=0.1)
    ctl = Controller(cfg, clean_cluster.client)
    ctl.start_informers()
    try:
        good = git(fleet_remote.work, "rev-parse", "HEAD")
        assert ctl.run_pass().result == "ok"
        assert _canary_commit(clean_cluster) == good
        applied = {good}
        for case in CASES:
            git(fleet_remote.work, "reset", "-q", "--hard", good)
            git(fleet_remote.work, "clean", "-qfdx")
            sha = fleet_remote.commit(case.name, case.edit)
            # Each case replaces the last (a force-push): a person accepts that history.
            ctl.ledger.accept(sha, "test", time.time())
            report = ctl.run_pass()
            assert report.result == "ok", (case.name, report.error)
            verdict = ctl.checked(sha)
            assert verdict is not None
            if case.message is None:
                assert verdict.ok, (case.name, verdict.summary)
                applied.add(sha)
            else:
                # The controller reads the commit through the safe export, which refuses a
                # symlinked fleet file before the loader would see where it points.
                said = case.message in verdict.summary or "is a symlink" in verdict.summary
                assert not verdict.ok and said, (case.name, verdict.summary)
            assert _canary_commit(clean_cluster) in applied, case.name
            good = sha if case.message is None else good
        # A fix-forward after all of it still rolls out.
        git(fleet_remote.work, "reset", "-q", "--hard", good)
        fix = fleet_remote.commit("fix forward", lambda w: None)
        assert ctl.run_pass().result == "ok"
        assert _canary_commit(clean_cluster) == fix
    finally:
        ctl.stop_informers()
