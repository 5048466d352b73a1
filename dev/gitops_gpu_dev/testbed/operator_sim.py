"""The GPU Operator's part, simulated for KWOK nodes: pure functions from one node snapshot
to the label/annotation/spec patch the operator would make next.

Modelled on k8s-operator-libs pkg/upgrade (see DOMAIN.md): with autoUpgrade a node whose driver
differs from its NVIDIADriver walks upgrade-required → cordon-required → wait-for-jobs-required
→ pod-deletion-required → pod-restart-required → validation-required → uncordon-required →
upgrade-done, one step per tick, with maxParallelUpgrades/maxUnavailable slots per driver CR.
The MIG manager moves mig.config.state pending → success. What the simulated node "runs" is
kept in ``sim.gitops-gpu.io/*`` annotations. Faults come from ``sim.gitops-gpu.io/fault``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitops_gpu import names
from gitops_gpu.sync.live import node_ready

SIM = "sim.gitops-gpu.io"
DRIVER_ANN = f"{SIM}/driver-version"
MIG_ANN = f"{SIM}/mig-config"
FAULT_ANN = f"{SIM}/fault"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
# Read by components.validator where no operator-validator pods run (KWOK nodes).
VALIDATOR_ANN = f"{names.GROUP}/validator"
# xid13: an application Xid only DCGM reports (the ladder ignores those): gate.metrics see it.
# smoke-fail: smoke-test pods on the node exit 1 (testbed/smoke_fault.py), the node schedulable.
# plugin-stale: the node's device plugin never takes a new config (testbed/plugin_sim.py).
FAULTS = (
    "upgrade-failed",
    "xid79",
    "not-ready",
    "mig-failed",
    "xid13",
    "smoke-fail",
    "plugin-stale",
)

IDLE = ("", "upgrade-done")
STEPS = (
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
    "upgrade-done",
)
FAILED = "upgrade-failed"
# controllers/state_manager.go gpuStateLabels["container"]; mig-manager only where MIG-capable.
DEPLOY_COMPONENTS = (
    "driver",
    "gpu-feature-discovery",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "operator-validator",
    "client",
)
MIG_MANAGER_DEPLOY = "mig-manager"
Obj = Mapping[str, Any]


@dataclass
class NodePatch:
    labels: dict[str, str | None] = field(default_factory=dict)
    annotations: dict[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None

    def __bool__(self) -> bool:
        return bool(self.labels or self.annotations or self.unschedulable is not None)

    def as_merge_patch(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metadata": {}}
        if self.labels:
            out["metadata"]["labels"] = self.labels
        if self.annotations:
            out["metadata"]["annotations"] = self.annotations
        if self.unschedulable is not None:
            out["spec"] = {"unschedulable": self.unschedulable}
        return out


def _labels(node: Obj) -> Mapping[str, str]:
    return node.get("metadata", {}).get("labels") or {}


def _ann(node: Obj) -> Mapping[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def fault(node: Obj) -> str | None:
    return _ann(node).get(FAULT_ANN)


def driver_labels(version: str) -> dict[str, str | None]:
    """GFD's driver labels for an installed driver version."""
    parts = [*version.split("."), "", "", ""][:3]
    return {
        "nvidia.com/cuda.driver-version.full": version,
        "nvidia.com/cuda.driver-version.major": parts[0],
        "nvidia.com/cuda.driver-version.minor": parts[1],
        "nvidia.com/cuda.driver-version.revision": parts[2] or None,
        "nvidia.com/cuda.driver.major": parts[0],
        "nvidia.com/cuda.driver.minor": parts[1],
        "nvidia.com/cuda.driver.rev": parts[2] or None,
    }


def _slots(nodes: Sequence[Obj], policy: Mapping[str, Any]) -> int:
    states = [_labels(n).get(names.UPGRADE_STATE_LABEL, "") for n in nodes]
    in_progress = sum(1 for s in states if s not in (*IDLE, "upgrade-required"))
    max_parallel = int(policy.get("maxParallelUpgrades", 1))
    available = len(nodes) if max_parallel == 0 else max_parallel - in_progress
    raw = policy.get("maxUnavailable", "25%")
    if isinstance(raw, str) and raw.endswith("%"):
        max_unavail = math.ceil(len(nodes) * float(raw[:-1]) / 100)
    else:
        max_unavail = int(raw)
    # Nodes mid-upgrade count as unavailable even before the cordon lands.
    unavailable = sum(
        1
        for n, s in zip(nodes, states, strict=True)
        if s not in (*IDLE, "upgrade-required")
        or n.get("spec", {}).get("unschedulable")
        or not node_ready(n)
    )
    return max(0, min(available, max_unavail - unavailable))


