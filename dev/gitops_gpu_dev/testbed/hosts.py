"""The hosts' part under the real GPU Operator: what no operator writes on KWOK nodes.

The real operator labels nodes, runs its upgrade state machine and creates operand DaemonSets;
KWOK runs their pods (always Ready). What a real host would add, played here per node:

- the driver the host runs: the version of the newest Ready driver pod on the node, kept in
  :data:`operator_sim.DRIVER_ANN` (NodeGPUReports come from it through the fake NVML), plus
  GFD's ``nvidia.com/cuda.driver*`` labels after a driver change;
- faults the real way: ``upgrade-failed`` makes any *new* driver version crash-loop on the node
  (the pod's container status goes to CrashLoopBackOff with restartCount > 10, which is what
  k8s-operator-libs reads to move the node to ``upgrade-failed``). A kwok Stage per faulty node
  starts such pods crash-looping, never Ready (kwok_stages.driver_crash_stage); a crash written
  after Ready is the fallback. Clearing the fault heals the pod, and the operator moves the node
  on to ``uncordon-required``;
- nudges: the upgrade controller does not watch pods and requeues every 2 minutes, so when a
  node waits on a pod (pod-restart, validation, upgrade-failed) or, owned by an NVIDIADriver,
  has no upgrade state yet, the skip label
  ``nvidia.com/gpu-driver-upgrade.skip`` is toggled between absent and ``false`` (same meaning)
  to trigger a reconcile, as a test would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import names
from gitops_gpu_dev.testbed import operator_sim as sim

Obj = Mapping[str, Any]
DRIVER_COMPONENT = "app.kubernetes.io/component=nvidia-driver"
SKIP_LABEL = sim.SKIP_LABEL
# Upgrade states that wait on a pod the upgrade controller does not watch.
WAITS_ON_PODS = frozenset({"pod-restart-required", "validation-required", "upgrade-failed"})
CRASH_RESTARTS = 11  # k8s-operator-libs: restartCount > 10 and not Ready is "failing"


@dataclass
class PodStatus:
    """A driver pod status write: crash-loop it or heal it."""

    namespace: str
    name: str
    status: dict[str, Any]


def driver_pods_by_node(pods: Sequence[Obj]) -> dict[str, Obj]:
    """The newest driver pod per node that is not being deleted."""
    out: dict[str, Obj] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or meta.get("deletionTimestamp"):
            continue
        have = out.get(node)
        if have is None or str(meta.get("creationTimestamp", "")) > str(
            have["metadata"].get("creationTimestamp", "")
        ):
            out[node] = pod
    return out


def pod_driver_version(pod: Obj) -> str | None:
    """The driver version from the driver container's image tag (``<version>-<os><ver>``)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    ctr = next((c for c in containers if c.get("name") == "nvidia-driver-ctr"), None)
    image = str((ctr or (containers[0] if containers else {})).get("image", ""))
    if "@" in image or ":" not in image.rsplit("/", 1)[-1]:
        return None
    tag = image.rsplit(":", 1)[1]
    return tag.split("-", 1)[0] or None


def pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(statuses)
        and all(c.get("ready") for c in statuses)
    )


def crash_looping(pod: Obj) -> bool:
    return any(
        ((c.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(ready: bool) -> list[dict[str, str]]:
    now = _now()
    flag = "True" if ready else "False"
    conds = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
        {"type": "Ready", "status": flag, "lastTransitionTime": now},
    ]
    if not ready:
        for cond in conds[2:]:
            cond["reason"] = "ContainersNotReady"
    return conds


def crash_status(pod: Obj) -> dict[str, Any]:
    """The pod status of a driver whose container keeps failing to load the module."""
    statuses = []
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        statuses.append(
            {
                "name": ctr["name"],
                "image": ctr.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": CRASH_RESTARTS,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "simulated: the driver module fails to load on this host",
                    }
                },
                "lastState": {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "startedAt": _now(),
                        "finishedAt": _now(),
                    }
                },
            }
        )
    return {"conditions": _conditions(False), "containerStatuses": statuses}


