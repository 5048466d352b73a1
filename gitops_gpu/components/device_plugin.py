"""Rung 6, the device plugin: the node advertises its GPUs with the pool's plugin config.

Signals: ``nvidia.com/device-plugin.config`` equals the pool's desired key; allocatable
``nvidia.com/gpu`` (or ``nvidia.com/gpu.shared`` when time-slicing renames it, or
``nvidia.com/mig-*`` resources) is non-zero. Without MIG, fewer GPUs than ``gpu.count`` x
``gpu.replicas`` means the plugin marked some unhealthy (Degraded); zero means it has not
registered yet (Progressing).
"""

from __future__ import annotations

from collections.abc import Mapping

from gitops_gpu import names
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "device-plugin"
DEPLOY = "device-plugin"
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def advertised(allocatable: Mapping[str, str]) -> tuple[int, int]:
    """(whole or shared GPUs, MIG devices) the node advertises."""
    gpus = max(_int(allocatable.get(GPU_RESOURCE, 0)), _int(allocatable.get(SHARED_RESOURCE, 0)))
    mig = sum(_int(v) for k, v in allocatable.items() if k.startswith(MIG_RESOURCE_PREFIX))
    return gpus, mig


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    verdict = signals.operand_verdict(COMPONENT, ev, pool, DEPLOY, signals.APP_DEVICE_PLUGIN)
    if verdict is not None:
        return verdict
    key = names.DEVICE_PLUGIN_CONFIG_LABEL
    desired = pool.device_plugin_config
    actual = ev.labels.get(key)
    if desired and actual != desired:
        return result(
            COMPONENT, Health.PROGRESSING, f"{key}={actual or '<unset>'}, desired {desired}"
        )
    gpus, mig = advertised(ev.allocatable)
    if gpus + mig == 0:
        return result(COMPONENT, Health.PROGRESSING, "allocatable advertises no GPUs yet")
    mig_on = any((g.get("migMode") or {}).get("current") == "enabled" for g in ev.gpus)
    count = _int(ev.labels.get(names.GPU_COUNT_LABEL, 0))
    if not mig_on and not mig and count:
        replicas = max(_int(ev.labels.get(REPLICAS_LABEL, 1)), 1)
        if gpus < count * replicas:
            return result(
                COMPONENT,
                Health.DEGRADED,
                f"allocatable {GPU_RESOURCE} {gpus} < {count} GPUs x {replicas} replicas "
                "(the plugin marked GPUs unhealthy)",
            )
    what = f"{gpus} GPUs" + (f", {mig} MIG devices" if mig else "")
    return result(
        COMPONENT, Health.HEALTHY, f"advertises {what}" + (f", config {actual}" if actual else "")
    )
