"""Reading the promotion record: the latest status per (commit, context), and approvals."""

from __future__ import annotations

from collections.abc import Iterable

from gitops_gpu.rollout.status import APPROVAL_CONTEXT_PREFIX, SUCCESS, CommitStatus


class Record:
    """Statuses indexed by (sha, context); later entries win (lists are oldest first)."""

    def __init__(self, statuses: Iterable[CommitStatus]) -> None:
        self._latest: dict[tuple[str, str], CommitStatus] = {}
        self._history: dict[tuple[str, str], list[CommitStatus]] = {}
        for status in statuses:
            self._latest[(status.sha, status.context)] = status
            self._history.setdefault((status.sha, status.context), []).append(status)

    def history(self, sha: str, context: str) -> list[CommitStatus]:
        """Every status of (sha, context), oldest first."""
        return list(self._history.get((sha, context), ()))

    def latest(self, sha: str, context: str) -> CommitStatus | None:
        return self._latest.get((sha, context))

    def state(self, sha: str, context: str) -> str | None:
        found = self._latest.get((sha, context))
        return found.state if found else None

    def current(self) -> list[CommitStatus]:
        """The latest status of every (sha, context)."""
        return list(self._latest.values())


def approvals_from_record(statuses: Iterable[CommitStatus]) -> frozenset[tuple[str, str]]:
    """(sha, stage) pairs whose latest ``gitops-gpu/approval/<stage>`` status is success.
    Give it the trusted record (rollout/authentic.py's ``Judged.trusted``): it judges no one.

    `gitops-gpu approve <sha> <stage>` writes that status, so approvals survive restarts and can
    be given from any tool that can post a commit status; a later non-success status revokes it.
    """
    return frozenset(
        (status.sha, status.context.removeprefix(APPROVAL_CONTEXT_PREFIX))
        for status in Record(statuses).current()
        if status.context.startswith(APPROVAL_CONTEXT_PREFIX) and status.state == SUCCESS
    )
