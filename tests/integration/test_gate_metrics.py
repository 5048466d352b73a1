"""gate.metrics against a real Prometheus scraping simulated DCGM exporters: bounds, the worst
series, `for` windows, no data, Prometheus's own error text, and an unreachable server."""

from __future__ import annotations

import time

from prometheus_fixtures import PromBed

from gitops_gpu.analysis import Analyzer, expand
from gitops_gpu.fleet.compiled import GateSpec, MetricSpec, StageSpec
from gitops_gpu.rollout.checks import AnalysisState

CANARY = ["canary-0", "canary-1"]
XID = MetricSpec("xid", 'max(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"})', max=0)


def stage(*metrics: MetricSpec) -> StageSpec:
    return StageSpec("canary", ("canary",), GateSpec(metrics=metrics))


def test_dcgm_exporter_series_and_labels(prombed: PromBed) -> None:
    series = prombed.wait_for('DCGM_FI_DEV_GPU_UTIL{Hostname="canary-0"}')
    assert len(series) == 8  # one per GPU of an H100 node
    labels = series[0]["metric"]
    assert {"gpu", "UUID", "modelName", "Hostname", "device"} <= set(labels)
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert labels["UUID"].startswith("GPU-")
    for metric in (
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_GPU_TEMP",
    ):
        assert prombed.wait_for(f'{metric}{{Hostname="canary-1"}}')


def test_xid_fault_breaks_the_bound_naming_value_and_bound(prombed: PromBed) -> None:
    analyzer = Analyzer(prombed.url, timeout=30)
    windowed = MetricSpec("xid-10s", XID.query, max=0, for_seconds=10)
    util = MetricSpec("util", 'min(DCGM_FI_DEV_GPU_UTIL{Hostname=~"$nodes"})', min=10)
    # A windowed query is a subquery at aligned steps: it has data once a step falls after the
    # series' first sample, which may be up to one step after the series itself appears.
    deadline = time.monotonic() + 30
    while (healthy := analyzer.evaluate(stage(XID, windowed, util), CANARY)).state is (
        AnalysisState.NO_DATA
    ):
        assert time.monotonic() < deadline, healthy
        time.sleep(0.5)
    assert healthy.state is AnalysisState.OK, healthy
    # Each metric's latest value is said, for the stage's status and the gauge.
    assert healthy.detail.startswith("xid 0 (max 0); xid-10s 0 (max 0); util "), healthy.detail
    assert [name for name, _ in healthy.values] == ["xid", "xid-10s", "util"]
    prombed.fault("canary-1", "xid79")
    try:
        deadline = time.monotonic() + 30
        while (result := analyzer.evaluate(stage(XID), CANARY)).state is AnalysisState.OK:
            assert time.monotonic() < deadline, "the Xid never reached Prometheus"
            time.sleep(0.5)
        assert result.state is AnalysisState.VIOLATED
        assert result.detail == "xid: 79 > max 0"
        # Other stages' nodes are not this stage's business.
        train = StageSpec("train", ("train",), GateSpec(metrics=(XID,)))
        assert analyzer.evaluate(train, ["train-0"]).state is AnalysisState.OK
        # The min bound: the lost GPU reports 0% utilisation.
        low = analyzer.evaluate(stage(util), CANARY)
        assert (low.state, low.detail) == (AnalysisState.VIOLATED, "util: 0 < min 10")
        prombed.fault("canary-1", None)
        time.sleep(3)
        # Cleared, but within its 10s window the worst value still counts.
        held = analyzer.evaluate(stage(windowed), CANARY)
        assert (held.state, held.detail) == (AnalysisState.VIOLATED, "xid-10s: 79 > max 0")
    finally:
        prombed.fault("canary-1", None)


def test_no_data_and_query_errors(prombed: PromBed) -> None:
    analyzer = Analyzer(prombed.url, timeout=30)
    ghost = MetricSpec("ghost", 'sum(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"})', max=0)
    none = analyzer.evaluate(stage(ghost), ["no-such-node"])
    assert (none.state, none.detail) == (AnalysisState.NO_DATA, "ghost: no data")
    clash = MetricSpec(
        "clash",
        'DCGM_FI_DEV_GPU_UTIL{Hostname=~"$nodes"} + on(Hostname) DCGM_FI_DEV_GPU_TEMP',
        max=100,
    )
    error = analyzer.evaluate(stage(clash), CANARY)
    assert error.state is AnalysisState.ERROR
    assert error.detail.startswith("clash: execution: ") and "many-to-many" in error.detail
    gone = Analyzer("http://127.0.0.1:1").evaluate(stage(XID), CANARY)
    assert gone.state is AnalysisState.NO_DATA
    assert gone.detail.startswith("xid: Prometheus unreachable")
    unset = Analyzer(None).evaluate(stage(XID), CANARY)
    assert (unset.state, unset.detail) == (AnalysisState.NO_DATA, "xid: no --prometheus-url")


def test_placeholders_expand_to_escaped_alternations() -> None:
    q = expand('x{Hostname=~"$nodes",pool=~"$pools"}', ["b.example", "a"], ["p"])
    assert q == 'x{Hostname=~"a|b\\\\.example",pool=~"p"}'


def test_compare_to_baseline(prombed: PromBed) -> None:
    analyzer = Analyzer(prombed.url, timeout=30)
    xid = MetricSpec("xid", XID.query, compare_to="baseline", tolerance=0.1)
    temp = MetricSpec(
        "temp", 'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$nodes"})', compare_to="baseline"
    )
    util = MetricSpec(
        "util",
        'avg(DCGM_FI_DEV_GPU_UTIL{Hostname=~"$nodes"})',
        compare_to="baseline",
        better="higher",
        tolerance=0.2,
    )
    base = (["train-0"], ["train"])
    assert analyzer.evaluate(stage(xid, temp, util), CANARY, *base).state is AnalysisState.OK
    none = analyzer.evaluate(stage(xid), CANARY)
    assert none.state is AnalysisState.NO_DATA and "no baseline" in none.detail
    prombed.fault("canary-1", "xid79")
    try:
        deadline = time.monotonic() + 30
        while (result := analyzer.evaluate(stage(xid), CANARY, *base)).state is AnalysisState.OK:
            assert time.monotonic() < deadline, "the Xid never reached Prometheus"
            time.sleep(0.5)
        assert (result.state, result.detail) == (
            AnalysisState.VIOLATED,
            "xid: 79 > baseline 0 +10%",
        )
        hot = analyzer.evaluate(stage(temp), CANARY, *base)
        assert hot.state is AnalysisState.VIOLATED and hot.detail.startswith("temp: ")
        # The lost GPU's 0% pulls the canary's average utilisation below the baseline's -20%?
        slow = analyzer.evaluate(stage(util), CANARY, *base)
        assert slow.state is AnalysisState.OK, slow  # 1 GPU of 16 at 0%: within 20%
    finally:
        prombed.fault("canary-1", None)
