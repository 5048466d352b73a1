"""Rung 6, the device plugin: the node advertises its GPUs with the pool's plugin config.

Signals: ``nvidia.com/device-plugin.config`` equals the pool's desired key; allocatable
``nvidia.com/gpu`` (or ``nvidia.com/gpu.shared`` when time-slicing renames it, or
``nvidia.com/mig-*`` resources) is non-zero. When the pool's config is in the fleet repo, the
node must advertise what it promises (fleet/sharing_promise.py): ``gpu.count`` x replicas of the
resource, and GFD's ``gpu.replicas`` / ``gpu.sharing-strategy`` labels agreeing; a node that
still does not, :data:`PLUGIN_GRACE_SECONDS` after its stage adopted the commit, is Degraded with
the numbers (the config was applied but never took effect). A fleet-repo MIG layout, once
mig-manager reports success, promises its MIG devices per GPU as the cluster's mig.strategy names
them (fleet/mig_layouts.py); bounded like a MIG reconfiguration. Otherwise, without MIG, fewer GPUs
than ``gpu.count`` x ``gpu.replicas`` means the plugin marked some unhealthy (Degraded); zero
means it has not registered yet (Progressing).
"""

from __future__ import annotations

from collections.abc import Mapping

from gitops_gpu import names
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.components.mig_manager import MIG_STUCK_SECONDS
from gitops_gpu.fleet.compiled import PoolTarget
from gitops_gpu.fleet.sharing_promise import SharingPromise

COMPONENT = "device-plugin"
DEPLOY = "device-plugin"
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
# The config manager restarts the plugin seconds after the node label changes; past this, a
# node that advertises something else never took the config.
PLUGIN_GRACE_SECONDS = 300.0


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
    mig_on = any(g.mig_current == "enabled" for g in ev.gpus)
    count = _int(ev.labels.get(names.GPU_COUNT_LABEL, 0))
    if pool.mig_resources and count and _layout_applied(ev, pool):
        return _mig_kept(ev, pool, pool.mig_resources, count, opts)
    promise = pool.device_plugin_promise
    if promise is not None and desired and not mig_on and not mig and count:
        return _kept(ev, promise, count, desired, opts)
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


def _kept(
    ev: NodeEvidence, promise: SharingPromise, count: int, key: str, opts: Options
) -> RungResult:
    """Does the node advertise what its fleet-repo config promises?"""
    have = _int(ev.allocatable.get(promise.resource, 0))
    want = count * promise.replicas
    wrong = []
    if have != want:
        wrong.append(
            f"allocatable {promise.resource} {have}, config {key} promises {count} GPUs x "
            f"{promise.replicas} replicas = {want}"
        )
    for label, value in (
        (REPLICAS_LABEL, str(promise.replicas)),
        (STRATEGY_LABEL, promise.strategy),
    ):
        seen = ev.labels.get(label)
        if seen is not None and seen != value:  # GFD's labels, where GFD runs
            wrong.append(f"{label}={seen}, config {key} means {value}")
    if not wrong:
        return result(
            COMPONENT,
            Health.HEALTHY,
            f"advertises {have} {promise.resource} ({promise.describe()})",
        )
    waited = ev.waited(opts.since)
    if waited is not None and waited >= PLUGIN_GRACE_SECONDS:
        return result(
            COMPONENT,
            Health.DEGRADED,
            "; ".join(wrong) + f" ({int(waited)}s after the stage adopted it: the config "
            "never took effect)",
        )
    return result(COMPONENT, Health.PROGRESSING, "; ".join(wrong) + " (plugin restarting)")


def _layout_applied(ev: NodeEvidence, pool: PoolTarget) -> bool:
    labels = ev.labels
    return (
        labels.get(names.MIG_CONFIG_LABEL) == pool.mig_config
        and labels.get(names.MIG_CONFIG_STATE_LABEL) == "success"
    )


def _mig_kept(
    ev: NodeEvidence, pool: PoolTarget, per_gpu: Mapping[str, int], count: int, opts: Options
) -> RungResult:
    """Does the node advertise the MIG devices its fleet-repo layout creates? Judged once
    mig-manager reports success; bounded like a MIG reconfiguration (mig_manager.py)."""
    wrong = []
    total = 0
    for resource, n in sorted(per_gpu.items()):
        have = _int(ev.allocatable.get(resource, 0))
        total += have
        if have != n * count:
            wrong.append(
                f"allocatable {resource} {have}, MIG layout {pool.mig_config} gives {count} "
                f"GPUs x {n} = {n * count}"
            )
    if not wrong:
        return result(
            COMPONENT, Health.HEALTHY, f"advertises {total} MIG devices ({pool.mig_config})"
        )
    waited = ev.waited(opts.since)
    if waited is not None and waited >= MIG_STUCK_SECONDS:
        return result(
            COMPONENT,
            Health.DEGRADED,
            "; ".join(wrong) + f" ({int(waited // 60)}m after the stage adopted it: the "
            "layout's devices never appeared)",
        )
    return result(COMPONENT, Health.PROGRESSING, "; ".join(wrong) + " (plugin re-registering)")
