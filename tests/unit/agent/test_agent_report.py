"""The NodeGPUReport status: shape, bounded size, fingerprint, condition times, dedup."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from gitops_gpu.agent import fake_nvml, nvml, publish, report

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def test_status_from_snapshot() -> None:
    status = report.read_status(
        fake_nvml.from_snapshot_file("h100-80gb-mig", seed="n1"), "n1", now=T0
    )
    assert status["nodeName"] == "n1"
    assert status["observedAt"] == "2026-11-29T12:00:00Z"
    assert status["driverVersion"] == "580.126.20"
    assert status["gpuCount"] == 8
    assert status["migMode"] == "enabled"
    assert status["xidMonitoring"] == "supported"
    [cond] = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("NVMLReady", "True", "Read")


def test_status_when_nvml_is_missing() -> None:
    fake = fake_nvml.from_snapshot_file("h100-80gb", nvml_error="LibraryNotFound")
    status = report.read_status(fake, "n1", now=T0)
    [cond] = status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "LibraryNotFound")
    assert "libnvidia-ml.so.1" in cond["message"]
    assert status["gpus"] == []
    assert "driverVersion" not in status
    assert status["migMode"] == "unknown"


def test_mig_summary() -> None:
    on = {"state": "ok", "migMode": {"current": "enabled"}}
    off = {"state": "ok", "migMode": {"current": "disabled"}}
    lost = {"state": "lost"}
    assert report.mig_summary([on, on]) == "enabled"
    assert report.mig_summary([on, off]) == "mixed"
    assert report.mig_summary([lost]) == "unknown"


def test_xid_history_is_bounded_and_report_small_in_a_storm() -> None:
    storm = [(i % 8, 48 if i % 2 else 79) for i in range(5000)]
    fake = fake_nvml.from_snapshot_file("b200", seed="n" * 63, xid_events=storm)
    reader = nvml.NvmlReader(fake)
    history = report.XidHistory()
    status: dict[str, object] = {}
    for step in range(25):  # 25 reads drain 256 events each
        reading = reader.read()
        history.add(reading.xid_events, T0 + timedelta(seconds=step))
        status = report.status_from_reading("n" * 63, reading, history, T0, 120)
    assert status["xidEventsTotal"] == 5000
    assert len(history.events) == report.MAX_XID_HISTORY
    assert history.events[-1]["seenAt"] == "2026-11-29T12:00:19Z"
    size = len(json.dumps(report.report_object("n" * 63, status)))
    assert size < 16 * 1024, size


def test_fingerprint_ignores_read_time_and_telemetry() -> None:
    fake = fake_nvml.from_snapshot_file("h100-80gb", seed="n1")
    a = report.read_status(fake, "n1", now=T0)
    fake.gpus[0]["temperatureC"] = 80
    fake.gpus[0]["powerMilliwatts"] = 650000
    b = report.read_status(fake, "n1", now=T0 + timedelta(minutes=1))
    assert report.fingerprint(a) == report.fingerprint(b)
    fake.gpus[0]["eccUncorrectedVolatile"] = 1
    c = report.read_status(fake, "n1", now=T0)
    assert report.fingerprint(a) != report.fingerprint(c)


def test_condition_transition_time_moves_only_on_flips() -> None:
    first = report.condition(True, "Read", "ok", T0, [])
    same = report.condition(True, "Read", "ok", T0 + timedelta(hours=1), [first])
    flipped = report.condition(False, "DriverNotLoaded", "x", T0 + timedelta(hours=2), [same])
    assert same["lastTransitionTime"] == first["lastTransitionTime"] == "2026-11-29T12:00:00Z"
    assert flipped["lastTransitionTime"] == "2026-11-29T14:00:00Z"


def test_publisher_skips_identical_content_until_heartbeat() -> None:
    clock = [0.0]
    out: list[dict[str, object]] = []
    pub = publish.StreamPublisher(
        "n1", heartbeat_seconds=120, sink=out.append, clock=lambda: clock[0]
    )
    fake = fake_nvml.from_snapshot_file("h100-80gb", seed="n1")

    def status_at(seconds: float) -> dict[str, object]:
        clock[0] = seconds
        return report.read_status(fake, "n1", now=T0 + timedelta(seconds=seconds))

    assert pub.publish(status_at(0)) is True
    assert pub.publish(status_at(30)) is False  # identical content, heartbeat not due
    assert pub.publish(status_at(121)) is True  # heartbeat: proves the agent is alive
    fake.inject_xid(0, 79)
    assert pub.publish(status_at(122)) is True  # content changed: publish at once
    assert [o["status"]["observedAt"] for o in out] == [  # type: ignore[index]
        "2026-11-29T12:00:00Z",
        "2026-11-29T12:02:01Z",
        "2026-11-29T12:02:02Z",
    ]
