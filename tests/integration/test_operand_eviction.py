"""Evicting stale operand pods against the real apiserver: a PodDisruptionBudget refuses it and
the refusal is the reason the pool is not converged (sync/operands.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gitops_gpu.sync import operands
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration
NS = "gitops-gpu-evict"


def _pod(name: str, node: str = "evict-000") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "operand"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "example.invalid/none"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def _running(client: Any, name: str) -> bool:
    pod = client.get("v1", "Pod", name, NS)
    return bool(pod and (pod.get("status") or {}).get("phase") == "Running")


def test_eviction_is_refused_by_a_pdb_and_done_without_one(clean_cluster: Testbed) -> None:
    client = clean_cluster.client
    client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        field_manager="test",
    )
    created = nodes.create_pool_nodes(
        client, [nodes.PoolShape("evict", {"pool": "evict"}, "NVIDIA-L40S")], 1
    )
    nodes.wait_ready(client, created)
    client.create(_pod("guarded", created[0]))
    client.create(_pod("free", created[0]))
    deadline = time.monotonic() + 30  # kwok runs them: Pending pods are always evictable
    while not (_running(client, "guarded") and _running(client, "free")):
        assert time.monotonic() < deadline, "pods not Running"
        time.sleep(0.2)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-one", "namespace": NS},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "operand"}}},
    }
    client.request("POST", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", body=pdb)
    deadline = time.monotonic() + 30  # the disruption controller computes what is allowed
    while True:
        got = client.request(
            "GET", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/keep-one"
        )
        if (got.get("status") or {}).get("currentHealthy") == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    refused = operands.evict(client, _pod("guarded"))
    assert refused is not None and refused.startswith(f"cannot evict {NS}/guarded: ")
    assert client.get("v1", "Pod", "guarded", NS) is not None
    client.request("DELETE", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/keep-one")
    assert operands.evict(client, _pod("free")) is None
    deadline = time.monotonic() + 30
    while client.get("v1", "Pod", "free", NS) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    gone = client.get("v1", "Pod", "free", NS)
    assert gone is None or gone["metadata"].get("deletionTimestamp")
    assert operands.evict(client, _pod("never-existed")) is None  # already gone is done
