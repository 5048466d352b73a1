"""Staged operand upgrades, the pure part (sync/operands.py) and how the gate sees it."""

from __future__ import annotations

from typing import Any

from gitops_gpu.observe import fold_operands
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.sync import operands

CP_OWNER = [{"kind": "ClusterPolicy", "name": "cluster-policy", "uid": "cp"}]
DEPLOY = "nvidia.com/gpu.deploy.container-toolkit"


def ds(name: str, uid: str, owner: list[dict[str, str]] = CP_OWNER) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid, "ownerReferences": owner},
        "spec": {"template": {"spec": {"nodeSelector": {DEPLOY: "true"}}}},
    }


def rev(ds_name: str, uid: str, number: int, hashed: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{ds_name}-{hashed}",
            "labels": {"controller-revision-hash": hashed},
            "ownerReferences": [{"kind": "DaemonSet", "uid": uid}],
        },
        "revision": number,
    }


def pod(name: str, node: str, uid: str, hashed: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "labels": {"controller-revision-hash": hashed},
            "ownerReferences": [{"kind": "DaemonSet", "uid": uid}],
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {DEPLOY: "true", **labels}}}


TOOLKIT = ds("nvidia-container-toolkit-daemonset", "tk")
DRIVER = ds("nvidia-gpu-driver-ubuntu22.04", "drv", [{"kind": "NVIDIADriver", "uid": "d"}])
REVS = [
    rev(TOOLKIT["metadata"]["name"], "tk", 1, "old"),
    rev(TOOLKIT["metadata"]["name"], "tk", 2, "new"),
]


def test_current_revision_is_the_newest_controller_revision_and_drivers_are_not_operands() -> None:
    ops = operands.read([TOOLKIT, DRIVER], REVS, [pod("p", "n1", "drv", "x")])
    assert {v.name: v.revision for v in ops.daemonsets.values()} == {
        "nvidia-container-toolkit-daemonset": "new"
    }
    assert ops.pods_by_node == {}  # the driver pod is the upgrade controller's


def test_node_on_revision_only_with_a_running_current_pod() -> None:
    pods = [
        pod("a", "n1", "tk", "old"),
        pod("b", "n2", "tk", "new", phase="Pending"),
        pod("c", "n3", "tk", "new"),
    ]
    ops = operands.read([TOOLKIT], REVS, pods)
    n1, n2, n3, n4 = (operands.node_state(ops, node(n)) for n in ("n1", "n2", "n3", "n4"))
    assert [p["metadata"]["name"] for p in n1.stale] == ["a"] and not n1.on_revision
    assert n2.waiting == ("nvidia-container-toolkit-daemonset",) and not n2.on_revision
    assert n3.on_revision
    assert not n4.on_revision  # the pod was deleted and is not back yet
    # a node the DaemonSet does not select has nothing to wait for
    off = {"metadata": {"name": "n5", "labels": {DEPLOY: "false"}}}
    assert operands.node_state(ops, off).on_revision


def test_batches_respect_max_unavailable_and_nodes_in_flight() -> None:
    pods = [pod(f"p{i}", f"n{i}", "tk", "old") for i in range(4)]
    ops = operands.read([TOOLKIT], REVS, pods)
    states = [operands.node_state(ops, node(f"n{i}")) for i in range(4)]
    assert [s.node for s in operands.next_batch(states, 1)] == ["n0"]
    assert [s.node for s in operands.next_batch(states, "50%")] == ["n0", "n1"]
    assert operands.next_batch(states, 1, busy=1) == []
    # n0 evicted, its new pod not Running yet: the budget of 1 is used
    ops = operands.read([TOOLKIT], REVS, [*pods[1:], pod("q", "n0", "tk", "new", "Pending")])
    states = [operands.node_state(ops, node(f"n{i}")) for i in range(4)]
    assert operands.next_batch(states, 1) == []
    assert [s.node for s in operands.next_batch(states, 2)] == ["n1"]


def test_a_pool_that_does_not_expect_the_revision_is_left_alone_and_ahead_nodes_counted() -> None:
    pods = [pod("a", "n1", "tk", "old"), pod("b", "n2", "tk", "new")]  # n2 rebooted
    ops = operands.read([TOOLKIT], REVS, pods)
    members = [node("n1"), node("n2")]
    later, _ = operands.pool_state(ops, members, expects_current=False)
    assert (later.behind, later.stale_pods, later.ahead) == (0, 0, 1)
    now, _ = operands.pool_state(ops, members, expects_current=True)
    assert (now.behind, now.stale_pods) == (1, 1)
    expected = "operands: node n1: nvidia-container-toolkit-daemonset at an old revision"
    assert now.first == expected
    refused, _ = operands.pool_state(ops, members, True, {"n1": "cannot evict x: PDB"})
    assert refused.first == "operands: node n1: cannot evict x: PDB"


def test_the_gate_counts_nodes_behind_as_progressing_and_the_pool_out_of_sync() -> None:
    obs = PoolObservation("canary", "c", True, 2, 2, summary="on 580")
    behind = operands.PoolOperands(behind=1, stale_pods=1, ahead=0, first="operands: node n1")
    folded = fold_operands(obs, behind)
    assert (folded.nodes_healthy, folded.nodes_progressing, folded.objects_in_sync) == (1, 1, False)
    assert folded.first_failure == "operands: node n1"
    recreating = operands.PoolOperands(behind=1, stale_pods=0, ahead=0, first=None)
    assert fold_operands(obs, recreating).objects_in_sync  # nothing left to evict
    ahead = operands.PoolOperands(behind=0, stale_pods=0, ahead=2, first=None)
    assert fold_operands(obs, ahead).summary == "on 580, 2 nodes ahead of stage"
    assert fold_operands(obs, ahead).nodes_healthy == 2


def _with_image(obj: dict[str, Any], image: str) -> dict[str, Any]:
    out = {**obj, "spec": {"template": {"spec": {"containers": [{"image": image}]}}}}
    return out


def test_image_path_follows_the_operators_rules() -> None:
    tk = {"repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit", "version": "v1.19.2"}
    assert operands.image_path(tk) == "nvcr.io/nvidia/k8s/container-toolkit:v1.19.2"
    digest = {**tk, "version": "sha256:abc"}
    assert operands.image_path(digest) == "nvcr.io/nvidia/k8s/container-toolkit@sha256:abc"
    assert operands.image_path({"image": "reg/x@sha256:1"}) == "reg/x@sha256:1"
    assert operands.image_path({"version": "v1"}) is None  # half a path: the env decides


def test_a_daemonset_that_does_not_run_the_policys_image_is_lagging() -> None:
    spec = {"toolkit": {"repository": "r", "image": "tk", "version": "v2"}}
    # right after a rollback the DaemonSet still runs the version the policy just left
    assert operands.lagging([_with_image(TOOLKIT, "r/tk:v3")], spec) == [
        "nvidia-container-toolkit-daemonset"
    ]
    assert operands.lagging([_with_image(TOOLKIT, "r/tk:v2")], spec) == []
    # a driver DaemonSet is not an operand, and a component the spec leaves alone is not judged
    assert operands.lagging([_with_image(DRIVER, "x")], {"driver": {"image": "y"}}) == []
    assert operands.lagging([_with_image(TOOLKIT, "r/tk:v3")], {"dcgm": {}}) == []
