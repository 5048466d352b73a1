"""Three clusters' controllers write git-notes statuses for the same commit at the same moment:
each has its own clone of the fleet remote and pushes refs/notes/gitops-gpu there. Rejected
pushes are merged and retried (rollout/gitnotes.py); no status may be lost, and the stage
verdict that all three derive at once is recorded once."""

from __future__ import annotations

import logging
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.rollout import span
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import PENDING, SUCCESS, CommitStatus, stage_context

pytestmark = pytest.mark.integration
CLUSTERS = ("a", "b", "c")
ROUNDS = 6  # statuses per cluster's part context


def test_three_controllers_never_lose_a_status(
    fleet_remote: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: Any
) -> None:
    sha = fleet_remote.commit("a commit every cluster rolls out")
    backends = {}
    for name in CLUSTERS:
        clone = tmp_path / f"clone-{name}"
        subprocess.run(["git", "clone", "-q", fleet_remote.url, str(clone)], check=True)
        backends[name] = GitNotesBackend(clone)
    start = threading.Barrier(len(CLUSTERS))
    failures: list[BaseException] = []
    verdict = CommitStatus(
        sha, stage_context("fleet"), SUCCESS, "fleet: passed in clusters a, b, c"
    )

    def controller(name: str) -> None:
        backend = backends[name]
        try:
            start.wait()
            for n in range(ROUNDS):
                state = SUCCESS if n == ROUNDS - 1 else PENDING
                context = span.cluster_context("fleet", name)
                backend.set_status(CommitStatus(sha, context, state, f"fleet: step {n} in {name}"))
            backend.refresh()
            backend.set_status(verdict)  # all three derive the same verdict at once
        except BaseException as exc:  # reported below, with the thread's name
            failures.append(exc)

    caplog.set_level(logging.INFO, logger="gitops_gpu.rollout.gitnotes")
    threads = [threading.Thread(target=controller, args=(n,)) for n in CLUSTERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures

    record = GitNotesBackend(fleet_remote.bare, remote=None).list_statuses(sha)
    per_context: dict[str, list[str]] = {}
    for status in record:
        per_context.setdefault(status.context, []).append(status.description)
    for name in CLUSTERS:
        assert per_context[span.cluster_context("fleet", name)] == [
            f"fleet: step {n} in {name}" for n in range(ROUNDS)
        ]
    assert per_context[stage_context("fleet")] == [verdict.description]
    rejected = sum("notes push rejected" in r.getMessage() for r in caplog.records)
    with capsys.disabled():
        counts = {c.rsplit("/", 1)[-1]: len(v) for c, v in sorted(per_context.items())}
        print(f"\n[measure] 3 writers: statuses per context {counts}, {rejected} pushes retried")
