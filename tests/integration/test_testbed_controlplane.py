"""The testbed is a real control plane: CRD validation, server-side apply, kwok nodes, watches."""

from __future__ import annotations

import copy
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu import kube
from gitops_gpu.errors import KubeError
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def _drop_nulls(value: Any) -> Any:
    # The sample has `validator.plugin:` (null); server-side apply rejects null for an object,
    # and in the fleet format null means "delete the key", so it is dropped as compile does.
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def _sample_policy(upstream: Path) -> dict[str, Any]:
    doc: dict[str, Any] = YAML(typ="safe").load(
        (upstream / "gpu-operator" / "samples" / "v1_clusterpolicy.yaml").read_text()
    )
    return dict(_drop_nulls(doc))


def test_server_side_apply_of_upstream_clusterpolicy_sample(
    testbed: Testbed, upstream: Path
) -> None:
    policy = _sample_policy(upstream)
    policy["metadata"] = {"name": f"sample-{uuid.uuid4().hex[:6]}"}
    out = testbed.client.apply(policy, field_manager="test")
    try:
        assert out["metadata"]["uid"]
        managers = {m["manager"] for m in out["metadata"]["managedFields"]}
        assert "test" in managers
        # The CRD schema defaulted fields the sample did not set: the apiserver really validated it.
        live = testbed.client.get("nvidia.com/v1", "ClusterPolicy", policy["metadata"]["name"])
        assert live is not None
        assert live["spec"]["driver"]["enabled"] is True
    finally:
        testbed.client.delete("nvidia.com/v1", "ClusterPolicy", policy["metadata"]["name"])


def test_crd_validation_rejects_bad_enum(testbed: Testbed, upstream: Path) -> None:
    policy = copy.deepcopy(_sample_policy(upstream))
    policy["metadata"] = {"name": "bad-enum"}
    policy["spec"]["driver"]["kernelModuleType"] = "bogus"
    with pytest.raises(KubeError) as err:
        testbed.client.apply(policy, field_manager="test")
    assert "kernelModuleType" in str(err.value)
    assert "bogus" in str(err.value)
    assert testbed.client.get("nvidia.com/v1", "ClusterPolicy", "bad-enum") is None


def test_fake_nodes_become_ready_with_gpu_capacity(testbed: Testbed) -> None:
    shape = nodes.PoolShape("tbready", {"pool": "tbready"}, "NVIDIA-L40S")
    names = nodes.create_pool_nodes(testbed.client, [shape], 2)
    try:
        nodes.wait_ready(testbed.client, names, timeout=30)
        node = testbed.client.get("v1", "Node", names[0])
        assert node is not None
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L40S"
        assert node["metadata"]["labels"]["pool"] == "tbready"
    finally:
        for name in names:
            testbed.client.delete("v1", "Node", name)


def test_a_coalescing_watch_delivers_a_burst_whole_and_in_order_and_ends_with_the_server(
    testbed: Testbed,
) -> None:
    """kube.watch de-chunks the stream itself and, with ``coalesce``, reads a burst of events
    at once: none lost, none reordered; the server's timeout ends the iteration cleanly."""
    ns = "default"
    rv = testbed.client.list("v1", "ConfigMap", namespace=ns)["metadata"]["resourceVersion"]
    tag = uuid.uuid4().hex[:6]
    for i in range(40):  # ~40 events, written before the watch reads, arrive as one burst
        meta = {"name": f"burst-{tag}-{i}", "namespace": ns}
        testbed.client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    watcher = kube.Client.from_kubeconfig(testbed.kubeconfig)
    seen: list[str] = []
    started = time.monotonic()
    try:
        for event in watcher.watch(
            "v1", "ConfigMap", namespace=ns, resource_version=rv, timeout_seconds=3, coalesce=0.2
        ):
            name = event["object"]["metadata"]["name"]
            if name.startswith(f"burst-{tag}-"):
                seen.append(name)
    finally:
        watcher.close()
        for i in range(40):
            testbed.client.delete("v1", "ConfigMap", f"burst-{tag}-{i}", namespace=ns)
    assert seen == [f"burst-{tag}-{i}" for i in range(40)]
    assert time.monotonic() - started < 10  # ended by the server's 3 s timeout


def test_a_client_keeps_working_after_watches_end_early_or_by_the_server(
    testbed: Testbed,
) -> None:
    """A watch left mid-stream, and one the server ended, must not hand a garbled connection
    to the next request on the same client (it hung a LIST before watches closed theirs)."""
    client = kube.Client.from_kubeconfig(testbed.kubeconfig)
    try:
        for _ in range(3):
            started = time.monotonic()
            rv = client.list("v1", "Namespace")["metadata"]["resourceVersion"]
            events = client.watch("v1", "Namespace", resource_version="0", timeout_seconds=30)
            next(events)  # a live stream, left after one event
            events.close()
            ended = list(client.watch("v1", "Namespace", resource_version=rv, timeout_seconds=1))
            assert ended == []  # nothing changed; the server ended it after 1 s
            assert client.list("v1", "Namespace", limit=1)["items"]
            assert time.monotonic() - started < 10  # a garbled connection waits out a timeout
    finally:
        client.close()


def test_watch_delivers_label_change(testbed: Testbed) -> None:
    name = f"watch-{uuid.uuid4().hex[:6]}"
    testbed.client.create(nodes.node_manifest(name, {"pool": "w"}, "NVIDIA-B200"))
    try:
        listed = testbed.client.list("v1", "Node")
        rv = listed["metadata"]["resourceVersion"]
        seen: list[dict[str, Any]] = []
        watcher = kube.Client.from_kubeconfig(testbed.kubeconfig)

        def consume() -> None:
            for event in watcher.watch("v1", "Node", resource_version=rv, timeout_seconds=10):
                obj = event["object"]
                if obj["metadata"]["name"] == name and obj["metadata"]["labels"].get("x") == "y":
                    seen.append(event)
                    return

        thread = threading.Thread(target=consume)
        thread.start()
        testbed.client.patch("v1", "Node", name, {"metadata": {"labels": {"x": "y"}}})
        thread.join(timeout=15)
        watcher.close()
        assert seen, "watch did not deliver the label change"
        assert seen[0]["type"] == "MODIFIED"
    finally:
        testbed.client.delete("v1", "Node", name)
