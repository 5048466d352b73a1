"""NVML drift for ``plan``: where a pool's nodes, as NVML sees them, differ from the desired state.

Compared per node: the NVML driver version against the pool's driver version; the NVML MIG mode
against the pool's MIG profile (or the node's ``nvidia.com/mig.config`` label when the pool sets
none); the GPUs NVML can use against GFD's ``nvidia.com/gpu.count``. A node without a usable
report (missing, stale, dated ahead of the controller's clock, NVML down) is drift too: its
NVML state is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Options
from gitops_gpu.components.mig_manager import NOT_SUPPORTED, pool_mig_mode
from gitops_gpu.fleet.compiled import PoolTarget


@dataclass(frozen=True)
class NvmlDrift:
    pool: str
    node: str
    field: str  # report | nvml | driverVersion | migMode | gpuCount
    desired: str
    actual: str

    def __str__(self) -> str:
        return f"{self.pool}/{self.node}: {self.field}: desired {self.desired}, NVML {self.actual}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def node_drift(
    pool: PoolTarget, ev: NodeEvidence, opts: Options = DEFAULT_OPTIONS
) -> list[NvmlDrift]:
    def drift(field: str, desired: str, actual: str) -> NvmlDrift:
        return NvmlDrift(pool.name, ev.name, field, desired, actual)

    status = ev.status
    if status is None:
        return [drift("report", "a NodeGPUReport", "missing")]
    limit = signals.stale_limit(status, opts)
    age = ev.report_age
    window = signals.report_window(ev.report, opts)
    if window is not None and ev.now < window[0]:
        ahead = f"{signals.clock_lead(ev):.0f}s ahead (untrusted)"
        return [drift("report", f"at most {signals.MAX_CLOCK_SKEW_SECONDS:.0f}s ahead", ahead)]
    if age is None or window is None or ev.now > window[1]:
        return [
            drift(
                "report",
                f"at most {limit:.0f}s old",
                "unknown age" if age is None else f"{age:.0f}s old",
            )
        ]
    if not ev.nvml_ready():
        return [drift("nvml", "NVML readable", "unavailable")]
    out = []
    actual_driver = str(status.get("driverVersion", "unknown"))
    if pool.driver_version and actual_driver != pool.driver_version:
        out.append(drift("driverVersion", pool.driver_version, actual_driver))
    profile = pool.mig_config or ev.labels.get(names.MIG_CONFIG_LABEL)
    ok_gpus = [g for g in ev.gpus if g.ok]
    want = pool_mig_mode(pool, profile) if profile else None
    if profile and want is not None:
        modes = [g.mig_current for g in ok_gpus]
        wrong = [m for m in modes if m != want and not (m == NOT_SUPPORTED and want == "disabled")]
        if wrong:
            out.append(
                drift(
                    "migMode",
                    f"{want} ({profile})",
                    f"{', '.join(sorted(set(map(str, wrong))))} on {len(wrong)}/{len(modes)} GPUs",
                )
            )
    label = ev.labels.get(names.GPU_COUNT_LABEL)
    if label is not None and label != str(len(ok_gpus)):
        lost = len(ev.gpus) - len(ok_gpus)
        out.append(
            drift(
                "gpuCount",
                label,
                f"{len(ok_gpus)}" + (f" ({lost} lost or failing)" if lost else ""),
            )
        )
    return out


def pool_drift(
    pool: PoolTarget, evidence: Iterable[NodeEvidence], opts: Options = DEFAULT_OPTIONS
) -> list[NvmlDrift]:
    return [d for ev in sorted(evidence, key=lambda e: e.name) for d in node_drift(pool, ev, opts)]


def fleet_drift(
    pools: Iterable[PoolTarget],
    evidence: Mapping[str, Sequence[NodeEvidence]],
    opts: Options = DEFAULT_OPTIONS,
) -> list[NvmlDrift]:
    """Drift of every pool, given evidence keyed by pool name (as :func:`read_evidence` returns)."""
    return [d for pool in pools for d in pool_drift(pool, evidence.get(pool.name, ()), opts)]
