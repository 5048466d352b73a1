"""Node labels: which nodes a pool owns, and batches that respect the pool's maxUnavailable.

Changing mig.config or device-plugin.config disrupts a node (the MIG manager drains and
reconfigures it), so a pool's nodes are relabelled at most ``maxUnavailable`` at a time,
counting nodes that are already busy (cordoned, NotReady, or mid-MIG-reconfiguration). A new
MIG layout waits on a node until its driver is the pool's and no driver upgrade runs there:
mig-manager reconfiguring GPUs while the operator reloads the driver under it fails or wedges,
so a commit changing both moves the driver first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gitops_gpu import names, timefmt
from gitops_gpu.fleet.budget import resolve_max_unavailable
from gitops_gpu.sync.diff import NodeLabelDiff
from gitops_gpu.sync.live import node_ready

Obj = Mapping[str, Any]
_BUSY_MIG_STATES = {"pending", "rebooting"}
# Upgrade states in which the driver is not being replaced (k8s-operator-libs pkg/upgrade).
_DRIVER_SETTLED = {"", "upgrade-done"}


def is_busy(node: Obj) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    if node.get("spec", {}).get("unschedulable"):
        return True
    if labels.get(names.MIG_CONFIG_STATE_LABEL) in _BUSY_MIG_STATES:
        return True
    return not node_ready(node)


# Labels whose change makes the GPU Operator reconfigure (and briefly drain) the node.
DISRUPTIVE = (names.MIG_CONFIG_LABEL, names.DEVICE_PLUGIN_CONFIG_LABEL, names.WORKLOAD_CONFIG_LABEL)


def is_disruptive(diff: NodeLabelDiff) -> bool:
    keys = set(diff.set) | set(diff.remove)
    return any(k in DISRUPTIVE or k.startswith(names.DEPLOY_LABEL_PREFIX) for k in keys)


def waits_for_driver(diff: NodeLabelDiff, node: Obj | None, driver_version: str | None) -> bool:
    """Does this MIG layout change wait for the node's driver (upgrading, or not yet the
    pool's ``driver_version``)? Unknown facts (no node, no GFD label) do not hold it."""
    if names.MIG_CONFIG_LABEL not in diff.set or node is None:
        return False
    node_labels = node.get("metadata", {}).get("labels") or {}
    if node_labels.get(names.UPGRADE_STATE_LABEL, "") not in _DRIVER_SETTLED:
        return True
    running = node_labels.get(names.DRIVER_VERSION_LABEL)
    return bool(driver_version and running and running != driver_version)


def next_batch(
    diffs: Sequence[NodeLabelDiff],
    pool_nodes: Sequence[Obj],
    max_unavailable: int | str,
    driver_version: str | None = None,
) -> list[NodeLabelDiff]:
    """The node label changes to make now: up to maxUnavailable minus nodes already busy,
    leaving MIG layout changes that wait for the node's driver (:func:`waits_for_driver`)."""
    by_name = {n.get("metadata", {}).get("name"): n for n in pool_nodes}
    pending = [
        d
        for d in diffs
        if d.changes and not waits_for_driver(d, by_name.get(d.node), driver_version)
    ]
    if not pending:
        return []
    budget = resolve_max_unavailable(max_unavailable, len(pool_nodes))
    busy = sum(1 for n in pool_nodes if is_busy(n))
    room = max(0, budget - busy)
    return sorted(pending, key=lambda d: d.node)[:room]


def label_patch(diff: NodeLabelDiff, commit: str) -> dict[str, Any]:
    """A merge patch setting/removing labels and recording which keys we own and from where."""
    labels: dict[str, str | None] = dict(diff.set)
    labels.update({k: None for k in diff.remove})
    annotations: dict[str, str | None] = {
        names.MANAGED_LABELS_ANNOTATION: ",".join(diff.desired_keys) or None,
        names.COMMIT_ANNOTATION: commit if diff.desired_keys else None,
    }
    if is_disruptive(diff):
        annotations[names.RELABELLED_ANNOTATION] = timefmt.stamp()
    return {"metadata": {"labels": labels, "annotations": annotations}}
