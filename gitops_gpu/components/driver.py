"""Rung 2, the driver: NVML on the node runs the pool's desired driver and the upgrade is done.

Signals: the NodeGPUReport's NVML driver version (the truth about what is loaded), the
``nvidia.com/gpu-driver-upgrade-state`` label of the operator's upgrade state machine, and the
``nvidia.com/gpu-operator.driver.owner`` label (which NVIDIADriver owns the node), and the driver
pod itself: one that cannot become Ready is named (the node may still say upgrade-done and NVML
the old driver) and is Degraded past a bound (signals.driver_pod_problem). A missing or stale
report is Unknown: without NVML facts nothing above this rung can be judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitops_gpu import names
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "driver"
UPGRADE_FAILED = "upgrade-failed"
# k8s-operator-libs pkg/upgrade: every state between "needs an upgrade" and "done".
UPGRADE_IN_PROGRESS = frozenset(
    {
        "upgrade-required",
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "node-maintenance-required",
        "post-maintenance-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
    }
)


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    managed = not signals.disabled_for_pool(pool, "driver")  # false: a pre-installed driver
    state = ev.labels.get(names.UPGRADE_STATE_LABEL, "") if managed else ""
    state_text = f", upgrade-state {state}" if state else ""
    held = ev.annotations.get(names.UPGRADE_HOLD_ANNOTATION)
    if held and state == "upgrade-required":  # sync/upgrade_holds.py: not started, on purpose
        state_text += f" (held: {held})"
    pod = signals.driver_pod_problem(ev) if managed else None
    if pod is not None:  # before NVML: the old driver may still be loaded and reported
        return result(COMPONENT, pod[0], pod[1] + state_text)
    problem = signals.report_problem(COMPONENT, ev, opts)
    if problem is not None:
        if state == UPGRADE_FAILED:
            return result(COMPONENT, Health.DEGRADED, f"upgrade-state {state}; {problem.reason}")
        return problem
    status = ev.status or {}
    if not ev.nvml_ready():
        cond: Mapping[str, Any] = next(
            (c for c in status.get("conditions", []) if c.get("type") == "NVMLReady"), {}
        )
        why = f"NVML unavailable ({cond.get('reason', 'unknown')}: {cond.get('message', '')})"
        why += state_text
        if state in UPGRADE_IN_PROGRESS:
            return result(COMPONENT, Health.PROGRESSING, why)
        return result(COMPONENT, Health.DEGRADED, why)
    actual = status.get("driverVersion", "unknown")
    desired = pool.driver_version
    facts = f"NVML reports {actual}" + (f", desired {desired}" if desired else "") + state_text
    if state == UPGRADE_FAILED:
        return result(COMPONENT, Health.DEGRADED, facts)
    if desired and actual != desired:
        return result(COMPONENT, Health.PROGRESSING, facts)
    if state in UPGRADE_IN_PROGRESS:
        return result(COMPONENT, Health.PROGRESSING, facts)
    owner = ev.labels.get(names.DRIVER_OWNER_LABEL)
    want = pool.driver.get("metadata", {}).get("name") if managed else None
    if owner and want and owner != want:
        return result(
            COMPONENT,
            Health.PROGRESSING,
            f"{facts}; driver owned by NVIDIADriver {owner}, the pool's is {want}",
        )
    return result(COMPONENT, Health.HEALTHY, facts)
