"""Who holds a node the driver upgrade waits on, read from the real apiserver (waits.py):
a pod owned by a ReplicaSet, protected by a PodDisruptionBudget whose status the real disruption
controller (kube-controller-manager) computes, on a KWOK node in drain-required."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gitops_gpu import names, waits
from gitops_gpu.components.holders import DRAIN
from gitops_gpu.fleet.compiled import PoolTarget

POOL = "train"


def _wait(
    what: str, pred: Callable[[], bool], timeout: float = 60.0, seen: Callable[[], Any] = str
) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}; saw {seen()}"
        time.sleep(0.3)


def _target(upgrade_policy: dict[str, Any]) -> PoolTarget:
    driver = {"metadata": {"name": POOL}, "spec": {"upgradePolicy": upgrade_policy}}
    return PoolTarget(
        name=POOL,
        cluster="lab",
        stage="training",
        node_selector={},
        max_unavailable=1,
        gpu_product=None,
        mig_config=None,
        device_plugin_config=None,
        node_labels={},
        driver=driver,
        driver_version="580.126.20",
    )


@pytest.fixture
def draining(testbed: Any) -> Iterator[tuple[Any, str, str]]:
    """(client, node, namespace): a node in drain-required holding one ReplicaSet's pod under
    a PDB that allows no disruption, and one that allows some."""
    client, uid = testbed.client, uuid.uuid4().hex[:6]
    ns, node = f"waits-{uid}", f"waits-node-{uid}"
    client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {names.UPGRADE_STATE_LABEL: DRAIN},
            },
        }
    )
    pod_labels = {"app": "train"}
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "train-llm-7", "namespace": ns, "labels": pod_labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "train:1"}]},
        }
    )
    # A ReplicaSet of one that adopts the pod (the real ReplicaSet controller sets the owner).
    # Not a Job: KWOK completes Job pods at once, and a finished pod holds nothing.
    client.create(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "train-llm", "namespace": ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": pod_labels},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {"containers": [{"name": "c", "image": "train:1"}]},
                },
            },
        }
    )

    # The budgets come after KWOK has the pod Ready: on a pod update the disruption controller
    # requeues only one of the budgets that match it (it picks one), so a budget judged before
    # Ready could keep currentHealthy 0 until a resync hours away (seen: roomy stuck at 0).
    def ready() -> bool:
        pod = client.get("v1", "Pod", "train-llm-7", ns) or {}
        conditions = (pod.get("status") or {}).get("conditions") or []
        owned = any(
            o.get("kind") == "ReplicaSet" for o in pod["metadata"].get("ownerReferences") or []
        )
        return owned and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    _wait("the pod adopted by its ReplicaSet and Ready", ready)
    for name, minimum in (("train-pdb", 1), ("roomy", 0)):
        client.create(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"minAvailable": minimum, "selector": {"matchLabels": {"app": "train"}}},
            }
        )
    yield client, node, ns
    client.delete("v1", "Node", node)
    client.delete("v1", "Namespace", ns)


def test_a_draining_node_names_the_pod_and_the_pdb_that_hold_it(
    draining: tuple[Any, str, str],
) -> None:
    client, node, ns = draining

    def budgets() -> dict[str, Any]:
        items = client.list("policy/v1", "PodDisruptionBudget", namespace=ns)["items"]
        return {p["metadata"]["name"]: p.get("status") or {} for p in items}

    def pod_conditions() -> Any:
        pod = client.get("v1", "Pod", "train-llm-7", ns) or {}
        return {"pod": (pod.get("status") or {}).get("conditions"), "budgets": budgets()}

    # The disruption controller has judged both budgets (roomy allows one: it really ran).
    _wait(
        "the disruption controller's verdicts",
        lambda: (
            budgets().get("roomy", {}).get("disruptionsAllowed", 0) >= 1
            and budgets().get("train-pdb", {}).get("observedGeneration") is not None
        ),
        seen=pod_conditions,
    )
    target = _target({"drain": {"enable": True, "podSelector": ""}})
    now = time.time()
    found = waits.read(client, {POOL: [client.get("v1", "Node", node)]}, {POOL: target}, now)
    assert [w.node for w in found.waits] == [node]
    wait = found.waits[0]
    assert wait.describe(now + 125) == (
        f"waiting 2m for pod {ns}/train-llm-7 (ReplicaSet, PDB train-pdb allows 0)"
    )
    # Since when is kept on the node, so the next read (and `status`) tell the same time.
    waits.write(client, found)
    again = waits.read(client, {POOL: [client.get("v1", "Node", node)]}, {POOL: target}, now + 60)
    assert again.waits[0].since == int(now) and not again.patches
    # Done waiting: the stamp goes.
    client.patch(
        "v1",
        "Node",
        node,
        {"metadata": {"labels": {names.UPGRADE_STATE_LABEL: "pod-restart-required"}}},
    )
    done = waits.read(client, {POOL: [client.get("v1", "Node", node)]}, {POOL: target}, now + 90)
    assert done.waits == [] and node in done.patches
    waits.write(client, done)
    annotations = client.get("v1", "Node", node)["metadata"].get("annotations") or {}
    assert waits.SINCE_ANNOTATION not in annotations


def test_wait_for_jobs_lists_only_what_the_policy_selects(draining: tuple[Any, str, str]) -> None:
    client, node, ns = draining
    client.patch(
        "v1",
        "Node",
        node,
        {"metadata": {"labels": {names.UPGRADE_STATE_LABEL: "wait-for-jobs-required"}}},
    )
    fresh = client.get("v1", "Node", node)
    selects = _target({"waitForCompletion": {"podSelector": "app=train"}})
    found = waits.read(client, {POOL: [fresh]}, {POOL: selects}, time.time())
    assert [h.pod for h in found.waits[0].holders] == [f"{ns}/train-llm-7"]
    other = _target({"waitForCompletion": {"podSelector": "app=eval"}})
    assert waits.read(client, {POOL: [fresh]}, {POOL: other}, time.time()).waits[0].holders == ()