def driver_step(nodes: Sequence[Obj], driver: Obj) -> dict[str, NodePatch]:
    """One upgrade-controller tick for the nodes owned by ``driver`` (an NVIDIADriver)."""
    spec = driver.get("spec") or {}
    desired = str(spec.get("version", ""))
    policy = spec.get("upgradePolicy") or {}
    auto = bool(policy.get("autoUpgrade", False))
    owner = str(driver["metadata"]["name"])
    patches: dict[str, NodePatch] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        patch = patches.setdefault(name, NodePatch())
        labels = _labels(node)
        current = _ann(node).get(DRIVER_ANN)
        state = labels.get(names.UPGRADE_STATE_LABEL, "")
        if labels.get(names.DRIVER_OWNER_LABEL) != owner:
            patch.labels[names.DRIVER_OWNER_LABEL] = owner
        if current is None and desired:
            # A fresh node: the driver DaemonSet installs the desired version directly, and
            # the upgrade controller finds its pod in sync: upgrade-done.
            patch.annotations[DRIVER_ANN] = desired
            patch.annotations[VALIDATOR_ANN] = "passed"
            patch.labels.update(driver_labels(desired))
            if auto and state == "":
                patch.labels[names.UPGRADE_STATE_LABEL] = "upgrade-done"
            continue
        if state in IDLE and current != desired and auto:
            patch.labels[names.UPGRADE_STATE_LABEL] = "upgrade-required"
        elif state == "upgrade-required" and current == desired:
            patch.labels[names.UPGRADE_STATE_LABEL] = "upgrade-done"
        elif state == FAILED and fault(node) != "upgrade-failed":
            # The driver pod came up after all: k8s-operator-libs goes on to uncordon.
            patch.annotations[DRIVER_ANN] = desired
            patch.annotations[VALIDATOR_ANN] = "passed"
            patch.labels.update(driver_labels(desired))
            patch.labels[names.UPGRADE_STATE_LABEL] = "uncordon-required"
        elif state in STEPS[1:-1]:
            _advance(node, state, desired, patch)
    waiting = sorted(
        n["metadata"]["name"]
        for n in nodes
        if _labels(n).get(names.UPGRADE_STATE_LABEL) == "upgrade-required"
    )
    for name in waiting[: _slots(nodes, policy)]:
        patches[name].labels[names.UPGRADE_STATE_LABEL] = "cordon-required"
    return {k: v for k, v in patches.items() if v}


def _advance(node: Obj, state: str, desired: str, patch: NodePatch) -> None:
    nxt = STEPS[STEPS.index(state) + 1]
    if state == "cordon-required":
        patch.unschedulable = True
    elif state == "pod-restart-required":
        if fault(node) == "upgrade-failed":
            patch.labels[names.UPGRADE_STATE_LABEL] = FAILED
            patch.annotations[VALIDATOR_ANN] = "failed"
            return
        patch.annotations[DRIVER_ANN] = desired
        patch.annotations[VALIDATOR_ANN] = "running"
        patch.labels.update(driver_labels(desired))
    elif state == "validation-required":
        patch.annotations[VALIDATOR_ANN] = "passed"
    elif state == "uncordon-required":
        patch.unschedulable = False
    patch.labels[names.UPGRADE_STATE_LABEL] = nxt


def node_labels(node: Obj) -> NodePatch:
    """The ClusterPolicy controller's node labelling: deploy labels on GPU nodes (mig-manager
    only on MIG-capable ones), and ``mig.config=all-disabled`` where a MIG-capable node has
    none (the chart's migManager.config.default)."""
    labels = _labels(node)
    patch = NodePatch()
    deploy = list(DEPLOY_COMPONENTS)
    mig_capable = labels.get("nvidia.com/mig.capable") == "true"
    if mig_capable:
        deploy.append(MIG_MANAGER_DEPLOY)
        if not labels.get(names.MIG_CONFIG_LABEL):
            patch.labels[names.MIG_CONFIG_LABEL] = "all-disabled"
    for comp in deploy:
        if not labels.get(f"{names.DEPLOY_LABEL_PREFIX}{comp}"):
            patch.labels[f"{names.DEPLOY_LABEL_PREFIX}{comp}"] = "true"
    return patch


def mig_step(node: Obj) -> NodePatch:
    """The MIG manager: apply the node's mig.config label, reporting mig.config.state."""
    labels = _labels(node)
    patch = NodePatch()
    if labels.get("nvidia.com/mig.capable") != "true":
        return patch
    desired = labels.get(names.MIG_CONFIG_LABEL)
    current = _ann(node).get(MIG_ANN, "all-disabled")
    state = labels.get(names.MIG_CONFIG_STATE_LABEL)
    if desired is None or (desired == current and state in ("success", None)):
        if desired is not None and state is None:
            patch.labels[names.MIG_CONFIG_STATE_LABEL] = "success"
        return patch
    if state == "failed" and fault(node) == "mig-failed":
        return patch  # mig-manager keeps reporting failed until the fault is gone
    if state != "pending":
        patch.labels[names.MIG_CONFIG_STATE_LABEL] = "pending"
    elif fault(node) == "mig-failed":
        patch.labels[names.MIG_CONFIG_STATE_LABEL] = "failed"
    else:
        patch.annotations[MIG_ANN] = desired
        patch.labels[names.MIG_CONFIG_STATE_LABEL] = "success"
    return patch


def cluster_policy_state(nodes: Sequence[Obj]) -> str:
    """ClusterPolicy status.state with NVIDIADriver CRs (v26.7.0 nvidiaDriverUpgradeIncomplete):
    notReady while a node owned by an NVIDIADriver is in any upgrade state but done/none (its
    operands are all Ready on KWOK). Ready as soon as it exists, before operands are scheduled."""
    for node in nodes:
        labels = _labels(node)
        if names.DRIVER_OWNER_LABEL not in labels or labels.get(SKIP_LABEL) == "true":
            continue
        if labels.get(names.UPGRADE_STATE_LABEL, "") not in IDLE:
            return "notReady"
    return "ready"


def driver_state(nodes: Sequence[Obj], driver: Obj) -> str:
    """NVIDIADriver status.state: ready once every owned node runs the desired version."""
    desired = str((driver.get("spec") or {}).get("version", ""))
    if not nodes:
        return "ready"
    done = all(
        _ann(n).get(DRIVER_ANN) == desired and _labels(n).get(names.UPGRADE_STATE_LABEL, "") in IDLE
        for n in nodes
    )
    return "ready" if done else "notReady"
