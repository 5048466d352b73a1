"""History only moves forward: a head that does not descend from the last one followed holds
the rollout until a person accepts it (``gitops-gpu accept-history SHA``) or the branch
descends again.

A force-push back to an old commit would otherwise walk every stage onto it at once (its old
verdicts say it passed). The last head followed lives in the ledger, so a restart does not
forget it; the hold is a status on the new head (``gitops-gpu/history``), an Event, the
``gitops_gpu_history_held`` gauge and the pass's ``held`` line in ``status``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gitops_gpu import events, names
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.ledger import Ledger
from gitops_gpu.metrics import Metrics
from gitops_gpu.rollout.status import CONTEXT_PREFIX, FAILURE, SUCCESS, CommitStatus
from gitops_gpu.sealed import SealedRecord

log = logging.getLogger("gitops_gpu.controller")
HISTORY_CONTEXT = f"{CONTEXT_PREFIX}/history"


def hold_message(branch: str, was: str, now: str) -> str:
    return f"history rewritten: {branch} moved from {was[:7]} to {now[:7]}, not a descendant"


class HistoryGuard:
    def __init__(
        self,
        branch: str,
        ledger: Ledger,
        record: SealedRecord,
        is_ancestor: Callable[[str, str], bool],
        *,
        metrics: Metrics,
        recorder: events.EventRecorder,
        clock: Callable[[], float],
    ) -> None:
        self.branch, self.ledger, self.record = branch, ledger, record
        self.is_ancestor = is_ancestor
        self.metrics, self.recorder, self.clock = metrics, recorder, clock
        self._raised: str | None = None  # the head an Event was raised for

    def reason(self, head: str) -> str | None:
        """Why ``head`` may not be followed, or None; reads only."""
        last = self.ledger.data.head
        if not last or last == head or self.ledger.accepted(head) is not None:
            return None
        return None if self.is_ancestor(last, head) else hold_message(self.branch, last, head)

    def check(self, head: str | None, *, paused: bool = False) -> str | None:
        """None when ``head`` may be followed (recorded as the last head), else why not: the
        hold is then raised once (status, Event, gauge)."""
        if head is None:
            return None
        message = self.reason(head)
        if message is None:
            self.ledger.set_head(head)
            self.metrics.history_held.set(0)
            self._raised = None
            return None
        self.metrics.history_held.set(1)
        if self._raised != head and not paused:
            self._raised = head
            log.error("%s; nothing is adopted until `gitops-gpu accept-history %s`", message, head)
            fix = f"; run gitops-gpu accept-history {head[:12]} to follow it"
            self._status(head, FAILURE, (message + fix)[:140])
            try:
                self.recorder.record(
                    *names.CLUSTER_POLICY_API,
                    names.CLUSTER_POLICY_NAME,
                    "HistoryRewritten",
                    f"{message}: the rollout holds until someone runs "
                    f"`gitops-gpu accept-history {head}` (or the branch descends again)",
                    warning=True,
                )
            except GitopsGpuError as exc:
                log.warning("could not raise the Event: %s", exc)
        return message

    def _status(self, sha: str, state: str, text: str) -> None:
        try:
            self.record.write(CommitStatus(sha, HISTORY_CONTEXT, state, text, "", self.clock()))
        except GitopsGpuError as exc:
            log.warning("could not write %s on %s: %s", HISTORY_CONTEXT, sha[:12], exc)


def accept(ledger: Ledger, record: SealedRecord, sha: str, who: str, now: float) -> str:
    """Record that ``who`` accepts ``sha`` as the branch head to follow; the previous head."""
    entry = ledger.accept(sha, who, now)
    text = f"history accepted by {who} (was {entry.previous[:7] or 'none'})"
    record.write(CommitStatus(sha, HISTORY_CONTEXT, SUCCESS, text, "", now))
    return entry.previous
