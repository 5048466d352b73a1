"""NVML drift for `plan`: driver version, MIG mode, GPU count, missing, stale and untrusted
reports."""

from __future__ import annotations

from components_builders import edit, healthy, pool, status_for, with_seen, with_status

from gitops_gpu.components import drift

POOL = pool()


def fields(ev: object, target: object = POOL) -> list[tuple[str, str, str]]:
    return [(d.field, d.desired, d.actual) for d in drift.node_drift(target, ev)]  # type: ignore[arg-type]


def test_in_sync_node_has_no_drift() -> None:
    assert drift.pool_drift(POOL, [healthy("a"), healthy("b")]) == []


def test_driver_drift() -> None:
    ev = with_status(healthy(), status_for("gpu-1", driver_version="570.86.10"))
    assert fields(ev) == [("driverVersion", "580.126.20", "570.86.10")]
    [d] = drift.node_drift(POOL, ev)
    assert str(d) == "train/gpu-1: driverVersion: desired 580.126.20, NVML 570.86.10"
    assert d.as_dict()["node"] == "gpu-1"


def test_mig_drift_against_pool_profile() -> None:
    assert fields(healthy(), pool(mig_config="all-1g.10gb")) == [
        ("migMode", "enabled (all-1g.10gb)", "disabled on 8/8 GPUs")
    ]


def test_mig_drift_falls_back_to_node_label() -> None:
    ev = edit(healthy(), labels={"nvidia.com/mig.config": "all-balanced"})
    assert fields(ev, pool(mig_config=None)) == [
        ("migMode", "enabled (all-balanced)", "disabled on 8/8 GPUs")
    ]


def test_no_mig_support_is_not_drift_when_mig_is_off() -> None:
    assert fields(healthy(snapshot="l40s")) == []


def test_gpu_count_drift_with_a_lost_gpu() -> None:
    ev = with_status(healthy(), status_for("gpu-1", lost_gpus=[3]))
    assert fields(ev) == [("gpuCount", "8", "7 (1 lost or failing)")]


def test_missing_stale_and_unreadable_reports() -> None:
    assert fields(with_status(healthy(), None)) == [("report", "a NodeGPUReport", "missing")]
    stale = with_status(healthy(), status_for("gpu-1", age=1000))
    assert fields(stale) == [("report", "at most 300s old", "1000s old")]
    down = with_status(healthy(), status_for("gpu-1", nvml_error="DriverNotLoaded"))
    assert fields(down) == [("nvml", "NVML readable", "unavailable")]


def test_reports_dated_ahead_or_long_unchanged_are_drift() -> None:
    ahead = with_status(healthy(), status_for("gpu-1", age=-3600))
    assert fields(ahead) == [("report", "at most 30s ahead", "3600s ahead (untrusted)")]
    stopped = with_seen(with_status(healthy(), status_for("gpu-1", age=10)), 400)
    assert fields(stopped) == [("report", "at most 300s old", "400s old")]


def test_fleet_drift_uses_evidence_by_pool() -> None:
    other = pool(name="infer", driver_version="570.86.10")
    found = drift.fleet_drift([POOL, other], {"train": [healthy("a")], "infer": [healthy("b")]})
    assert [(d.pool, d.node, d.field) for d in found] == [("infer", "b", "driverVersion")]
