"""What the GPU Operator says about its own CRs: a refusal, in its words, for people.

The operator v26.7.0 records a failure on a ClusterPolicy or NVIDIADriver as the condition
``Error=True`` with a reason and message (internal/conditions; clusterpolicy_controller.go and
nvidiadriver_controller.go). ``ReconcileFailed`` and the like are refusals (an image it cannot
resolve, a spec it rejects): the reason a pool does not move, so the pool's first failure names
it. ``OperandNotReady`` and ``DriverNotReady`` only say pods are still coming up, which the nodes'
own rungs say better. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROGRESS_REASONS = frozenset({"OperandNotReady", "DriverNotReady", "Reconciled", "Ready"})
MAX_MESSAGE = 300  # commit-status descriptions are short; the whole message is in the CR


def refusal(obj: Mapping[str, Any] | None) -> str | None:
    """ "ClusterPolicy cluster-policy refused: ReconcileFailed: <message>", or None."""
    if not obj:
        return None
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") != "Error" or cond.get("status") != "True":
            continue
        reason = str(cond.get("reason") or "")
        if reason in PROGRESS_REASONS:
            return None
        message = " ".join(str(cond.get("message") or "").split())
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
        kind = obj.get("kind") or "object"
        name = (obj.get("metadata") or {}).get("name")
        return f"operator: {kind} {name} refused: {reason}: {message}"
    return None
