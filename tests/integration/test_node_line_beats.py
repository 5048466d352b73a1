"""A Node status heartbeat written to the real apiserver reaches the node informer as a line it
answers without decoding (sync/line_beats: the header shape is the apiserver's own), and a
real change after it is decoded and cached."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gitops_gpu import kube
from gitops_gpu.sync.live import Informer


def _wait(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.05)


def _status(name: str, beat: str) -> dict[str, Any]:
    cond = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": beat,
        "lastTransitionTime": "2026-12-07T10:00:00Z",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"conditions": [cond], "allocatable": {"nvidia.com/gpu": "8"}},
    }


@pytest.fixture
def node(testbed: Any) -> Iterator[str]:
    client: kube.Client = testbed.client
    name = f"beats-{uuid.uuid4().hex[:8]}"  # no kwok annotation: only this test writes it
    client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield name
    client.delete("v1", "Node", name)


def test_a_status_heartbeat_is_not_decoded_and_a_label_after_it_is(testbed: Any, node: str) -> None:
    client: kube.Client = testbed.client
    inf = Informer(client, field_selector=f"metadata.name={node}", coalesce=0.0).start()
    beats = inf.line_beats
    assert beats is not None
    try:
        inf.wait_synced()
        client.apply(
            _status(node, "2026-12-07T10:00:00Z"), field_manager="kubelet-sim", subresource="status"
        )
        _wait(
            "the first status",
            lambda: bool((inf.get(node) or {}).get("status", {}).get("conditions")),
        )
        version, events = inf.version, inf.events
        client.apply(
            _status(node, "2026-12-07T10:05:00Z"), field_manager="kubelet-sim", subresource="status"
        )
        _wait("the heartbeat's event", lambda: inf.events > events)
        assert beats.beats == 1, "the heartbeat line was decoded: its shape is not the one matched"
        assert inf.version == version
        client.patch("v1", "Node", node, {"metadata": {"labels": {"pool": "b"}}})
        _wait(
            "the label",
            lambda: (inf.get(node) or {}).get("metadata", {}).get("labels", {}).get("pool") == "b",
        )
        assert beats.beats == 1 and inf.version > version
    finally:
        inf.stop()
