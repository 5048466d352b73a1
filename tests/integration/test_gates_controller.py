"""The controller's gate tests on the testbed: a canary smoke test as Jobs that KWOK runs, then
metric analysis against a real Prometheus scraping the simulated DCGM exporters; an application
Xid (which the verification ladder ignores) fails the next commit on the metric."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_fixtures import need
from ruamel.yaml import YAML

from gitops_gpu.controller import Config, Controller
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.phases import read_mark
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.sync import smoke
from gitops_gpu.testbed import controlplane, nodes
from gitops_gpu.testbed import prometheus as prom
from gitops_gpu.testbed.dcgm import DcgmExporters, kube_nodes
from gitops_gpu.testbed.operator_sim import FAULT_ANN
from gitops_gpu.testbed.reports import SnapshotReports
from gitops_gpu.testbed.session import Testbed
from gitops_gpu.testbed.simulator import Simulator

IMAGE = "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04"
XID = 'max(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"})'


def gates(canary_soak: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        yaml = YAML()
        doc = yaml.load((work / "fleet.yaml").read_text())
        for stage in doc["spec"]["stages"]:
            stage["gate"] = {"soak": "1s", "timeout": "90s"}
            if stage["name"] == "canary":
                stage["gate"].update(
                    soak=canary_soak,
                    smokeTest={"image": IMAGE, "command": ["nvidia-smi"], "timeout": "60s"},
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
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
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

        # An application Xid on the canary node: the ladder ignores it, the metric does not.
        (node,) = [n for n in created if n.startswith("canary")]
        admin.patch("v1", "Node", node, {"metadata": {"annotations": {FAULT_ANN: "xid13"}}})
        second = fleet_remote.commit("a longer canary soak", gates("20s"))
        run_until("canary to fail on the metric", lambda: state(second) == "failure")
        latest = record.latest(second, canary)
        assert latest is not None
        # The example fleet's canary rolls back to its last good commit.
        want = f"canary: metric xid: 13 > max 0; rolling back to {first[:7]}"
        assert latest.description == want, latest.description
        later = stage_context("inference")
        assert not [s for s in record.list_statuses(second) if s.context == later]
    finally:
        ctl.stop_informers()
