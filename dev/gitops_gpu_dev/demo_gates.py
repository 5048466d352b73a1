"""`gitops-gpu demo --gates`: stage gates that test the GPUs, live.

The testbed with the simulated hosts, the DCGM exporters and a real Prometheus
(``testbed up --prometheus``), and a controller with ``--prometheus-url``. The canary stage of
fleet-repo-example gets a smoke test (``nvidia-smi`` on one GPU per node) and an Xid metric:

1. the fleet rolls out: canary converges, its smoke Jobs run and pass, it soaks with the metric
   judged, and passes;
2. one canary node's GPU fails a CUDA check (fault ``smoke-fail``): the ladder sees nothing,
   but the next commit's smoke pod there exits 1 and the canary fails on it;
3. an application Xid on a canary node (fault ``xid13``, which only DCGM reports): the next
   commit's canary fails on the metric, "metric xid: 13 > max 0".

Later stages never see either failed commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitops_gpu.controller import Controller
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev import paths
from gitops_gpu_dev.demo import DemoRepo, Show, _state, _wait
from gitops_gpu_dev.testbed import operator, prometheus, session, simulator, smoke_fault
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.reports import snapshot_report

Say = Callable[[str], None]
IMAGE = "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04"
XID_QUERY = 'max(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"})'


def _gates(canary_soak: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for stage in doc["spec"]["stages"]:
            stage["gate"] = {"soak": "3s", "timeout": "2m"}
            if stage["name"] == "canary":
                stage["gate"].update(
                    soak=canary_soak,
                    smokeTest={"image": IMAGE, "command": ["nvidia-smi"], "timeout": "15s"},
                    metrics=[{"name": "xid", "query": XID_QUERY, "max": 0}],
                )

    return change


def _fault(tb: session.Testbed, node: str, fault: str | None) -> None:
    """What `gitops-gpu testbed fault NODE FAULT` does."""
    tb.client.patch("v1", "Node", node, {"metadata": {"annotations": {sim.FAULT_ANN: fault}}})
    smoke_fault.apply_fault(tb.client, node, fault)


def run(
    workdir: Path,
    *,
    keep: bool = False,
    nodes_per_pool: int = 2,
    say: Say = print,
    operator_mode: str = operator.DEFAULT_MODE,
) -> int:
    workdir = workdir.resolve()
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    say(f"== starting a local control plane in {workdir} (GPU Operator: {operator_mode})")
    tb = session.start(
        workdir / "testbed",
        fleet=paths.fleet_example(),
        nodes_per_pool=nodes_per_pool,
        progress=lambda m: say(f"   {m}"),
        operator_mode=operator_mode,
    )
    stop = threading.Event()
    thread: threading.Thread | None = None
    sim_ = simulator.Simulator(
        tb.client, tick=0.2, report_fn=snapshot_report, plays_operator=operator_mode == "sim"
    ).start()
    try:
        url = prometheus.start(tb.state, scrape_interval=1.0)
        say(f"== Prometheus {url} scrapes the simulated DCGM exporters of every node")
        repo = DemoRepo(workdir)
        repo.edit_yaml("fleet.yaml", _gates("5s"))
        first = repo.commit("canary gate: smoke test and Xid metric")
        ctl = Controller(
            Config(
                repo=str(repo.bare),
                cache_dir=workdir / "cache",
                interval=1.0,
                prometheus_url=url,
            ),
            tb.client,
        )
        thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
        thread.start()
        show = Show(ctl, tb, say)
        canary = [n["metadata"]["name"] for n in tb.client.list("v1", "Node")["items"]]
        canary = sorted(n for n in canary if n.startswith("canary-"))

        def history(sha: str) -> None:
            for st in ctl.backend.list_statuses(sha):
                if st.context == stage_context("canary"):
                    say(f"     {st.state:8} {st.description}")

        say(f"\n== rolling out {first[:7]}: canary converges, smoke-tests, soaks, passes")
        ok = _wait(show, first, lambda: _state(show, first, "canary") == "success", 180)
        history(first)

        say(f"\n== {canary[0]}'s GPU fails a CUDA check (testbed fault {canary[0]} smoke-fail)")
        _fault(tb, canary[0], smoke_fault.SMOKE_FAIL)
        repo.edit_yaml("fleet.yaml", _gates("6s"))
        smoke_bad = repo.commit("canary soak 6s")
        ctl.trigger()
        failed = _wait(show, smoke_bad, lambda: _state(show, smoke_bad, "canary") == "failure", 120)
        history(smoke_bad)
        events: list[str] = []
        deadline = time.monotonic() + 15  # recorded after the pass that wrote the verdict
        while not events and time.monotonic() < deadline:
            events = [
                e["message"]
                for e in tb.client.list("v1", "Event", namespace="default")["items"]
                if e["reason"] == "SmokeTestFailed"
            ]
            time.sleep(0.5)
        for message in events:
            say(f"   Event SmokeTestFailed on {canary[0]}: {message}")
        ok = ok and failed and bool(events)
        _fault(tb, canary[0], None)

        say(f"\n== an application Xid on {canary[-1]} (testbed fault {canary[-1]} xid13)")
        _fault(tb, canary[-1], "xid13")
        repo.edit_yaml("fleet.yaml", _gates("20s"))
        xid_bad = repo.commit("canary soak 20s")
        ctl.trigger()
        failed = _wait(show, xid_bad, lambda: _state(show, xid_bad, "canary") == "failure", 120)
        history(xid_bad)
        ok = ok and failed
        untouched = all(
            _state(show, c, s) is None
            for s in ("inference", "training")
            for c in (smoke_bad, xid_bad)
        )
        say(f"\n== later stages {'never saw' if untouched else 'SAW'} either failed commit")
        ok = ok and untouched
        say(f"\nresult: {'OK' if ok else 'FAILED'}")
        if keep:
            say(
                f"\nleft running: export KUBECONFIG={tb.kubeconfig}; Prometheus {url}; "
                f"stop with gitops-gpu testbed down --dir {workdir / 'testbed'}"
            )
        return 0 if ok else 1
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=30)
        sim_.stop()
        if not keep:
            session.stop(workdir / "testbed")
