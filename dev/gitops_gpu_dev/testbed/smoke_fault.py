"""The workload part of the testbed faults.

``smoke-fail``: the node's GPU fails a CUDA health check the operator's own ladder does not
see. The node stays schedulable and the GPU Operator's DaemonSets are untouched, so the stage
still converges; a ``gate.smokeTest`` pod placed there runs and exits 1 with the checker's
message (a kwok Stage, see kwok_stages.py). Clearing the fault lets the next smoke pod pass.
"""

from __future__ import annotations

from gitops_gpu import kube

from . import kwok_stages
from .operator_sim import FAULT_ANN

SMOKE_FAIL = "smoke-fail"


def apply_fault(client: kube.Client, node: str, fault: str | None) -> None:
    """Bring kwok's smoke-fail stage in line with the nodes whose fault annotation says so
    (call after setting ``node``'s annotation; ``node`` and ``fault`` are checked again here)."""
    failing = {
        n["metadata"]["name"]
        for n in client.list("v1", "Node")["items"]
        if ((n["metadata"].get("annotations") or {}).get(FAULT_ANN)) == SMOKE_FAIL
    }
    if fault == SMOKE_FAIL:
        failing.add(node)
    else:
        failing.discard(node)
    kwok_stages.set_smoke_failing(client, sorted(failing))