def healed_status(pod: Obj) -> dict[str, Any]:
    """The same pod once its container starts and stays up (restart count kept)."""
    statuses = []
    for ctr in (pod.get("status") or {}).get("containerStatuses") or []:
        statuses.append(
            {
                "name": ctr["name"],
                "image": ctr.get("image", ""),
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": ctr.get("restartCount", 0) + 1,
                "state": {"running": {"startedAt": _now()}},
            }
        )
    return {"conditions": _conditions(True), "containerStatuses": statuses}


def host_step(node: Obj, pod: Obj | None) -> tuple[sim.NodePatch, PodStatus | None]:
    """One host tick: the node patch (driver facts, GFD labels) and a pod status to write."""
    patch = sim.NodePatch()
    if pod is None:
        return patch, None
    meta = pod["metadata"]
    version = pod_driver_version(pod)
    running = (node.get("metadata", {}).get("annotations") or {}).get(sim.DRIVER_ANN)
    failing = sim.fault(node) == "upgrade-failed"
    if crash_looping(pod):
        if not failing:
            return patch, PodStatus(meta["namespace"], meta["name"], healed_status(pod))
        return patch, None
    if not pod_ready(pod) or version is None:
        return patch, None
    if failing and running is not None and version != running:
        return patch, PodStatus(meta["namespace"], meta["name"], crash_status(pod))
    if version != running:
        patch.annotations[sim.DRIVER_ANN] = version
        patch.labels.update(sim.driver_labels(version))
    return patch, None


def driver_image(pod: Obj) -> str | None:
    """The driver container's image."""
    containers = (pod.get("spec") or {}).get("containers") or []
    ctr = next((c for c in containers if c.get("name") == "nvidia-driver-ctr"), None)
    return None if ctr is None else ctr.get("image")


def crash_image(node: Obj, pod: Obj | None, have: str | None) -> str | None:
    """The image a faulty node keeps running (its driver-crash stage spares only that one), or
    None when the node has no fault. ``have`` is what its stage spares now: kept while the
    fault lasts, so a later pod cannot widen it."""
    if sim.fault(node) != "upgrade-failed":
        return None
    if have:
        return have
    running = (node.get("metadata", {}).get("annotations") or {}).get(sim.DRIVER_ANN)
    if pod is None or running is None or pod_driver_version(pod) != running:
        return None  # not known yet: the crash written after Ready stands in
    return driver_image(pod)


def handled(node: Obj, pod: Obj | None, wrote: bool) -> bool:
    """Whether the host has had its say on the node's driver pod, so the operator may look:
    the pod was just crash-looped or healed, is crash-looping, or is Ready and not about to be
    crash-looped. A pod KWOK has just made Ready on a faulty node is not (the next tick
    crash-loops it; a nudge before that would let the operator validate a driver that fails)."""
    if pod is None:
        return False
    if wrote or crash_looping(pod):
        return True
    if not pod_ready(pod):
        return False
    running = (node.get("metadata", {}).get("annotations") or {}).get(sim.DRIVER_ANN)
    return sim.fault(node) != "upgrade-failed" or pod_driver_version(pod) in (running, None)


def nudge_patch(node: Obj) -> dict[str, Any] | None:
    """A no-op label change that makes the upgrade controller reconcile, if the node waits:
    on a pod, or (owned by an NVIDIADriver, so its driver pod is coming) for its first state,
    which the operator otherwise writes at its next 2-minute requeue."""
    labels = node.get("metadata", {}).get("labels") or {}
    state = labels.get(names.UPGRADE_STATE_LABEL, "")
    fresh = state == "" and bool(labels.get(names.DRIVER_OWNER_LABEL))
    if state not in WAITS_ON_PODS and not fresh:
        return None
    skip = labels.get(SKIP_LABEL)
    if skip not in (None, "false"):
        return None  # a person set it: leave it alone
    return {"metadata": {"labels": {SKIP_LABEL: None if skip == "false" else "false"}}}
