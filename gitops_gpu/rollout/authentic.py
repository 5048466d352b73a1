"""Which statuses of the record count: those written by whom the fleet trusts to write them.

Pure: statuses in, the trusted ones (ordered by their sealed time) and the ignored ones (with
the reason) out. The rules:

- every ``gitops-gpu/`` status but approvals (preflight, stage and stage-part verdicts, phase
  marks, the history hold) counts only with a seal by a controller key;
- an approval of a stage (``gitops-gpu/approval/<stage>``) counts when the stage names
  approvers and either the forge reports an approver posted it (``creator``) or it is sealed by
  an approver's key; a stage that names none takes approvals sealed by a controller key
  (``gitops-gpu approve`` with the controller's key). A later trusted approval status that is
  not ``success`` revokes; an untrusted one changes nothing;
- statuses of other contexts (CI jobs) are not ours: passed through, never ignored.

Trusted statuses are ordered by their sealed time (forge-attributed ones by the forge's time),
stably: the order lines are stored in, which anyone with push access can change, decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gitops_gpu.rollout.record import approvals_from_record
from gitops_gpu.rollout.seal import Keyring
from gitops_gpu.rollout.status import (
    APPROVAL_CONTEXT_PREFIX,
    CONTEXT_PREFIX,
    VERDICTS,
    CommitStatus,
)


@dataclass(frozen=True)
class Approvers:
    """Who may approve a stage: forge logins, and keys for records that have no login."""

    users: frozenset[str] = frozenset()
    keys: Keyring | None = None
    teams: frozenset[str] = frozenset()  # "org/team" (GitLab: a group path)

    @property
    def named(self) -> bool:
        keys = self.keys is not None and len(self.keys) > 0
        return bool(self.users) or bool(self.teams) or keys


@dataclass(frozen=True)
class Ignored:
    status: CommitStatus
    reason: str


@dataclass(frozen=True)
class Judged:
    trusted: list[CommitStatus]
    ignored: list[Ignored] = field(default_factory=list)

    def approvals(self) -> frozenset[tuple[str, str]]:
        """(sha, stage) pairs whose latest trusted approval status is success."""
        return approvals_from_record(self.trusted)


Membership = Callable[[str, str], bool]  # (team, user) -> the forge says user is in team


class Authenticator:
    def __init__(
        self,
        controllers: Keyring,
        approvers: Mapping[str, Approvers] | None = None,
        membership: Membership | None = None,
    ) -> None:
        self.controllers = controllers
        self.approvers = dict(approvers or {})
        self.membership = membership

    def with_approvers(self, approvers: Mapping[str, Approvers]) -> Authenticator:
        return Authenticator(self.controllers, approvers, self.membership)

    def trusted(self, status: CommitStatus) -> bool:
        return self.verdict(status)[0] is not None

    def verdict(self, status: CommitStatus) -> tuple[CommitStatus | None, str]:
        """(the status as it counts, with its trusted time) or (None, why it is ignored)."""
        if not status.context.startswith(f"{CONTEXT_PREFIX}/"):
            return status, ""
        if status.context.startswith(APPROVAL_CONTEXT_PREFIX):
            return self._approval(status)
        check = self.controllers.check(status)
        if check.signer is None:
            return None, f"{check.reason} (not written by a trusted controller)"
        return replace(status, created_at=check.at), ""

    def _approval(self, status: CommitStatus) -> tuple[CommitStatus | None, str]:
        stage = status.context.removeprefix(APPROVAL_CONTEXT_PREFIX)
        allowed = self.approvers.get(stage, Approvers())
        if not allowed.named:
            check = self.controllers.check(status)
            if check.signer is not None:
                return replace(status, created_at=check.at), ""
            reason = (
                f"approval {check.reason}: stage {stage} names no approvers, so only the "
                "controller's key can approve (gitops-gpu approve)"
            )
            return None, reason
        if status.creator and status.creator in allowed.users:
            return status, ""  # the forge vouches for who posted it, and for its time
        member, creator = self.membership, status.creator
        if creator and member is not None and any(member(t, creator) for t in allowed.teams):
            return status, ""
        if allowed.keys is not None:
            check = allowed.keys.check(status)
            if check.signer is not None:
                return replace(status, created_at=check.at), ""
        who = f"posted by {status.creator}" if status.creator else "no approver's seal"
        return None, f"approval {who}: not an approver of stage {stage}"

    def judge(self, statuses: Iterable[CommitStatus]) -> Judged:
        trusted: list[CommitStatus] = []
        ignored: list[Ignored] = []
        for status in statuses:
            counted, reason = self.verdict(status)
            if counted is None:
                ignored.append(Ignored(status, reason))
            else:
                trusted.append(counted)
        trusted.sort(key=lambda s: s.created_at)  # stable: ties keep the backend's order
        return Judged(trusted, ignored)


NOT_IN_LEDGER = "a verdict of this controller's stage that its ledger does not hold"


def content(status: CommitStatus) -> tuple[str, str, str, str]:
    return (status.sha, status.context, str(status.state), status.description)


def with_ledger(
    judged: Judged, ledger: Iterable[CommitStatus], own: Callable[[str], bool]
) -> tuple[Judged, list[CommitStatus]]:
    """Own stages' verdicts as the ledger holds them: a sealed verdict of an own context that
    the ledger lacks is ignored (replayed, or from before the ledger); a ledger verdict the
    record lacks counts, and comes back to be written again. (judged, the verdicts to restore)"""
    kept = {content(v): v for v in ledger}
    trusted: list[CommitStatus] = []
    ignored = list(judged.ignored)
    for status in judged.trusted:
        if own(status.context) and status.state in VERDICTS and content(status) not in kept:
            ignored.append(Ignored(status, NOT_IN_LEDGER))
        else:
            trusted.append(status)
    present = {content(s) for s in trusted}
    restore = [v for key, v in kept.items() if key not in present]
    merged = sorted([*trusted, *restore], key=lambda s: s.created_at)
    return Judged(merged, ignored), restore
