"""The web view in a real Chromium, following a rollout on the testbed (real kube-apiserver, the
GPU Operator, simulated hosts, a real fleet repo): the canary pending then success without a
reload, a stage waiting for its window, a failing node with its reason, an approval wait.
A screenshot of each page goes to the artifacts (tests/e2e/browser.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from browser import artifacts, page
from e2e_harness import Env, fast_gates
from ruamel.yaml import YAML

from gitops_gpu.metrics import Metrics
from gitops_gpu.server import ControllerServer, Probes
from gitops_gpu.ui.app import WebView
from gitops_gpu_dev.testbed import operator_sim as sim

pytestmark = pytest.mark.e2e


def _edit_stage(work: Path, name: str, **entries: Any) -> None:
    yaml = YAML()
    doc = yaml.load((work / "fleet.yaml").read_text())
    stage = next(s for s in doc["spec"]["stages"] if s["name"] == name)
    for key, value in entries.items():
        if key == "gate":
            stage.setdefault("gate", {}).update(value)
        else:
            stage[key] = value
    with (work / "fleet.yaml").open("w") as fh:
        yaml.dump(doc, fh)


def _inference_closed(work: Path) -> None:
    """Fast gates, and a deny window on inference that holds it for two hours from now."""
    fast_gates()(work)
    start = datetime.now(UTC) - timedelta(minutes=1)
    deny = {"schedule": f"{start.minute} {start.hour} * * *", "duration": "120m"}
    _edit_stage(work, "inference", windows={"deny": [deny]})


def _card(pg: Any, stage: str) -> str:
    return str(pg.locator(f'li[aria-label="Stage {stage}"]').inner_text())


def _wait_text(pg: Any, what: str, pred: Any, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        last = str(pg.locator("main").inner_text())
        if pred(last):
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; main said:\n{last}")


def _accessible(pg: Any) -> None:
    """Landmarks, a label for every control, a caption and column headers for every table."""
    found = pg.evaluate(
        """() => ({
          landmarks: ['header','nav','main'].every(t => document.querySelector(t)),
          unlabelled: [...document.querySelectorAll('input,select')].filter(c => !c.labels.length)
            .length,
          bare: [...document.querySelectorAll('table')].filter(t => !t.caption ||
            !t.querySelector('th')).length,
          lang: document.documentElement.lang,
        })"""
    )
    assert found == {"landmarks": True, "unlabelled": 0, "bare": 0, "lang": "en"}, found


def test_the_web_view_follows_a_rollout_live_in_a_real_browser(env: Env) -> None:
    shots = artifacts("ui")
    first = env.remote.commit("fast gates, inference in a deny window", _inference_closed)
    env.start_nodes(1)
    view = WebView()
    server = ControllerServer("127.0.0.1:0", Metrics(), Probes(), lambda: None, ui=view).start()
    base = f"http://127.0.0.1:{server.port}/ui"
    try:
        with page() as pg:
            pg.goto(f"{base}/")
            pg.evaluate("window.__notReloaded = true")  # a reload would lose it
            env.controller(publish=view.publish)
            _wait_text(pg, "the canary taking the commit", lambda t: f"taking {first[:7]}" in t, 90)
            _wait_text(pg, "the canary's success", lambda t: f"runs {first[:7]} success" in t)
            assert pg.evaluate("window.__notReloaded") is True, "the page reloaded"
            assert int(pg.evaluate("document.body.dataset.pass")) > 1  # updates arrived
            _wait_text(
                pg,
                "inference held by its window",
                lambda t: "holds: waiting for window" in _card(pg, "inference"),
                60,
            )
            _accessible(pg)
            pg.screenshot(path=str(shots / "pipeline.png"), full_page=True)

            env.tb.client.patch(
                "v1",
                "Node",
                "canary-000",
                {"metadata": {"annotations": {sim.FAULT_ANN: "xid79"}}},
            )
            pg.goto(f"{base}/stage/canary")
            _wait_text(pg, "the failing node in the stage's list", lambda t: "canary-000" in t)
            listed = pg.locator("table", has_text="Nodes not healthy")
            cells = str(listed.locator("tbody tr", has_text="canary-000").first.inner_text())
            node, _pool, state, rung, reason = cells.split("\t")[:5]
            assert (node, state) in (("canary-000", "Degraded"), ("canary-000", "Unknown")), cells
            assert rung and reason.strip(), cells  # the first failing rung, and why
            _accessible(pg)
            pg.screenshot(path=str(shots / "stage.png"), full_page=True)
            pg.goto(f"{base}/node/canary-000")
            ladder = str(pg.locator("table", has_text="Ladder").inner_text())
            assert "driver" in ladder and ("Degraded" in ladder or "Unknown" in ladder), ladder
            pg.screenshot(path=str(shots / "node.png"), full_page=True)

            gated = env.remote.commit(
                "the canary now needs an approval",
                lambda w: _edit_stage(w, "canary", gate={"approval": "required"}),
            )
            pg.goto(f"{base}/")
            _wait_text(
                pg,
                "the canary awaiting approval",
                lambda t: f"taking {gated[:7]}" in t and "awaiting approval" in t,
                90,
            )
            pg.screenshot(path=str(shots / "pipeline-approval.png"), full_page=True)
            pg.goto(f"{base}/commit/{first}")
            record = str(pg.locator("table", has_text="Record").inner_text())
            assert "success" in record and "canary" in record, record
            pg.screenshot(path=str(shots / "commit.png"), full_page=True)
    finally:
        server.stop()
    assert {p.name for p in shots.iterdir()} >= {
        "pipeline.png",
        "stage.png",
        "node.png",
        "pipeline-approval.png",
        "commit.png",
    }
