"""The unverified taint on a real apiserver (sync/verify_nodes.py apply): ours is added and
removed by key, every other taint and annotation stays, and the verified commit is recorded."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.sync import slim, verify_nodes
from gitops_gpu.sync.verify_nodes import Change

THEIRS = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def node(testbed: Any) -> Iterator[str]:
    name = f"verify-{uuid.uuid4().hex[:6]}"
    testbed.client.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"taints": [THEIRS]},
        }
    )
    yield name
    testbed.client.delete("v1", "Node", name)


def _taints(client: Any, name: str) -> list[dict[str, Any]]:
    """The node's taints but the node lifecycle controller's own (not-ready comes and goes)."""
    return [
        {k: v for k, v in t.items() if k != "timeAdded"}
        for t in client.get("v1", "Node", name)["spec"].get("taints", [])
        if not t["key"].startswith("node.kubernetes.io/")
    ]


def test_our_taint_comes_and_goes_and_theirs_stays(testbed: Any, node: str) -> None:
    client = testbed.client
    assert verify_nodes.apply(client, [Change(node, taint=True)]) == 1
    ours = {"key": names.UNVERIFIED_TAINT, "effect": "NoSchedule"}
    assert _taints(client, node) == [THEIRS, ours]
    # The informer's projection sees ours (decide reads it) and nothing of theirs.
    assert slim.node(client.get("v1", "Node", node))["spec"]["taints"] == [ours]
    commit = "c" * 40
    assert verify_nodes.apply(client, [Change(node, taint=False, verified=commit)]) == 1
    after = client.get("v1", "Node", node)
    assert _taints(client, node) == [THEIRS]
    assert after["metadata"]["annotations"][names.VERIFIED_ANNOTATION] == commit
    assert after["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    # A node that went meanwhile is skipped, not an error.
    assert verify_nodes.apply(client, [Change("no-such-node", taint=True)]) == 0


def _read_then_overtaken(client: Any, node: str) -> dict[str, Any]:
    """The node as read just before another writer changed it."""
    stale = client.get("v1", "Node", node)
    client.patch("v1", "Node", node, {"metadata": {"labels": {"moved": "yes"}}})
    return stale


def test_a_node_changed_once_meanwhile_is_read_again_and_written(
    testbed: Any, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = testbed.client
    stale = _read_then_overtaken(client, node)
    real_get = client.get
    reads = iter([stale])
    monkeypatch.setattr(client, "get", lambda *a, **k: next(reads, None) or real_get(*a, **k))
    assert verify_nodes.apply(client, [Change(node, taint=True)]) == 1
    monkeypatch.undo()
    assert client.get("v1", "Node", node)["metadata"]["labels"]["moved"] == "yes"  # theirs stays
    assert {"key": names.UNVERIFIED_TAINT, "effect": "NoSchedule"} in _taints(client, node)


def test_a_node_that_keeps_changing_is_left_for_the_next_pass(
    testbed: Any, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = testbed.client
    stale = _read_then_overtaken(client, node)
    monkeypatch.setattr(client, "get", lambda *_a, **_k: stale)  # every read is the stale one
    assert verify_nodes.apply(client, [Change(node, taint=True)]) == 0
    monkeypatch.undo()
    assert _taints(client, node) == [THEIRS]  # the real apiserver refused the stale write
