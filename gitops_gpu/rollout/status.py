"""Commit statuses: the promotion record, and the interface every backend implements.

The rollout state machine keeps no private database: what each stage did to each commit is
written as commit statuses (contexts ``gitops-gpu/preflight`` and ``gitops-gpu/stage/<name>``)
and read back from the same backend on the next pass. That makes the record visible where people
already look (pull requests, ``git log --notes``) and lets a restarted controller resume.

Backend contract (all backends, see ``StatusBackend``):

- ``list_statuses(sha)`` returns every status the backend keeps for the commit, OLDEST FIRST, with
  no duplicates. The last entry for a context is its current state.
- ``set_status(status)`` is idempotent: a status identical (state, description, target_url) to
  the latest one for its (sha, context) is not written again, and ``pending`` is never written over
  a ``success``/``failure`` verdict (gitops-promoter#597). It returns whether it wrote.
- ``refresh()`` brings the local view up to date once per pass (git notes fetch; no-op for APIs).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

log = logging.getLogger(__name__)


class State(StrEnum):
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    # "did not finish": the commit was superseded at that stage (GitLab: canceled).
    ERROR = "error"


PENDING, SUCCESS, FAILURE, ERROR = State.PENDING, State.SUCCESS, State.FAILURE, State.ERROR
STATES = frozenset(State)
# Verdicts are final: nothing is ever written over them but another verdict.
VERDICTS = frozenset({SUCCESS, FAILURE})

CONTEXT_PREFIX = "gitops-gpu"
PREFLIGHT_CONTEXT = f"{CONTEXT_PREFIX}/preflight"
STAGE_CONTEXT_PREFIX = f"{CONTEXT_PREFIX}/stage/"
# Written by `gitops-gpu approve` (state success): approvals live in the record too.
APPROVAL_CONTEXT_PREFIX = f"{CONTEXT_PREFIX}/approval/"

# GitHub's limit; applied everywhere so a record moves between backends unchanged.
MAX_DESCRIPTION = 140


def stage_context(stage: str) -> str:
    return f"{STAGE_CONTEXT_PREFIX}{stage}"


def approval_context(stage: str) -> str:
    return f"{APPROVAL_CONTEXT_PREFIX}{stage}"


def fit_description(text: str, limit: int = MAX_DESCRIPTION) -> str:
    """Shorten to the provider limit, keeping the start (the part the machine parses)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class CommitStatus:
    sha: str
    context: str
    state: str
    description: str = ""
    target_url: str = ""
    # Seconds since the epoch; set by whoever created it (the backend's clock for HTTP APIs).
    created_at: float = 0.0
    # ``gg1.<key>.<ms>.<signature>`` (rollout/seal.py): who wrote it, as only a key holder can.
    seal: str = ""
    # The forge account that posted it, as the forge's API reports it ("" on git notes).
    creator: str = ""

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"commit status state {self.state!r} is not one of {sorted(STATES)}")
        object.__setattr__(self, "state", State(self.state))
        # Cut here, once, so what we compare for idempotence is what the backend stores.
        if len(self.description) > MAX_DESCRIPTION:
            object.__setattr__(self, "description", fit_description(self.description))

    def same_as(self, other: CommitStatus) -> bool:
        """Identical for idempotence: everything but the creation time and the seal (which
        vouches for the rest; set_status compares against trusted statuses only)."""
        return (self.sha, self.context, self.state, self.description, self.target_url) == (
            other.sha,
            other.context,
            other.state,
            other.description,
            other.target_url,
        )


def latest_of(statuses: Iterable[CommitStatus], context: str) -> CommitStatus | None:
    """The current status of a context in an oldest-first list."""
    found: CommitStatus | None = None
    for status in statuses:
        if status.context == context:
            found = status
    return found


def should_write(latest: CommitStatus | None, status: CommitStatus) -> bool:
    """The idempotence and no-pending-over-verdict rules shared by every backend."""
    if latest is None:
        return True
    if latest.same_as(status):
        return False
    if status.state == PENDING and latest.state in VERDICTS:
        log.warning(
            "not writing pending over %s for %s on %s", latest.state, status.context, status.sha
        )
        return False
    return True


class StatusBackend(abc.ABC):
    """Where commit statuses are kept. Subclasses implement ``list_statuses`` and ``_write``."""

    name: str = "backend"
    # Which statuses count when deciding whether a write is redundant: the controller sets it
    # to "sealed by a trusted key", so a forged verdict cannot stop it writing its own.
    trust: Callable[[CommitStatus], bool] | None = None

    def refresh(self) -> None:  # noqa: B027 - optional hook, most backends read live
        """Bring the local view of the record up to date; called once per controller pass."""

    @abc.abstractmethod
    def list_statuses(self, sha: str) -> list[CommitStatus]:
        """Every status of the commit, oldest first, without duplicates."""

    def latest(self, sha: str, context: str) -> CommitStatus | None:
        return latest_of(self.list_statuses(sha), context)

    def latest_trusted(self, entries: Iterable[CommitStatus], context: str) -> CommitStatus | None:
        trust = self.trust
        return latest_of((s for s in entries if trust is None or trust(s)), context)

    def set_status(self, status: CommitStatus) -> bool:
        """Write unless identical to the latest or pending over a verdict; True when written.
        Every backend writes through here: they differ only in ``_write``."""
        latest = self.latest_trusted(self.list_statuses(status.sha), status.context)
        if not should_write(latest, status):
            return False
        return self._write(status)

    @abc.abstractmethod
    def _write(self, status: CommitStatus) -> bool:
        """Append one status to the record (``set_status`` checked it against the latest); False
        when it was not written after all (a concurrent writer's record made it redundant, or
        the backend cannot represent it)."""


def read_record(backend: StatusBackend, shas: Sequence[str]) -> list[CommitStatus]:
    """The record for a pass: refresh once, then every status of the given commits."""
    backend.refresh()
    record: list[CommitStatus] = []
    for sha in shas:
        record.extend(backend.list_statuses(sha))
    return record


class MemoryBackend(StatusBackend):
    """A record in a dict: for tests, dry runs and ``gitops-gpu plan``."""

    name = "memory"

    def __init__(self, statuses: Iterable[CommitStatus] = ()) -> None:
        self._by_sha: dict[str, list[CommitStatus]] = {}
        self.writes = 0
        for status in statuses:
            self._by_sha.setdefault(status.sha, []).append(status)

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        return list(self._by_sha.get(sha, ()))

    def all_statuses(self) -> list[CommitStatus]:
        return [s for statuses in self._by_sha.values() for s in statuses]

    def _write(self, status: CommitStatus) -> bool:
        self.writes += 1
        self._by_sha.setdefault(status.sha, []).append(status)
        return True
