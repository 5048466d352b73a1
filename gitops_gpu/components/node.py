"""Rung 0, the Node itself: nothing above it can be trusted on a NotReady node."""

from __future__ import annotations

from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "node"


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    ready = ev.condition("Ready")
    if ready is None:
        return result(COMPONENT, Health.UNKNOWN, "no Ready condition (the kubelet never reported)")
    if ready.get("status") != "True":
        why = ready.get("reason") or ready.get("status", "Unknown")
        message = ready.get("message")
        return result(
            COMPONENT, Health.DEGRADED, f"NotReady ({why}{': ' + message if message else ''})"
        )
    return result(COMPONENT, Health.HEALTHY, "Ready" + (", cordoned" if ev.unschedulable else ""))
