"""What a rollout pass decides: plain values the controller carries out in list order.

The controller stops at the first action that fails, so a status that follows an apply in the list
is only written once the apply went through.
"""

from __future__ import annotations

from dataclasses import dataclass

from gitops_gpu.rollout.status import CommitStatus


@dataclass(frozen=True)
class AdoptCommit:
    """Apply every pool of ``stage`` at ``commit`` (also re-sent to heal drift)."""

    stage: str
    commit: str


@dataclass(frozen=True)
class Rollback:
    """Re-apply every pool of ``stage`` at ``to_commit``, its last good commit, after a failure."""

    stage: str
    to_commit: str


@dataclass(frozen=True)
class SetStatus:
    """Write one commit status to the record."""

    commit: str
    context: str
    state: str
    description: str

    def to_status(self, created_at: float, target_url: str = "") -> CommitStatus:
        return CommitStatus(
            sha=self.commit,
            context=self.context,
            state=self.state,
            description=self.description,
            target_url=target_url,
            created_at=created_at,
        )


@dataclass(frozen=True)
class Wait:
    """Nothing to do for now, and why (for logs, events and `gitops-gpu status`)."""

    reason: str


@dataclass(frozen=True)
class RunSmokeTest:
    """Start ``gate.smokeTest`` pods for ``stage`` at ``commit`` on its nodes still lacking one.

    Smoke Jobs of any (stage, commit) not asked for in a pass are finished: the controller
    deletes them after the pass (and records an Event per failed node).
    """

    stage: str
    commit: str


@dataclass(frozen=True)
class HoldUpgrades:
    """``stage`` may not move (``reason``): hold the operator's driver upgrade of its nodes not
    started yet (sync/upgrade_holds.py). A stage not named in a pass's holds is released."""

    stage: str
    reason: str


Action = AdoptCommit | HoldUpgrades | Rollback | RunSmokeTest | SetStatus | Wait
