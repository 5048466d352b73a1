"""The git-notes status backend against real repositories on disk.

A bare repository plays the fleet repo's server; clones play controllers (two at once during a
hand-over, or one that restarts with an empty working copy).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout.actions import Action, SetStatus
from gitops_gpu.rollout.gitnotes import NOTES_REF, GitNotesBackend
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.status import (
    FAILURE,
    PENDING,
    SUCCESS,
    CommitStatus,
    read_record,
    stage_context,
)

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
CANARY = stage_context("canary")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


class Remote:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bare = root / "fleet.git"
        git(root, "init", "--quiet", "--bare", "-b", "main", str(self.bare))
        seed = root / "seed"
        git(root, "clone", "--quiet", str(self.bare), str(seed))
        self.shas = []
        for n in range(3):
            (seed / "fleet.yaml").write_text(f"version: {n}\n")
            git(seed, "add", "fleet.yaml")
            git(seed, "commit", "--quiet", "-m", f"commit {n}")
            self.shas.append(git(seed, "rev-parse", "HEAD"))
        git(seed, "push", "--quiet", "origin", "main")
        self._clones = 0

    def clone(self) -> Path:
        self._clones += 1
        path = self.root / f"controller-{self._clones}"
        git(self.root, "clone", "--quiet", str(self.bare), str(path))
        return path

    def note(self, sha: str) -> list[dict[str, Any]]:
        text = git(self.bare, "notes", "--ref", NOTES_REF, "show", sha)
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return Remote(tmp_path)


def status(
    sha: str, state: str, description: str, context: str = CANARY, at: float = 1.0
) -> CommitStatus:
    return CommitStatus(sha, context, state, description, created_at=at)


def test_statuses_are_pushed_and_survive_a_restarted_controller(remote: Remote) -> None:
    sha = remote.shas[-1]
    first = GitNotesBackend(remote.clone(), sleep=lambda _s: None)
    first.refresh()  # no notes on the remote yet: not an error
    assert first.list_statuses(sha) == []
    assert first.set_status(status(sha, PENDING, "canary: rolling out", at=10.0))
    assert first.set_status(status(sha, SUCCESS, "canary: 2/2 nodes", at=20.0))
    assert [e["state"] for e in remote.note(sha)] == [PENDING, SUCCESS]

    restarted = GitNotesBackend(remote.clone())  # fresh clone: no local notes at all
    assert restarted.list_statuses(sha) == []
    record = read_record(restarted, remote.shas)
    assert [(s.state, s.description, s.created_at) for s in record] == [
        (PENDING, "canary: rolling out", 10.0),
        (SUCCESS, "canary: 2/2 nodes", 20.0),
    ]
    assert restarted.latest(sha, CANARY) == record[-1]


def test_a_stale_writer_merges_instead_of_overwriting(remote: Remote) -> None:
    sha = remote.shas[0]
    a = GitNotesBackend(remote.clone(), sleep=lambda _s: None)
    b = GitNotesBackend(remote.clone(), sleep=lambda _s: None)
    a.refresh()
    b.refresh()
    assert a.set_status(status(sha, PENDING, "canary: rolling out"))
    # b has not fetched: its push is rejected, it fetches, re-applies on top and pushes.
    assert b.set_status(
        status(sha, PENDING, "production: rolling out", stage_context("production"))
    )
    assert [e["context"] for e in remote.note(sha)] == [CANARY, stage_context("production")]
    a.refresh()
    assert len(a.list_statuses(sha)) == 2


def test_the_same_status_from_two_controllers_is_written_once(remote: Remote) -> None:
    sha = remote.shas[1]
    a = GitNotesBackend(remote.clone(), sleep=lambda _s: None)
    b = GitNotesBackend(remote.clone(), sleep=lambda _s: None)
    assert a.set_status(status(sha, SUCCESS, "canary: 2/2 nodes", at=1.0))
    assert not b.set_status(status(sha, SUCCESS, "canary: 2/2 nodes", at=2.0))
    assert len(remote.note(sha)) == 1
    # and pending never goes over that verdict, even from the stale controller
    assert not b.set_status(status(sha, PENDING, "canary: rolling out"))
    assert b.set_status(status(sha, FAILURE, "canary: re-verified, 1 node degraded"))
    assert [e["state"] for e in remote.note(sha)] == [SUCCESS, FAILURE]


def test_concurrent_writers_lose_nothing(remote: Remote) -> None:
    sha = remote.shas[-1]
    writers = [GitNotesBackend(remote.clone(), base_delay=0.01) for _ in range(3)]
    errors: list[BaseException] = []

    def write(index: int, backend: GitNotesBackend) -> None:
        try:
            for n in range(6):
                context = stage_context(f"w{index}-{n}")
                backend.set_status(status(sha, PENDING, f"writer {index} status {n}", context))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i, w)) for i, w in enumerate(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    contexts = [e["context"] for e in remote.note(sha)]
    assert sorted(contexts) == sorted(
        stage_context(f"w{i}-{n}") for i in range(3) for n in range(6)
    )
    # each writer's own entries stay in its write order
    for i in range(3):
        mine = [c for c in contexts if c.startswith(stage_context(f"w{i}-"))]
        assert mine == [stage_context(f"w{i}-{n}") for n in range(6)]


def test_notes_do_not_touch_the_branch(remote: Remote) -> None:
    backend = GitNotesBackend(remote.clone())
    before = git(remote.bare, "rev-parse", "main")
    backend.set_status(status(remote.shas[0], PENDING, "canary: rolling out"))
    assert git(remote.bare, "rev-parse", "main") == before
    assert git(remote.bare, "log", "--format=%H", "main") == "\n".join(reversed(remote.shas))


def test_local_only_notes(remote: Remote) -> None:
    path = remote.clone()
    backend = GitNotesBackend(path, remote=None)
    assert backend.set_status(status(remote.shas[0], PENDING, "canary: rolling out"))
    backend.refresh()
    assert len(backend.list_statuses(remote.shas[0])) == 1
    assert git(remote.bare, "for-each-ref", NOTES_REF) == ""


def test_unknown_commit_and_unreachable_remote_fail_with_a_fix(
    remote: Remote, tmp_path: Path
) -> None:
    backend = GitNotesBackend(remote.clone())
    with pytest.raises(StatusBackendError) as info:
        backend.set_status(status("ab" * 20, PENDING, "x"))
    assert "fetch the tracked branch" in str(info.value)

    path = remote.clone()
    git(path, "remote", "set-url", "origin", str(tmp_path / "gone.git"))
    with pytest.raises(StatusBackendError) as info:
        GitNotesBackend(path).refresh()
    assert "git fetch origin" in str(info.value)
    with pytest.raises(StatusBackendError) as info:
        GitNotesBackend(path, attempts=2, sleep=lambda _s: None).set_status(
            status(remote.shas[0], PENDING, "x")
        )
    assert "could not" in str(info.value)


def test_unreadable_lines_are_skipped(remote: Remote) -> None:
    path = remote.clone()
    sha = remote.shas[0]
    git(
        path,
        "notes",
        "--ref",
        NOTES_REF,
        "add",
        "-m",
        'garbage\n{"context": "c", "state": "success"}',
        sha,
    )
    backend = GitNotesBackend(path, remote=None)
    assert [(s.context, s.state) for s in backend.list_statuses(sha)] == [("c", SUCCESS)]


def test_a_restarted_controller_resumes_the_soak_from_the_notes(remote: Remote) -> None:
    sha = remote.shas[-1]
    stage = StageSpec("canary", ("canary",), GateSpec(soak_seconds=600))
    pools = {"canary": PoolObservation("canary", sha, True, 2, 2, summary="on 580.126.20")}
    t0 = 1_750_000_000.0

    def run_pass(backend: GitNotesBackend, now: float) -> list[Action]:
        record = read_record(backend, [sha])
        actions = step(RolloutInput((Commit(sha, True),), record, pools, (stage,), now))
        for action in actions:
            if isinstance(action, SetStatus):
                backend.set_status(action.to_status(now))
        return actions

    run_pass(GitNotesBackend(remote.clone()), t0)  # converged at once: soaking since t0
    restarted = GitNotesBackend(remote.clone())  # a new pod, a new clone
    assert not any(isinstance(a, SetStatus) for a in run_pass(restarted, t0 + 599))
    done = run_pass(restarted, t0 + 600)
    assert [(a.state, a.description) for a in done if isinstance(a, SetStatus)] == [
        (SUCCESS, "canary: 2/2 nodes on 580.126.20, soaked 10m")
    ]
    assert [e["state"] for e in remote.note(sha)] == [SUCCESS, PENDING, SUCCESS]


def test_an_idle_refresh_fetches_and_reads_nothing(remote: Remote) -> None:
    """Wired to the fleet source's ls-remote (remote_ref), a refresh fetches only when the
    remote notes moved, and a note is read once until then."""
    sha = remote.shas[-1]
    seen: dict[str, str | None] = {"ref": None}
    backend = GitNotesBackend(remote.clone(), sleep=lambda _s: None)
    backend.remote_ref = lambda: seen["ref"]
    ran: list[str] = []
    real = backend._git

    def counting(*args: str, stdin: str | None = None) -> Any:
        ran.append(args[0] if args[0] != "notes" else f"notes {args[3]}")
        return real(*args, stdin=stdin)

    backend._git = counting  # type: ignore[method-assign]

    def ls_remote() -> str:
        out = subprocess.run(
            ["git", "ls-remote", str(remote.bare), NOTES_REF],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.split("\t")[0] if out else ""

    backend.refresh()  # unknown remote ref: fetches
    assert ran == ["fetch"] and backend.list_statuses(sha) == []
    seen["ref"] = ls_remote()  # "": nobody wrote yet
    ran.clear()
    for _ in range(3):
        backend.refresh()
        assert backend.list_statuses(sha) == []
    assert ran == []  # nothing fetched, nothing read again
    assert backend.set_status(status(sha, PENDING, "canary: rolling out", at=10.0))
    seen["ref"] = ls_remote()  # our own push
    ran.clear()
    backend.refresh()
    assert [s.state for s in backend.list_statuses(sha)] == [PENDING]
    assert ran == ["notes show"]
    other = GitNotesBackend(remote.clone(), sleep=lambda _s: None)
    other.refresh()
    assert other.set_status(status(sha, SUCCESS, "canary: 2/2 nodes", at=20.0))
    seen["ref"] = ls_remote()  # another writer's push: fetched and read again
    ran.clear()
    backend.refresh()
    assert [s.state for s in backend.list_statuses(sha)] == [PENDING, SUCCESS]
    assert ran[0] == "fetch" and "notes show" in ran
