"""Git notes in the fleet repo as the promotion record (the default backend; any Git server).

Each commit's statuses are one note under ``refs/notes/gitops-gpu``: one JSON object per line,
appended in write order (so the list is oldest first without trusting anyone's clock). Readers
``refresh()`` with ``git fetch origin +refs/notes/gitops-gpu:refs/notes/gitops-gpu``; writers
push the ref after every status.

Concurrent writers (two controllers during a leader hand-over, a CLI `approve` next to the
controller) race on one ref. A push that is not a fast-forward is rejected; the writer then
fetches the remote notes (dropping its own unpushed note commit), re-reads the note, re-checks
idempotence (the other writer may have written the same status) and appends again on top: a
retry loop, bounded, with short jittered sleeps. Nothing pushed is ever lost; a status whose
push failed entirely raises and is re-decided on the next pass.

``remote=None`` (spec ``gitnotes:.``) keeps notes in the local repository only.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout.status import CommitStatus, StatusBackend, should_write

log = logging.getLogger(__name__)

NOTES_REF = "refs/notes/gitops-gpu"
# Who the notes commits are by; the controller may run without any git identity configured.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "gitops-gpu",
    "GIT_AUTHOR_EMAIL": "gitops-gpu@localhost",
    "GIT_COMMITTER_NAME": "gitops-gpu",
    "GIT_COMMITTER_EMAIL": "gitops-gpu@localhost",
}


class GitNotesBackend(StatusBackend):
    name = "gitnotes"

    def __init__(
        self,
        repo_path: str | Path,
        *,
        remote: str | None = "origin",
        attempts: int = 24,
        base_delay: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
        git_env: Mapping[str, str] | None = None,
    ) -> None:
        self.repo_path = Path(repo_path)
        self.remote = remote
        # The remote's notes ref as the fleet source's last poll saw it ("" absent, None
        # unknown), when the controller wires it: refresh() then fetches only when it moved.
        self.remote_ref: Callable[[], str | None] | None = None
        self._synced: str | None = None  # the remote notes sha the local ref is known to hold
        self._notes: dict[str, list[CommitStatus]] = {}  # sha -> its note, for the local ref
        self._attempts = attempts
        self._base_delay = base_delay
        self._sleep = sleep
        self._lock = threading.Lock()
        # C locale: we match git's messages; no prompt: a missing credential must fail, not hang.
        # git_env: the fleet remote's credentials (sync.source.credentials_env), same as fetches.
        self._env = {
            **os.environ,
            **(git_env or {}),
            **_IDENTITY,
            "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0",
        }

    # --- reading ------------------------------------------------------------------------------
    def refresh(self) -> None:
        with self._lock:
            seen = self.remote_ref() if self.remote_ref is not None else None
            if self.remote is not None and seen is not None and seen == self._synced:
                return  # an idle pass: no fetch, and the notes read last pass still hold
            self._fetch()

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        with self._lock:
            if self.remote is None:  # notes written in place by others: read through
                return self._read(sha)
            if sha not in self._notes:
                self._notes[sha] = self._read(sha)
            return list(self._notes[sha])

    # --- writing ------------------------------------------------------------------------------
    def _write(self, status: CommitStatus) -> bool:
        with self._lock:
            # git would happily attach a note to an object id it does not have.
            known = self._git("cat-file", "-e", f"{status.sha}^{{commit}}")
            if known.returncode != 0:
                raise self._object_error(status.sha, known.stderr or "no such commit")
            problem = ""
            for attempt in range(1, self._attempts + 1):
                entries = self._read(status.sha)  # re-read: a writer may have pushed since
                if not should_write(self.latest_trusted(entries, status.context), status):
                    return False
                self._store(status.sha, [*entries, status])
                if self.remote is None:
                    return True
                push = self._git("push", "--quiet", self.remote, f"{NOTES_REF}:{NOTES_REF}")
                if push.returncode == 0:
                    self._synced = self._local_ref()
                    return True
                problem = push.stderr.strip()
                log.info(
                    "notes push rejected (attempt %d/%d), merging with the remote: %s",
                    attempt,
                    self._attempts,
                    problem.splitlines()[-1] if problem else "",
                )
                self._fetch()
                # Exponential and jittered: writers that collided spread out.
                self._sleep(self._base_delay * 2 ** min(attempt, 6) * random.random())
            raise StatusBackendError(
                f"could not push {NOTES_REF} to {self.remote} after {self._attempts} attempts: "
                f"{problem}",
                fix=f"check that the controller may push to {self.remote} "
                f"(git push {self.remote} {NOTES_REF}); the status is retried next pass",
            )

    # --- git ----------------------------------------------------------------------------------
    def _git(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                ["git", "-C", str(self.repo_path), *args],
                input=stdin,
                capture_output=True,
                text=True,
                errors="replace",  # the remote's messages are the remote's bytes
                env=self._env,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StatusBackendError(
                f"git {args[0]} in {self.repo_path} failed: {exc}",
                fix="check that git is installed and the remote is reachable",
            ) from None

    def _local_ref(self) -> str:
        done = self._git("rev-parse", "-q", "--verify", NOTES_REF)
        return done.stdout.strip() if done.returncode == 0 else ""

    def _fetch(self) -> None:
        self._notes.clear()
        self._synced = None
        if self.remote is None:
            return
        done = self._git("fetch", "--quiet", "--no-tags", self.remote, f"+{NOTES_REF}:{NOTES_REF}")
        if done.returncode == 0:
            self._synced = self._local_ref()
            return
        if "couldn't find remote ref" in done.stderr:
            self._synced = ""
            return  # nobody has written a status yet
        raise StatusBackendError(
            f"could not fetch {NOTES_REF} from {self.remote} in {self.repo_path}: "
            f"{done.stderr.strip()}",
            fix=f"check that {self.remote} is reachable (git fetch {self.remote})",
        )

    def _read(self, sha: str) -> list[CommitStatus]:
        shown = self._git("notes", "--ref", NOTES_REF, "show", sha)
        if shown.returncode != 0:
            if "no note found" in shown.stderr.lower():
                return []
            raise self._object_error(sha, shown.stderr)
        entries = []
        for number, line in enumerate(shown.stdout.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                entries.append(
                    CommitStatus(
                        sha=sha,
                        context=str(data["context"]),
                        state=str(data["state"]),
                        description=str(data.get("description", "")),
                        target_url=str(data.get("target_url", "")),
                        created_at=float(data.get("created_at", 0.0)),
                        seal=str(data.get("seal", "")),
                    )
                )
            except (ValueError, KeyError, TypeError):
                log.warning(
                    "skipping unreadable line %d of the %s note on %s", number, NOTES_REF, sha
                )
        return entries

    def _store(self, sha: str, entries: list[CommitStatus]) -> None:
        self._notes.pop(sha, None)
        text = "".join(
            json.dumps(
                {
                    "context": e.context,
                    "state": e.state,
                    "description": e.description,
                    "target_url": e.target_url,
                    "created_at": e.created_at,
                    **({"seal": e.seal} if e.seal else {}),
                },
                sort_keys=True,
            )
            + "\n"
            for e in entries
        )
        done = self._git(
            "notes", "--ref", NOTES_REF, "add", "--force", "--file", "-", sha, stdin=text
        )
        if done.returncode != 0:
            raise self._object_error(sha, done.stderr)

    def _object_error(self, sha: str, stderr: str) -> StatusBackendError:
        return StatusBackendError(
            f"git notes on {sha[:12]} in {self.repo_path} failed: {stderr.strip()}",
            fix="the commit must exist in the controller's clone: fetch the tracked branch first",
        )
