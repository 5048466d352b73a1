"""Rung 5, GPU Feature Discovery: its labels exist and agree with what NVML reports.

GFD relabels periodically, so right after a driver upgrade its ``cuda.driver-version.*`` labels
lag NVML for a minute: a disagreement is Progressing. A product other than the pool's declared
one is Degraded: the node is in the wrong pool (or the pool declares the wrong GPU).
"""

from __future__ import annotations

from collections.abc import Mapping

from gitops_gpu import names
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "gfd"
DEPLOY = "gpu-feature-discovery"
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
_DRIVER_PARTS = tuple(f"nvidia.com/cuda.driver-version.{p}" for p in ("major", "minor", "revision"))


def gfd_driver_version(labels: Mapping[str, str]) -> str | None:
    """The driver version GFD labelled: ``.full``, else major.minor.revision."""
    if labels.get(DRIVER_FULL):
        return labels[DRIVER_FULL]
    parts = [labels.get(k) for k in _DRIVER_PARTS]
    return ".".join(p for p in parts if p) if parts[0] and parts[1] else None


def product_matches(label: str, wanted: str) -> bool:
    """GFD writes the NVML name with dashes; MIG single strategy appends ``-MIG-<profile>``."""
    norm = label.replace(" ", "-").casefold()
    want = wanted.replace(" ", "-").casefold()
    return norm == want or norm.startswith(want + "-mig-")


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    verdict = signals.operand_verdict(COMPONENT, ev, pool, DEPLOY, signals.APP_GFD)
    if verdict is not None:
        return verdict
    labels = ev.labels
    missing = [k for k in (names.GPU_PRODUCT_LABEL, names.GPU_COUNT_LABEL) if not labels.get(k)]
    driver_label = gfd_driver_version(labels)
    if driver_label is None:
        missing.append(DRIVER_FULL)
    if missing:
        return result(COMPONENT, Health.PROGRESSING, f"labels missing: {', '.join(missing)}")
    product = labels[names.GPU_PRODUCT_LABEL]
    if pool.gpu_product and not product_matches(product, pool.gpu_product):
        return result(
            COMPONENT,
            Health.DEGRADED,
            f"{names.GPU_PRODUCT_LABEL}={product}, the pool expects {pool.gpu_product}",
        )
    status = ev.status
    if status is not None and ev.nvml_ready():
        count = status.get("gpuCount")
        if count is not None and labels[names.GPU_COUNT_LABEL] != str(count):
            return result(
                COMPONENT,
                Health.PROGRESSING,
                f"{names.GPU_COUNT_LABEL}={labels[names.GPU_COUNT_LABEL]}, NVML counts {count}",
            )
        nvml_driver = status.get("driverVersion")
        if nvml_driver and driver_label != nvml_driver:
            return result(
                COMPONENT,
                Health.PROGRESSING,
                f"cuda.driver-version labels say {driver_label}, NVML reports {nvml_driver}",
            )
    return result(COMPONENT, Health.HEALTHY, f"{product} x{labels[names.GPU_COUNT_LABEL]}")
