"""The driver-upgrade hold on a real apiserver (sync/upgrade_holds.py apply): the skip label
and our annotation come and go together, every other label and annotation stays."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.sync import upgrade_holds
from gitops_gpu.sync.upgrade_holds import Change

WHY = "frozen until Mon 00:00 UTC: launch freeze"


@pytest.fixture
def node(testbed: Any) -> Iterator[str]:
    name = f"hold-{uuid.uuid4().hex[:6]}"
    testbed.client.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {names.UPGRADE_STATE_LABEL: "upgrade-required", "team": "a"},
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
        }
    )
    yield name
    testbed.client.delete("v1", "Node", name)


def test_a_hold_is_written_read_back_and_released(testbed: Any, node: str) -> None:
    client = testbed.client
    assert upgrade_holds.apply(client, [Change(node, WHY)]) == 1
    held = client.get("v1", "Node", node)["metadata"]
    assert held["labels"][names.UPGRADE_SKIP_LABEL] == "true"
    assert held["annotations"][names.UPGRADE_HOLD_ANNOTATION] == WHY
    # What the next pass reads decides nothing more while held, and a release when not.
    assert upgrade_holds.decide([client.get("v1", "Node", node)], {node: WHY}) == []
    release = upgrade_holds.decide([client.get("v1", "Node", node)], {})
    assert release == [Change(node, None)]
    assert upgrade_holds.apply(client, release) == 1
    after = client.get("v1", "Node", node)["metadata"]
    assert names.UPGRADE_SKIP_LABEL not in after["labels"]
    assert names.UPGRADE_HOLD_ANNOTATION not in after["annotations"]
    assert after["labels"]["team"] == "a"
    assert after["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_a_node_that_went_is_skipped(testbed: Any) -> None:
    assert upgrade_holds.apply(testbed.client, [Change("no-such-node", WHY)]) == 0
