"""The agent publishing NodeGPUReports into the real apiserver (testbed), and the evidence
reader + ladder reading them back. KWOK fake nodes stand in for GPU nodes; the snapshot-driven
fake NVML stands in for their GPUs."""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gitops_gpu import kube, names
from gitops_gpu.agent import fake_nvml, nvml, publish, report, run_agent
from gitops_gpu.cli import agent as agent_cli
from gitops_gpu.components import drift, evidence, ladder
from gitops_gpu.components.health import Health
from gitops_gpu.fleet.compiled import PoolTarget

pytestmark = pytest.mark.integration

API = names.NODE_GPU_REPORT_API
DRIVER = "580.126.20"


def _wait(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture
def node(testbed: Any) -> Iterator[str]:
    client: kube.Client = testbed.client
    name = f"agent-{uuid.uuid4().hex[:8]}"
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"gitops-gpu.io/test-pool": name},
            },
        }
    )
    yield name
    client.delete("v1", "Node", name)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    agent_cli.register(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


def test_agent_once_publishes_report_owned_by_node(testbed: Any, node: str) -> None:
    rc = _cli(
        [
            "agent",
            "--node",
            node,
            "--once",
            "--kubeconfig",
            testbed.kubeconfig,
            "--nvml-snapshot",
            "h100-80gb",
        ]
    )
    assert rc == 0
    obj = testbed.client.get(*API, node)
    assert obj is not None
    status = obj["status"]
    assert status["nodeName"] == node
    assert status["driverVersion"] == DRIVER
    assert status["gpuCount"] == 8
    assert status["migMode"] == "disabled"
    assert status["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert status["conditions"][0]["status"] == "True"
    assert obj["spec"] == {"nodeName": node}
    uid = testbed.client.get("v1", "Node", node)["metadata"]["uid"]
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
    ]
    managers = {(m["manager"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]}
    assert ("gitops-gpu-agent", "status") in managers


def test_schema_accepts_unsupported_fields_lost_gpus_and_xid_storms(
    testbed: Any, node: str
) -> None:
    storm = [(i % 4, 48) for i in range(300)]
    fake = fake_nvml.from_snapshot_file("l40s", seed=node, lost_gpus=[3], xid_events=storm)
    assert run_agent(node, 1, True, fake, testbed.client) == 0
    status = testbed.client.get(*API, node)["status"]
    gpus = status["gpus"]
    assert gpus[0]["migMode"] == {"current": "not supported", "pending": "not supported"}
    assert gpus[0]["pageRetirement"]["mechanism"] == "retired-pages"
    assert gpus[3]["state"] == "lost"
    assert len(status["xidEvents"]) == report.MAX_XID_HISTORY
    # One read drains at most MAX_EVENTS_PER_READ events; the rest (and Xid 79) come next read.
    assert status["xidEventsTotal"] == nvml.MAX_EVENTS_PER_READ
    assert status["migMode"] == "not supported"


def test_nvml_failure_is_published_as_a_condition(testbed: Any, node: str) -> None:
    fake = fake_nvml.from_snapshot_file("h100-80gb", nvml_error="LibraryNotFound")
    assert run_agent(node, 1, True, fake, testbed.client) == 1
    [cond] = testbed.client.get(*API, node)["status"]["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "LibraryNotFound")


def test_unchanged_content_does_not_churn_resource_version(testbed: Any, node: str) -> None:
    fake = fake_nvml.from_snapshot_file("a100-40gb", seed=node)
    pub = publish.KubePublisher(testbed.client, node, heartbeat_seconds=3600)
    assert pub.publish(report.read_status(fake, node)) is True
    rv = testbed.client.get(*API, node)["metadata"]["resourceVersion"]
    assert pub.publish(report.read_status(fake, node)) is False
    assert testbed.client.get(*API, node)["metadata"]["resourceVersion"] == rv
    fake.inject_xid(2, 79)
    assert pub.publish(report.read_status(fake, node)) is True
    after = testbed.client.get(*API, node)
    assert after["metadata"]["resourceVersion"] != rv
    assert after["status"]["xidEvents"][0]["xid"] == 79


def test_report_is_recreated_after_deletion(testbed: Any, node: str) -> None:
    fake = fake_nvml.from_snapshot_file("b200", seed=node)
    pub = publish.KubePublisher(testbed.client, node, heartbeat_seconds=0)
    assert pub.publish(report.read_status(fake, node))
    assert testbed.client.delete(*API, node)
    _wait("report deleted", lambda: testbed.client.get(*API, node) is None)
    assert pub.publish(report.read_status(fake, node))
    assert testbed.client.get(*API, node)["status"]["gpuCount"] == 8


def test_report_is_garbage_collected_with_its_node(testbed: Any) -> None:
    client: kube.Client = testbed.client
    name = f"agent-gc-{uuid.uuid4().hex[:6]}"
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        }
    )
    fake = fake_nvml.from_snapshot_file("h100-80gb", seed=name)
    assert run_agent(name, 1, True, fake, client) == 0
    assert client.get(*API, name) is not None
    client.delete("v1", "Node", name)
    _wait(
        "the NodeGPUReport to be garbage-collected",
        lambda: client.get(*API, name) is None,
        timeout=120,  # the GC notices a new CRD at its next discovery resync (~30s)
    )


def test_evidence_reader_and_ladder_on_the_cluster(testbed: Any, node: str) -> None:
    client: kube.Client = testbed.client
    labels = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/cuda.driver-version.full": DRIVER,
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
    }
    client.patch(
        "v1",
        "Node",
        node,
        {"metadata": {"labels": labels, "annotations": {"gitops-gpu.io/validator": "passed"}}},
    )
    client.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
        },
        field_manager="gitops-gpu-test",
        subresource="status",
        force=True,
    )
    pool = PoolTarget(
        name="it-pool",
        cluster="testbed",
        stage="canary",
        node_selector={"gitops-gpu.io/test-pool": node},
        max_unavailable=1,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        mig_config="all-disabled",
        device_plugin_config=None,
        node_labels={},
        driver={"metadata": {"name": "it-pool"}},
        driver_version=DRIVER,
    )
    fake = fake_nvml.from_snapshot_file("h100-80gb", seed=node)
    assert run_agent(node, 1, True, fake, client) == 0

    def verdict() -> Any:
        [ev] = evidence.read_pool_evidence(client, pool)
        result = ladder.walk(ev, pool)
        return result if result.health is Health.HEALTHY else None

    healthy = _wait("kwok to mark the node Ready and the ladder to pass", verdict, timeout=60)
    assert healthy.reason.startswith("all rungs healthy")
    found = evidence.read_evidence(client, [pool])
    assert drift.fleet_drift([pool], found) == []

    # A driver bump in Git: the pool now wants a newer driver than NVML reports.
    bumped = PoolTarget(**{**pool.__dict__, "driver_version": "595.91.07"})
    [ev] = evidence.read_pool_evidence(client, bumped)
    assert ladder.walk(ev, bumped).reason == (
        f"driver: NVML reports {DRIVER}, desired 595.91.07, upgrade-state upgrade-done"
    )
    assert [d.field for d in drift.pool_drift(bumped, [ev])] == ["driverVersion"]
