"""What ships for operators of the controller: the alert rules and the Grafana dashboard.

promtool checks the rules and a real /metrics scrape of the controller's server; the testbed's
Prometheus scrapes that server, loads the rules, and evaluates every alert and dashboard
expression without error (and with data where the controller exports it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_fixtures import PromBed, need
from ruamel.yaml import YAML

from gitops_gpu.metrics import Metrics
from gitops_gpu.server import ControllerServer, Probes
from gitops_gpu_dev import deploy_render
from gitops_gpu_dev.testbed import helm
from gitops_gpu_dev.testbed import prometheus as prom

FILES = deploy_render.CHART / "files"
ALERTS = FILES / "alerts.yaml"
DASHBOARD = FILES / "dashboard.json"


def alert_rules() -> list[dict[str, Any]]:
    doc = YAML(typ="safe").load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


@pytest.fixture(scope="module")
def controller_metrics() -> Iterator[ControllerServer]:
    """The controller's HTTP server with metrics as a pass leaves them."""
    m = Metrics()
    requests = Counter({"GET /api/v1/nodes": 3, "PATCH /apis/nvidia.com/v1/clusterpolicies/p": 1})
    m.watch_api_requests(requests)
    m.leader.set(1)
    m.passes.labels("ok").inc(5)
    m.pass_duration.labels("ok").observe(0.2)
    m.set_stage_commit("canary", "a" * 40)
    m.set_gate("canary", "pending")
    m.pool_nodes.labels("canary", "healthy").set(2)
    m.status_writes.labels("gitops-gpu/stage/canary", "pending").inc()
    m.last_fetch.set(time.time())
    # One node held past the bound (GitopsGpuNodeHeldByWorkload), one not yet.
    m.node_wait_alert.set(600)
    m.set_node_waits(
        {("train", "gpu-7", "drain-required"): 3600, ("train", "gpu-8", "drain-required"): 60}
    )
    server = ControllerServer("127.0.0.1:0", m, Probes(), lambda: None).start()
    yield server
    server.stop()


def test_promtool_checks_the_alert_rules() -> None:
    promtool = need("promtool")
    out = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 7 rules found" in out.stdout
    names = {r["alert"] for r in alert_rules()}
    assert names == {
        "GitopsGpuStageFailed",
        "GitopsGpuStageStuck",
        "GitopsGpuNoLeader",
        "GitopsGpuPassesFailing",
        "GitopsGpuWebhookRejected",
        "GitopsGpuFleetRepoStale",
        "GitopsGpuNodeHeldByWorkload",
    }


def test_promtool_checks_a_real_metrics_scrape(controller_metrics: ControllerServer) -> None:
    promtool = need("promtool")
    url = f"http://127.0.0.1:{controller_metrics.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read()
    assert b"gitops_gpu_api_requests_total" in text
    out = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, check=False
    )
    assert out.returncode == 0, (out.stdout + out.stderr).decode()


def test_chart_ships_rules_and_dashboard_verbatim() -> None:
    binary = shutil.which("helm") or str(helm.ensure_helm())
    text = deploy_render.helm_template(
        Path(binary),
        "--set=fleet.repo=https://git.example.com/fleet.git",
        "--set=metrics.prometheusRule.enabled=true",
        "--set=metrics.grafanaDashboard.enabled=true",
    )
    docs = [d for d in YAML(typ="safe").load_all(text) if d]
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == YAML(typ="safe").load(ALERTS.read_text())
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "gitops-gpu.json" in d["data"]]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["gitops-gpu.json"]) == json.loads(DASHBOARD.read_text())
    plain = [
        d["kind"]
        for d in YAML(typ="safe").load_all(
            deploy_render.helm_template(
                Path(binary), "--set=fleet.repo=https://git.example.com/fleet.git"
            )
        )
        if d
    ]
    assert "PrometheusRule" not in plain  # off by default (needs the Prometheus Operator)


def test_every_expression_evaluates_on_the_testbed_prometheus(
    prombed: PromBed, controller_metrics: ControllerServer
) -> None:
    prom.add_controller(Path(prombed.state.dir), f"127.0.0.1:{controller_metrics.port}")
    prombed.wait_for('gitops_gpu_leader{job="gitops-gpu-controller"}')
    shutil.copyfile(ALERTS, Path(prombed.state.dir) / "prometheus" / "rules" / "alerts.yaml")
    prom.reload(prombed.url)
    exprs = [r["expr"] for r in alert_rules()] + dashboard_exprs()
    for expr in exprs:
        answer = prombed.query(expr)
        assert answer["status"] == "success", (expr, answer)
    # Where the controller exports the series, the panels show data.
    panels = dashboard_exprs()
    for expr in (panels[0], panels[1], panels[2], panels[8]):  # commits, gates, pools, leaders
        assert prombed.query(expr)["data"]["result"], expr
    # The rules are loaded and evaluate cleanly.
    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(f"{prombed.url}/api/v1/rules", timeout=5) as resp:
            groups = json.loads(resp.read())["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if len(rules) == 7 and all(r.get("health") == "ok" for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    # The shipped rule fires for the node held longer than the controller's bound, only it.
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"{prombed.url}/api/v1/alerts", timeout=5) as resp:
            alerts = json.loads(resp.read())["data"]["alerts"]
        held = [a for a in alerts if a["labels"]["alertname"] == "GitopsGpuNodeHeldByWorkload"]
        if held and held[0]["state"] == "firing":
            break
        assert time.monotonic() < deadline, alerts
        time.sleep(0.5)
    assert [(a["labels"]["node"], a["labels"]["state"]) for a in held] == [
        ("gpu-7", "drain-required")
    ]
    assert "waited 1h" in held[0]["annotations"]["description"], held[0]
