"""Three clusters' controllers write statuses for the same commit at the same moment.

Git notes: each has its own clone of the fleet remote and pushes refs/notes/gitops-gpu there.
Rejected pushes are merged and retried (rollout/gitnotes.py); no status may be lost, and the
stage verdict that all three derive at once is recorded once.

The forge (a real Gitea): statuses are appended by the API, so none can be lost; the verdict
all three derive at once may land more than once (read-then-post is not atomic), always with the
same state and text, which changes nothing for any reader."""

from __future__ import annotations

import logging
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.rollout import span
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import (
    PENDING,
    SUCCESS,
    CommitStatus,
    StatusBackend,
    stage_context,
)
from gitops_gpu_dev.testbed import gitea

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


def _race(backends: dict[str, StatusBackend], sha: str) -> None:
    """Each cluster's part, then the shared verdict, all three writers at once."""
    start = threading.Barrier(len(backends))
    failures: list[BaseException] = []
    verdict = CommitStatus(
        sha, stage_context("fleet"), SUCCESS, "fleet: passed in clusters a, b, c"
    )

    def controller(name: str) -> None:
        try:
            start.wait()
            for n in range(ROUNDS):
                state = SUCCESS if n == ROUNDS - 1 else PENDING
                context = span.cluster_context("fleet", name)
                text = f"fleet: step {n} in {name}"
                backends[name].set_status(CommitStatus(sha, context, state, text))
            backends[name].refresh()
            backends[name].set_status(verdict)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=controller, args=(n,)) for n in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures


def test_three_controllers_on_gitea_never_lose_a_status(
    gitea_repo_factory: Any, capsys: Any
) -> None:
    forge: gitea.Forge = gitea_repo_factory("three")
    sha = forge.api("GET", f"/repos/{forge.repo}/branches/main")["commit"]["id"]
    backends: dict[str, StatusBackend] = {
        n: GiteaBackend(forge.url, forge.owner, forge.name, forge.token) for n in CLUSTERS
    }
    _race(backends, sha)
    record = GiteaBackend(forge.url, forge.owner, forge.name, forge.token).list_statuses(sha)
    per_context: dict[str, list[str]] = {}
    for status in record:
        per_context.setdefault(status.context, []).append(status.description)
    for name in CLUSTERS:
        assert per_context[span.cluster_context("fleet", name)] == [
            f"fleet: step {n} in {name}" for n in range(ROUNDS)
        ]
    verdicts = per_context[stage_context("fleet")]
    assert 1 <= len(verdicts) <= len(CLUSTERS)
    assert set(verdicts) == {"fleet: passed in clusters a, b, c"}
    with capsys.disabled():
        counts = {c.rsplit("/", 1)[-1]: len(v) for c, v in sorted(per_context.items())}
        print(f"\n[measure] 3 writers on Gitea: statuses per context {counts}")
