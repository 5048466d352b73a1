"""Rung 0, the Node itself: nothing above it can be trusted on a NotReady node.

Also whether the node is *available* (:func:`unavailable`): a node is not when its Ready
condition is not True, or when it is cordoned and the cordon is not the GPU Operator's driver
upgrade's. The pool's ``unavailableNodes`` (skip | wait | fail) then decides how it counts
(ladder.walk, health.aggregate, docs/rollout.md).

Whose cordon (k8s-operator-libs pkg/upgrade, GPU Operator v26.7.0): the upgrade controller
cordons a node at ``cordon-required`` (a restart-only change at ``upgrade-required``) and
uncordons it at ``uncordon-required``; it leaves a node cordoned at ``upgrade-failed``, and an
external maintenance operator holds it at ``node-maintenance-required``. Any of those states
(driver.UPGRADE_IN_PROGRESS and upgrade-failed) is the upgrade in progress, judged by the ladder
as today. The operator marks no cordon of its own: its annotation
``nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable`` records the opposite, a
cordon that was already there when the upgrade began, which it leaves in place at
``upgrade-done``; from there on (``upgrade-done`` or no state) a cordon is someone else's. A
node labelled ``nvidia.com/gpu-driver-upgrade.skip=true`` sitting in ``upgrade-required`` is one
the operator will not touch, and a pool whose driver is not the operator's
(``disabledComponents: [driver]``) has no upgrade flow: their cordons are someone else's too.
"""

from __future__ import annotations

from datetime import datetime

from gitops_gpu import names, timefmt
from gitops_gpu.components import driver, signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import (
    DEFAULT_OPTIONS,
    Health,
    Options,
    RungResult,
    Unavailability,
    result,
)
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "node"
NOT_READY = "NotReady"
CORDONED = "cordoned"
# States in which the driver upgrade holds (or may hold) the node cordoned.
UPGRADE_FLOW = driver.UPGRADE_IN_PROGRESS | {driver.UPGRADE_FAILED}


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


def unavailable(ev: NodeEvidence, pool: PoolTarget) -> Unavailability | None:
    """Why the node is not available, or None when it is."""
    ready = ev.condition("Ready")
    if ready is None:
        return Unavailability(
            NOT_READY, "NotReady (no Ready condition: the kubelet never reported)"
        )
    if ready.get("status") != "True":
        why = ready.get("reason") or ready.get("status") or "Unknown"
        since = timefmt.parse(ready.get("lastTransitionTime"))
        age = f" since {_age(ev.now, since)}" if since is not None else ""
        return Unavailability(NOT_READY, f"NotReady{age} ({why})")
    if ev.unschedulable and not upgrade_cordon(ev, pool):
        return Unavailability(CORDONED, "cordoned (not by the driver upgrade)")
    return None


def upgrade_cordon(ev: NodeEvidence, pool: PoolTarget) -> bool:
    """The node is in the GPU Operator's driver upgrade flow, so a cordon on it is the
    upgrade's (see the module's docstring)."""
    if signals.disabled_for_pool(pool, "driver"):
        return False
    state = ev.labels.get(names.UPGRADE_STATE_LABEL, "")
    if state == "upgrade-required" and ev.labels.get(names.UPGRADE_SKIP_LABEL) == "true":
        return False
    return state in UPGRADE_FLOW


def _age(now: datetime, since: datetime) -> str:
    """Whole minutes (the text is judged again at most a minute later, observe.py)."""
    minutes = max(0, int((now - since).total_seconds() // 60))
    if minutes < 1:
        return "<1m"
    if minutes < 60:
        return f"{minutes}m"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
