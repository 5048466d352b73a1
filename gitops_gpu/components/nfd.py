"""Rung 1, Node Feature Discovery: the node must be labelled as carrying an NVIDIA PCI device.

The GPU Operator only deploys operands to nodes with ``feature.node.kubernetes.io/pci-10de.present``
(from NFD) or ``nvidia.com/gpu.present``. A brand-new node gets a grace period before a missing
label counts as a fault, since NFD labels within a minute or so of the node joining.
"""

from __future__ import annotations

from gitops_gpu import names
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "nfd"
PCI_NVIDIA_LABEL = "feature.node.kubernetes.io/pci-10de.present"
NEW_NODE_GRACE_SECONDS = 600.0


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    for key in (PCI_NVIDIA_LABEL, names.GPU_PRESENT_LABEL):
        if ev.labels.get(key) == "true":
            return result(COMPONENT, Health.HEALTHY, f"{key}=true")
    missing = f"neither {PCI_NVIDIA_LABEL} nor {names.GPU_PRESENT_LABEL} is true"
    created = ev.created
    if created is not None and (ev.now - created).total_seconds() < NEW_NODE_GRACE_SECONDS:
        return result(COMPONENT, Health.PROGRESSING, f"{missing}; new node, waiting for NFD")
    return result(
        COMPONENT,
        Health.DEGRADED,
        f"{missing}: NFD has not labelled the node (or it has no NVIDIA GPU), "
        "so the GPU Operator deploys nothing there",
    )
