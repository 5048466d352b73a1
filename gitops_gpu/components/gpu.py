"""Rung 3, the GPUs themselves (NVML facts): none lost, no critical Xid, no uncorrectable ECC.

Not a GPU Operator operand but the hardware every operand above depends on; it sits right above
the driver so a GPU that fell off the bus is named as the root cause rather than its symptom
(the device plugin advertising one GPU fewer). Critical Xids follow the device plugin's own rule:
every Xid except the application-level ones it ignores by default (k8s-device-plugin health.go).
Only Xids seen since ``Options.since`` (the stage's adoption of the commit) count. Volatile ECC
counters reset when the driver reloads, so they already mean "since the last driver load".
"""

from __future__ import annotations

from typing import Any

from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "gpu"
# Xids caused by applications, not hardware: k8s-device-plugin skips these by default.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0  # "not supported" counts as nothing seen


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    problem = signals.report_problem(COMPONENT, ev, opts)
    if problem is not None:
        return problem
    if not ev.nvml_ready():
        return result(COMPONENT, Health.UNKNOWN, "NVML unavailable: no GPU facts")
    status = ev.status or {}
    gpus = list(ev.gpus)
    for gpu in gpus:
        if gpu.state == "lost":
            return result(COMPONENT, Health.DEGRADED, f"{gpu.name} is lost (fell off the bus)")
        if gpu.state == "error":
            return result(COMPONENT, Health.DEGRADED, f"{gpu.name}: {gpu.error or 'NVML error'}")
    critical = [
        x for x in signals.xids_since(status, opts.since) if x.get("xid") not in APPLICATION_XIDS
    ]
    if critical:
        last = critical[-1]
        more = f" (+{len(critical) - 1} more)" if len(critical) > 1 else ""
        return result(
            COMPONENT,
            Health.DEGRADED,
            f"Xid {last.get('xid')} on GPU {last.get('gpu')} at {last.get('seenAt')}{more}",
        )
    for gpu in gpus:
        ecc = _count((gpu.ecc_uncorrected or {}).get("volatile"))
        if ecc:
            return result(
                COMPONENT,
                Health.DEGRADED,
                f"{gpu.name}: {ecc} uncorrectable ECC errors since the driver loaded",
            )
        pages = gpu.page_retirement or {}
        if pages.get("failed"):
            return result(COMPONENT, Health.DEGRADED, f"{gpu.name}: row remapping failed")
        if pages.get("pending"):
            return result(
                COMPONENT,
                Health.DEGRADED,
                f"{gpu.name}: {pages.get('mechanism')} pending, the GPU needs a reset",
            )
    return result(COMPONENT, Health.HEALTHY, f"{len(gpus)} GPUs healthy")
