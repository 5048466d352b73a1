"""E2E harness: testbed + GPU Operator (real or simulated) + simulated hosts + controller(s) on
a real fleet repo (bare remote on disk).

``GITOPS_GPU_E2E_OPERATOR`` picks the operator for the suite: ``real`` (default, the GPU
Operator v26.7.0 as a process of the testbed, the simulator playing only the hosts) or ``sim``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.controller import Controller
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.leader import LeaseLock
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev.testbed import nodes, operator, operator_build, simulator
from gitops_gpu_dev.testbed.reports import SnapshotReports
from gitops_gpu_dev.testbed.session import Testbed

# The timeout only bounds a stall: on a loaded 2-core machine the real operator has taken over
# a minute to restart one toolkit pod, which a 60s gate read as a failed stage.
FAST_GATE = {"soak": "1s", "timeout": "180s"}
OPERATOR = os.environ.get("GITOPS_GPU_E2E_OPERATOR", "real")


def fast_gates(approval: bool = False) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        yaml = YAML()
        doc = yaml.load((work / "fleet.yaml").read_text())
        for stage in doc["spec"]["stages"]:
            gate = stage.setdefault("gate", {})
            gate.update(FAST_GATE)
            if not approval:
                gate.pop("approval", None)
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(doc, fh)

    return edit


def set_driver(version: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        yaml = YAML()
        path = work / "base" / "clusterpolicy.yaml"
        doc = yaml.load(path.read_text())
        doc["spec"]["driver"]["version"] = version
        with path.open("w") as fh:
            yaml.dump(doc, fh)

    return edit


def use_operator(tb: Testbed, mode: str) -> None:
    """Make the testbed run the real operator (mode real) or none (mode sim), with no operands
    or GPU Operator CRs left from an earlier test. A real operator that cannot be built or
    started fails the test with the reason; it never skips."""
    if mode == "real" and not operator.running(tb.state):
        try:
            build = operator_build.ensure_operator(lambda _m: None)
            operator.start(tb.state, tb.client, build, die_with_parent=True)
        except GitopsGpuError as exc:
            pytest.fail(
                "the real GPU Operator could not be built or started (`gitops-gpu testbed "
                f"build`; GITOPS_GPU_E2E_OPERATOR=sim runs the suite on the simulator):\n{exc}",
                pytrace=False,
            )
    elif mode == "sim" and operator.running(tb.state):
        operator.stop(tb.state)
    operator.clean(tb.client)


class RunningController:
    def __init__(self, ctl: Controller, lease: LeaseLock | None) -> None:
        self.ctl, self.lease = ctl, lease
        self.stop = threading.Event()
        self.passes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.ctl.run(self.stop, lease=self.lease, on_pass=self._count)

    def _count(self, report: Any) -> None:
        if report.result != "standby":
            self.passes += 1

    def kill(self) -> None:
        self.stop.set()
        self.ctl.trigger()
        self.thread.join(timeout=30)


class Env:
    def __init__(self, tb: Testbed, remote: Any, tmp: Path, operator: str = OPERATOR) -> None:
        self.tb, self.remote, self.tmp = tb, remote, tmp
        self.operator = operator
        use_operator(tb, operator)
        # A new fleet remote: an earlier Env's ledger would read it as rewritten history.
        for item in tb.client.list("v1", "ConfigMap")["items"]:
            meta = item["metadata"]
            if meta["name"].startswith("gitops-gpu-ledger"):
                tb.client.delete("v1", "ConfigMap", meta["name"], meta["namespace"])
        self.record = GitNotesBackend(str(remote.bare), remote=None)
        self.running: list[RunningController] = []
        self.sim = simulator.Simulator(
            tb.client,
            tick=0.1,
            report_fn=SnapshotReports(),
            report_heartbeat=5.0,
            plays_operator=self.operator == "sim",
            nudge_every=0.5,
        )

    def start_nodes(self, per_pool: int = 1) -> list[str]:
        created = nodes.create_pool_nodes(
            self.tb.client, nodes.read_pool_shapes(self.remote.work), per_pool
        )
        nodes.wait_ready(self.tb.client, created)
        self.sim.start()
        return created

    def controller(
        self,
        name: str = "a",
        *,
        leader_election: bool = False,
        publish: Callable[[Any], None] | None = None,
    ) -> RunningController:
        cfg = Config(repo=self.remote.url, cache_dir=self.tmp / f"ctl-{name}", interval=0.3)
        ctl = Controller(cfg, self.tb.client)
        ctl.publish = publish  # the web view's (controller --ui)
        lease = (
            LeaseLock(self.tb.client, identity=f"replica-{name}", duration=3)
            if leader_election
            else None
        )
        rc = RunningController(ctl, lease)
        self.running.append(rc)
        return rc

    def state(self, sha: str, stage: str) -> str | None:
        return self.context_state(sha, stage_context(stage))

    def context_state(self, sha: str, context: str) -> str | None:
        st = self.record.latest(sha, context)
        return st.state if st else None

    def description(self, sha: str, stage: str) -> str:
        st = self.record.latest(sha, stage_context(stage))
        return st.description if st else ""

    def statuses(self, sha: str) -> list[Any]:
        return self.record.list_statuses(sha)

    def pool_commit(self, pool: str) -> str | None:
        drv = self.tb.client.get(*names.NVIDIA_DRIVER_API, pool)
        return None if drv is None else drv["metadata"]["annotations"].get(names.COMMIT_ANNOTATION)

    def wait(self, what: str, pred: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for: {what}")

    def close(self) -> None:
        for rc in self.running:
            rc.kill()
        self.sim.stop()
        operator.clean(self.tb.client)
