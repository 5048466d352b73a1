"""GPU Operator signals every rung reads the same way: deploy labels, operand pods, report age.

Deploy labels (``nvidia.com/gpu.deploy.<component>``): the pool switches a component off by
desiring ``false`` (that rung is skipped); ``paused-for-*`` means the operator paused the operand
for a driver upgrade or MIG change (Progressing); a node still showing ``false`` while the pool
wants the component means the label change has not landed yet (Progressing).

Operand pods: the ClusterPolicy is not part of the evidence, so a component may be switched off
cluster-wide while its label still says ``true``. Hence a pod that *exists* must be healthy
(crash-looping -> Degraded, not Ready -> Progressing), but a *missing* pod is not held against
the node; only the validator demands positive evidence (see validator.py).

Report age: a NodeGPUReport is judged by its content only while it is fresh, i.e. younger than
its stale limit counted from its observedAt or from when the controller saw it last change,
whichever is earlier (an agent that stopped goes stale whatever observedAt claims), and not
dated further ahead of the controller's clock than ``MAX_CLOCK_SKEW_SECONDS`` (untrusted).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from gitops_gpu import names, timefmt
from gitops_gpu.components.evidence import NodeEvidence, seen_at
from gitops_gpu.components.health import Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

Obj = Mapping[str, Any]

# Operand pods' `app` label in the GPU Operator's assets.
APP_DRIVER = "nvidia-driver-daemonset"
APP_TOOLKIT = "nvidia-container-toolkit-daemonset"
APP_GFD = "gpu-feature-discovery"
APP_DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"
APP_DCGM = "nvidia-dcgm"
APP_DCGM_EXPORTER = "nvidia-dcgm-exporter"
APP_MIG_MANAGER = "nvidia-mig-manager"
APP_VALIDATOR = "nvidia-operator-validator"

# How far a report's observedAt may lie ahead of the controller's clock (node and controller
# clocks drift apart a little). Further ahead, observedAt would keep the report fresh for as
# long as it leads: such a report is untrusted, its rungs Unknown.
MAX_CLOCK_SKEW_SECONDS = 30.0
# The longest agent heartbeat that widens the stale limit (to 2.5 heartbeats); the agent's
# default is max(4 x interval, 60 s).
MAX_HEARTBEAT_SECONDS = 600.0

_BROKEN_WAITING = {
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}


def deploy_gate(
    component: str, ev: NodeEvidence, pool: PoolTarget, deploy: str
) -> RungResult | None:
    """Skip/pause verdict from ``nvidia.com/gpu.deploy.<deploy>``; None means: judge the rung."""
    key = names.DEPLOY_LABEL_PREFIX + deploy
    if pool.node_labels.get(key) == "false":
        return result(
            component, Health.HEALTHY, f"skipped: the pool sets {key}=false", skipped=True
        )
    value = ev.labels.get(key)
    if value is not None and value.startswith("paused-for-"):
        return result(component, Health.PROGRESSING, f"{key}={value}")
    if value == "false":
        return result(
            component,
            Health.PROGRESSING,
            f"{key}=false on the node but the pool deploys it (label not applied yet)",
        )
    return None


def disabled_for_pool(pool: PoolTarget, deploy: str) -> bool:
    return pool.node_labels.get(names.DEPLOY_LABEL_PREFIX + deploy) == "false"


def pods_for(ev: NodeEvidence, app: str) -> list[Obj]:
    """Operand pods on the node by their ``app`` label, else by DaemonSet pod name
    (``<app>-<5 chars>``, so nvidia-dcgm does not claim nvidia-dcgm-exporter's pods)."""
    if not ev.pods:
        return []
    name_re = _pod_name(app)
    found = []
    for pod in ev.pods:
        meta = pod.get("metadata", {})
        if (meta.get("labels") or {}).get("app") == app or name_re.match(str(meta.get("name", ""))):
            found.append(pod)
    return found


@functools.cache
def _pod_name(app: str) -> re.Pattern[str]:
    return re.compile(re.escape(app) + r"-[a-z0-9]{5}$")


def _newest(pods: Sequence[Obj]) -> Obj:
    return max(pods, key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")))


def pod_ready(pod: Obj) -> bool:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_broken(pod: Obj) -> str | None:
    """Why a pod cannot become Ready on its own (crash loop, bad image), or None."""
    status = pod.get("status", {})
    if status.get("phase") == "Failed":
        return f"phase Failed ({status.get('reason', 'no reason')})"
    for cs in _statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _BROKEN_WAITING:
            restarts = cs.get("restartCount", 0)
            return f"container {cs.get('name')} {waiting['reason']} ({restarts} restarts)"
    return None


# The driver pod (k8s-operator-libs' upgrade state manager selects it by this label) may crash
# a few times while it builds or loads the module; past this many restarts, or an image it
# cannot pull for this long, it is broken, not still upgrading.
DRIVER_COMPONENT_LABEL = ("app.kubernetes.io/component", "nvidia-driver")
DRIVER_CRASH_RESTARTS = 5
DRIVER_IMAGE_GRACE_SECONDS = 300.0


def driver_pod_problem(ev: NodeEvidence) -> tuple[Health, str] | None:
    """A driver pod on the node that cannot become Ready: Progressing while it may still
    recover, Degraded past the bound; None when it is fine or absent."""
    key, value = DRIVER_COMPONENT_LABEL
    pods = [p for p in ev.pods if (p.get("metadata", {}).get("labels") or {}).get(key) == value]
    if not pods:
        return None
    pod = _newest(pods)
    broken = pod_broken(pod)
    if broken is None:
        return None
    name = pod.get("metadata", {}).get("name", "driver")
    restarts = max((int(cs.get("restartCount") or 0) for cs in _statuses(pod)), default=0)
    created = timefmt.parse(pod.get("metadata", {}).get("creationTimestamp"))
    age = (ev.now - created).total_seconds() if created else 0.0
    crash = "CrashLoopBackOff" in broken
    over = restarts >= DRIVER_CRASH_RESTARTS if crash else age >= DRIVER_IMAGE_GRACE_SECONDS
    if over or "phase Failed" in broken:
        return Health.DEGRADED, f"driver pod {name}: {broken}"
    return Health.PROGRESSING, f"driver pod {name}: {broken}"


def _statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status", {})
    return list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )


def pod_verdict(component: str, ev: NodeEvidence, app: str) -> RungResult | None:
    """Health of the operand pod on the node; None when it is fine or there is no pod."""
    pods = pods_for(ev, app)
    if not pods:
        return None
    pod = _newest(pods)
    name = pod.get("metadata", {}).get("name", app)
    broken = pod_broken(pod)
    if broken:
        return result(component, Health.DEGRADED, f"pod {name}: {broken}")
    if not pod_ready(pod):
        phase = pod.get("status", {}).get("phase", "Pending")
        return result(component, Health.PROGRESSING, f"pod {name} not Ready ({phase})")
    return None


def operand_verdict(
    component: str, ev: NodeEvidence, pool: PoolTarget, deploy: str, app: str
) -> RungResult | None:
    """The deploy gate, then the operand pod; None means: judge the rung's own signals."""
    gate = deploy_gate(component, ev, pool, deploy)
    if gate is not None:
        return gate
    return pod_verdict(component, ev, app)


def stale_limit(status: Obj, opts: Options) -> float:
    """Seconds after which a report is stale: the option, or 2.5 agent heartbeats if longer. A
    heartbeat that is not a positive finite number does not count; one above
    ``MAX_HEARTBEAT_SECONDS`` counts as that (a report must not buy itself a longer life)."""
    beat = status.get("heartbeatSeconds")
    if isinstance(beat, bool) or not isinstance(beat, int | float):
        return opts.stale_after
    if not (math.isfinite(beat) and beat > 0):
        return opts.stale_after
    return max(opts.stale_after, 2.5 * min(float(beat), MAX_HEARTBEAT_SECONDS))


def report_window(report: Obj | None, opts: Options) -> tuple[datetime, datetime] | None:
    """When a report may be judged by its content: from its observedAt less the allowed clock
    skew, until it goes stale (the stale limit after its observedAt or after the controller saw
    it change, whichever is earlier). None when it has no observedAt."""
    status = (report or {}).get("status") or {}
    observed = timefmt.parse(status.get("observedAt"))
    if observed is None:
        return None
    seen = seen_at(report)
    since = observed if seen is None else min(observed, seen)
    return (
        observed - timedelta(seconds=MAX_CLOCK_SKEW_SECONDS),
        since + timedelta(seconds=stale_limit(status, opts)),
    )


def report_problem(component: str, ev: NodeEvidence, opts: Options) -> RungResult | None:
    """Unknown when there is no usable NodeGPUReport; None when the report is fresh."""
    status = ev.status
    if status is None:
        return result(
            component,
            Health.UNKNOWN,
            "no NodeGPUReport for the node (is the gitops-gpu agent running there?)",
        )
    window = report_window(ev.report, opts)
    if window is None:
        return result(component, Health.UNKNOWN, "NodeGPUReport has no observedAt")
    if ev.now < window[0]:
        return result(component, Health.UNKNOWN, untrusted_reason(ev))
    if ev.now > window[1]:
        age = ev.report_age or 0.0
        limit = stale_limit(status, opts)
        return result(
            component,
            Health.UNKNOWN,
            f"NodeGPUReport is stale: {age:.0f}s old (limit {limit:.0f}s)",
        )
    return None


def clock_lead(ev: NodeEvidence) -> float:
    """Seconds the report's observedAt lies ahead of the controller's clock (0 without one)."""
    observed = ev.observed_at
    return 0.0 if observed is None else (observed - ev.now).total_seconds()


def untrusted_reason(ev: NodeEvidence) -> str:
    observed = (ev.status or {}).get("observedAt")
    return (
        f"NodeGPUReport observedAt {observed} is {clock_lead(ev):.0f}s ahead of the "
        f"controller's clock (max skew {MAX_CLOCK_SKEW_SECONDS:.0f}s): untrusted"
    )


def xids_since(status: Obj, since: Any) -> list[Obj]:
    """Xid events in the report seen at or after ``since`` (all of them when since is None)."""
    events = status.get("xidEvents") or []
    if since is None:
        return list(events)
    out = []
    for ev in events:
        seen = timefmt.parse(ev.get("seenAt"))
        if seen is None or seen >= since:
            out.append(ev)
    return out
