"""The scheduling part of the testbed faults.

``smoke-fail``: a GPU health checker has tainted the node (``gpu-health.testbed/unhealthy``,
``NoSchedule``), as node-problem-detector style checkers do when a GPU misbehaves in ways the
operator's own ladder does not see. Running pods and the GPU Operator's DaemonSets (which
tolerate everything) are untouched, so the stage still converges; a ``gate.smokeTest`` pod
(which tolerates only ``nvidia.com/gpu`` taints) cannot be scheduled there, and the test fails
at its timeout with the scheduler's reason. Clearing the fault removes the taint.
"""

from __future__ import annotations

from typing import Any

from gitops_gpu import kube

SMOKE_FAIL = "smoke-fail"
TAINT_KEY = "gpu-health.testbed/unhealthy"


def apply_fault(client: kube.Client, node: str, fault: str | None) -> None:
    """Set or lift the taint the fault implies (call after setting the fault annotation)."""
    obj = client.get("v1", "Node", node)
    if obj is None:
        return
    taints: list[dict[str, Any]] = list((obj.get("spec") or {}).get("taints") or [])
    kept = [t for t in taints if t.get("key") != TAINT_KEY]
    if fault == SMOKE_FAIL:
        kept.append({"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"})
    if kept == taints:
        return
    client.patch("v1", "Node", node, {"spec": {"taints": kept}})
