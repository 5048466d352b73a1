"""Builders for ladder tests: a node that passes every rung, and ways to break one rung.

The NodeGPUReport status comes from the real report builder reading the fake NVML snapshots, so
the ladder is tested against exactly what the agent publishes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from gitops_gpu import names
from gitops_gpu.agent import fake_nvml, report
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.validator import VALIDATION_ANNOTATION
from gitops_gpu.fleet.compiled import PoolTarget, UnavailableNodes
from gitops_gpu.fleet.sharing_promise import SharingPromise

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
DRIVER = "580.126.20"
PRODUCTS = {
    "h100-80gb": "NVIDIA-H100-80GB-HBM3",
    "h100-80gb-mig": "NVIDIA-H100-80GB-HBM3",
    "l40s": "NVIDIA-L40S",
    "a100-40gb": "NVIDIA-A100-SXM4-40GB",
    "b200": "NVIDIA-B200",
}
DEPLOY = (
    "driver",
    "container-toolkit",
    "gpu-feature-discovery",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "mig-manager",
    "operator-validator",
)
APPS = (
    signals.APP_DRIVER,
    signals.APP_TOOLKIT,
    signals.APP_GFD,
    signals.APP_DEVICE_PLUGIN,
    signals.APP_DCGM_EXPORTER,
    signals.APP_MIG_MANAGER,
    signals.APP_VALIDATOR,
)


def pool(
    *,
    name: str = "train",
    driver_version: str | None = DRIVER,
    mig_config: str | None = "all-disabled",
    device_plugin_config: str | None = None,
    gpu_product: str | None = "NVIDIA-H100-80GB-HBM3",
    extra_labels: Mapping[str, str] | None = None,
    max_unavailable: int | str = 1,
    unavailable_nodes: UnavailableNodes = "skip",
    device_plugin_promise: SharingPromise | None = None,
) -> PoolTarget:
    labels = {"gitops-gpu.io/pool": name, **(extra_labels or {})}
    if mig_config:
        labels["nvidia.com/mig.config"] = mig_config
    return PoolTarget(
        name=name,
        cluster="lab",
        stage="canary",
        node_selector={"pool": name},
        max_unavailable=max_unavailable,
        gpu_product=gpu_product,
        mig_config=mig_config,
        device_plugin_config=device_plugin_config,
        node_labels=labels,
        driver={
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": name},
            "spec": {"version": driver_version},
        },
        driver_version=driver_version,
        unavailable_nodes=unavailable_nodes,
        device_plugin_promise=device_plugin_promise,
    )


def status_for(
    name: str, snapshot: str = "h100-80gb", *, age: float = 30.0, **overrides: Any
) -> dict[str, Any]:
    fake = fake_nvml.from_snapshot_file(snapshot, seed=name, **overrides)
    return report.read_status(fake, name, now=NOW - timedelta(seconds=age))


def node_obj(
    name: str,
    snapshot: str = "h100-80gb",
    *,
    mig_config: str = "all-disabled",
    pool_name: str = "train",
) -> dict[str, Any]:
    snap = fake_nvml.load_snapshot(snapshot)
    count = int(snap["gpuCount"])
    labels = {
        "pool": pool_name,
        "gitops-gpu.io/pool": pool_name,
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": PRODUCTS[snapshot],
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/cuda.driver-version.full": DRIVER,
        "nvidia.com/mig.capable": "false" if snapshot == "l40s" else "true",
        "nvidia.com/mig.config": mig_config,
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        "nvidia.com/gpu-operator.driver.owner": pool_name,
        **{f"nvidia.com/gpu.deploy.{c}": "true" for c in DEPLOY},
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {VALIDATION_ANNOTATION: "passed"},
            "creationTimestamp": "2026-11-01T00:00:00Z",
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "allocatable": {"cpu": "96", "nvidia.com/gpu": str(count)},
        },
    }


def healthy(name: str = "gpu-1", snapshot: str = "h100-80gb", **overrides: Any) -> NodeEvidence:
    mig = "all-1g.10gb" if snapshot == "h100-80gb-mig" else "all-disabled"
    node = node_obj(name, snapshot, mig_config=mig)
    if mig != "all-disabled":
        node["status"]["allocatable"] = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}
    status = status_for(name, snapshot, **overrides)
    return NodeEvidence(name, node, {"metadata": {"name": name}, "status": status}, (), NOW)


def pod(app: str, node: str, *, ready: bool = True, waiting: str | None = None) -> dict[str, Any]:
    cs: dict[str, Any] = {
        "name": "main",
        "restartCount": 7 if waiting else 0,
        "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}},
    }
    return {
        "metadata": {
            "name": f"{app}-x1y2z",
            "namespace": "gpu-operator",
            "labels": {"app": app},
            "creationTimestamp": "2026-11-29T11:00:00Z",
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [cs],
        },
    }


def with_pods(ev: NodeEvidence, **broken: dict[str, Any]) -> NodeEvidence:
    """All operand pods Ready on the node; ``broken`` maps an app to pod() keyword overrides."""
    pods = [pod(app, ev.name, **broken.get(app, {})) for app in APPS]
    return NodeEvidence(ev.name, ev.node, ev.report, tuple(pods), ev.now)


def edit(
    ev: NodeEvidence,
    labels: Mapping[str, str | None] | None = None,
    annotations: Mapping[str, str | None] | None = None,
    allocatable: Mapping[str, str] | None = None,
    ready: str | None = None,
    report: Any = "keep",
    pods: Any = None,
    ready_since: datetime | None = None,
    cordoned: bool | None = None,
) -> NodeEvidence:
    node = copy.deepcopy(dict(ev.node))
    for key, value in (labels or {}).items():
        if value is None:
            node["metadata"]["labels"].pop(key, None)
        else:
            node["metadata"]["labels"][key] = value
    for key, value in (annotations or {}).items():
        if value is None:
            node["metadata"]["annotations"].pop(key, None)
        else:
            node["metadata"]["annotations"][key] = value
    if allocatable is not None:
        node["status"]["allocatable"] = dict(allocatable)
    if ready is not None:
        node["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": ready,
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
            }
        ]
    if ready_since is not None:
        for cond in node["status"]["conditions"]:
            cond["lastTransitionTime"] = ready_since.strftime("%Y-%m-%dT%H:%M:%SZ")
    if cordoned is not None:
        node["spec"] = {"unschedulable": True} if cordoned else {}
    new_report = ev.report if report == "keep" else report
    return NodeEvidence(ev.name, node, new_report, ev.pods if pods is None else pods, ev.now)


def with_status(ev: NodeEvidence, status: dict[str, Any] | None) -> NodeEvidence:
    rep = None if status is None else {"metadata": {"name": ev.name}, "status": status}
    return edit(ev, report=rep)


def with_seen(ev: NodeEvidence, age: float) -> NodeEvidence:
    """The report as the controller's cache keeps it: its content last seen changing ``age``
    seconds before NOW (sync/live.py)."""
    assert ev.report is not None
    return edit(ev, report={**ev.report, names.REPORT_SEEN_KEY: NOW - timedelta(seconds=age)})
