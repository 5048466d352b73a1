"""The controller's gate tests on the testbed: a canary smoke test as Jobs that KWOK runs, then
metric analysis against a real Prometheus scraping the simulated DCGM exporters. A node whose
GPU health checker tainted fails the next commit's smoke test at its timeout with the scheduler's
reason; a node whose GPU fails the test itself (fault smoke-fail: the pod exits 1) fails the one
after; an application Xid (which the verification ladder ignores) fails the next on the metric."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_fixtures import need
from ruamel.yaml import YAML

from gitops_gpu.controller import Controller
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.phases import read_mark
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.sync import smoke
from gitops_gpu_dev.testbed import controlplane, nodes, smoke_fault
from gitops_gpu_dev.testbed import prometheus as prom
from gitops_gpu_dev.testbed.dcgm import DcgmExporters, kube_nodes
from gitops_gpu_dev.testbed.operator_sim import FAULT_ANN
from gitops_gpu_dev.testbed.reports import SnapshotReports
from gitops_gpu_dev.testbed.session import Testbed
from gitops_gpu_dev.testbed.simulator import Simulator

IMAGE = "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04"
UNHEALTHY = {"key": "gpu-health.example/unhealthy", "value": "true", "effect": "NoSchedule"}
XID = 'max(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"})'


def fault(client: Any, node: str, value: str | None) -> None:
    """What `gitops-gpu testbed fault NODE VALUE` does."""
    client.patch("v1", "Node", node, {"metadata": {"annotations": {FAULT_ANN: value}}})
    smoke_fault.apply_fault(client, node, value)


def gates(canary_soak: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        yaml = YAML()
        doc = yaml.load((work / "fleet.yaml").read_text())
        for stage in doc["spec"]["stages"]:
            stage["gate"] = {"soak": "1s", "timeout": "90s"}
            if stage["name"] == "canary":
                stage["gate"].update(
                    soak=canary_soak,
                    smokeTest={"image": IMAGE, "command": ["nvidia-smi"], "timeout": "8s"},
                    metrics=[{"name": "xid", "query": XID, "max": 0}],
                )
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(doc, fh)

    return edit


@pytest.fixture
def simulator(clean_cluster: Testbed) -> Iterator[Simulator]:
    sim = Simulator(
        clean_cluster.client, tick=0.1, report_fn=SnapshotReports(), report_heartbeat=5.0
    )
    yield sim
    sim.stop()


@pytest.fixture
def prometheus_url(testbed: Testbed, tmp_path: Path) -> Iterator[str]:
    need("prometheus")
    exporters = DcgmExporters(kube_nodes(testbed.client)).start()
    state = controlplane.State(dir=str(tmp_path / "prom"))
    try:
        yield prom.start_server(state, exporters.url, scrape_interval=1.0)
    finally:
        prom.stop(state)
        exporters.stop()


def test_smoke_test_then_metric_failure(
    testbed: Testbed,
    simulator: Simulator,
    prometheus_url: str,
    fleet_remote: Any,
    tmp_path: Path,
) -> None:
    admin = testbed.client
    first = fleet_remote.commit("canary smoke test and xid metric", gates("2s"))
    heads = [first]
    created = nodes.create_pool_nodes(admin, nodes.read_pool_shapes(fleet_remote.work), 1)
    nodes.wait_ready(admin, created)
    simulator.start()
    cfg = Config(
        repo=fleet_remote.url,
        cache_dir=tmp_path / "ctl",
        interval=0.3,
        namespace="default",
        prometheus_url=prometheus_url,
    )
    ctl = Controller(cfg, admin)
    record = GitNotesBackend(str(fleet_remote.bare), remote=None)
    canary = stage_context("canary")

    def run_until(what: str, done: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            report = ctl.run_pass()
            assert report.result == "ok", report.error
            if time.monotonic() > deadline:
                seen = [(s.context, s.description) for s in record.list_statuses(heads[-1])]
                jobs = admin.list("batch/v1", "Job", namespace="default")["items"]
                pytest.fail(f"timed out waiting for {what}: {seen}; jobs {jobs}; {report.actions}")
            time.sleep(0.2)

    def state(sha: str) -> str | None:
        st = record.latest(sha, canary)
        return st.state if st else None

    ctl.start_informers()
    try:
        run_until("canary to pass", lambda: state(first) == "success")
        history = [s for s in record.list_statuses(first) if s.context == canary]
        phases = [m.phase.value for m in map(read_mark, history) if m is not None]
        assert phases[-2:] == ["smoke testing", "soaking"], phases
        assert "smoke test passed" in history[-1].description
        ran = [r for r in admin.requests if r.startswith("POST /apis/batch/v1/namespaces/default")]
        assert ran, "no smoke Job was created"
        jobs = admin.list("batch/v1", "Job", namespace="default", label_selector=smoke.SMOKE_LABEL)
        assert jobs["items"] == []  # cleaned up once the record said so

        # A GPU health checker taints the canary node: the ladder sees nothing, the smoke pod
        # cannot be scheduled and times out with the scheduler's reason.
        (node,) = [n for n in created if n.startswith("canary")]
        admin.patch("v1", "Node", node, {"spec": {"taints": [UNHEALTHY]}})
        second = fleet_remote.commit("a longer canary soak", gates("20s"))
        heads.append(second)
        run_until("canary to fail its smoke test", lambda: state(second) == "failure", 90)
        failed = record.latest(second, canary)
        assert failed is not None
        head = f"canary: smoke test failed on 1/1 nodes: {node}: timed out after 8s, pod "
        assert failed.description.startswith(head), failed.description
        assert "pod Unschedulable: 0/4 nodes are availab" in failed.description
        # The status is cut at 140 characters; the node's Event has the scheduler's whole say.
        events = admin.list("v1", "Event", namespace="default")["items"]
        (event,) = [
            e
            for e in events
            if e["reason"] == "SmokeTestFailed" and e["involvedObject"]["name"] == node
        ]
        assert "1 node(s) had untolerat" in event["message"]
        assert event["type"] == "Warning"
        admin.patch("v1", "Node", node, {"spec": {"taints": []}})

        # The GPU fails the test itself: the pod runs on the schedulable node and exits 1.
        fault(admin, node, "smoke-fail")
        crashed = fleet_remote.commit("a still longer canary soak", gates("25s"))
        heads.append(crashed)
        run_until("canary to fail on the pod's exit", lambda: state(crashed) == "failure", 90)
        failed = record.latest(crashed, canary)
        assert failed is not None
        head = f"canary: smoke test failed on 1/1 nodes: {node}: Error (exit code 1): GPU health"
        assert failed.description.startswith(head), failed.description
        fault(admin, node, None)

        # An application Xid on the canary node: the ladder ignores it, the metric does not.
        fault(admin, node, "xid13")
        third = fleet_remote.commit("a shorter canary soak", gates("15s"))
        heads.append(third)
        run_until("canary to fail on the metric", lambda: state(third) == "failure")
        latest = record.latest(third, canary)
        assert latest is not None
        # The example fleet's canary rolls back to its last good commit.
        want = f"canary: metric xid: 13 > max 0; rolling back to {first[:7]}"
        assert latest.description == want, latest.description
        later = stage_context("inference")
        assert not [s for s in record.list_statuses(third) if s.context == later]
    finally:
        ctl.stop_informers()
