"""The NVML reader against the snapshot-driven fake: fields, unsupported fields, MIG, Xids."""

from __future__ import annotations

import pytest

from gitops_gpu.agent import fake_nvml, nvml

EXPECTED = {
    # snapshot: (GPU count, name, memory MiB, compute capability, MIG current, retirement mechanism)
    "h100-80gb": (8, "NVIDIA H100 80GB HBM3", 81559, "9.0", "disabled", "remapped-rows"),
    "h100-80gb-mig": (8, "NVIDIA H100 80GB HBM3", 81559, "9.0", "enabled", "remapped-rows"),
    "a100-40gb": (8, "NVIDIA A100-SXM4-40GB", 40960, "8.0", "disabled", "remapped-rows"),
    "l40s": (4, "NVIDIA L40S", 46068, "8.9", nvml.NOT_SUPPORTED, "retired-pages"),
    "b200": (8, "NVIDIA B200", 183359, "10.0", "disabled", "remapped-rows"),
}


def read(snapshot: str, **overrides: object) -> nvml.Reading:
    reader = nvml.NvmlReader(fake_nvml.from_snapshot_file(snapshot, seed="node-a", **overrides))
    try:
        return reader.read()
    finally:
        reader.close()


def test_every_bundled_snapshot_is_covered() -> None:
    assert set(fake_nvml.snapshot_names()) == set(EXPECTED)


@pytest.mark.parametrize("snapshot", sorted(EXPECTED))
def test_reading_matches_snapshot(snapshot: str) -> None:
    count, name, mib, cc, mig, mechanism = EXPECTED[snapshot]
    reading = read(snapshot)
    assert reading.driver_version == "580.126.20"
    assert reading.cuda_driver_version == "13.0"
    assert reading.nvml_version == "13.580.126.20"
    assert len(reading.gpus) == count
    assert [g["index"] for g in reading.gpus] == list(range(count))
    assert len({g["uuid"] for g in reading.gpus}) == count
    assert len({g["pciBusId"] for g in reading.gpus}) == count
    for gpu in reading.gpus:
        assert gpu["state"] == "ok"
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["name"] == name
        assert gpu["memoryTotalMiB"] == mib
        assert gpu["computeCapability"] == cc
        assert gpu["migMode"] == {"current": mig, "pending": mig}
        assert gpu["eccUncorrected"] == {"volatile": 0, "aggregate": 0}
        assert gpu["pageRetirement"]["mechanism"] == mechanism
        assert gpu["pageRetirement"]["pending"] is False
        assert isinstance(gpu["temperatureC"], int)
        assert isinstance(gpu["powerMilliwatts"], int)
    assert reading.xid_events == []


def test_uuids_differ_per_node_and_are_stable() -> None:
    a1 = [g["uuid"] for g in read("h100-80gb").gpus]
    a2 = [g["uuid"] for g in read("h100-80gb").gpus]
    reader = nvml.NvmlReader(fake_nvml.from_snapshot_file("h100-80gb", seed="node-b"))
    b = [g["uuid"] for g in reader.read().gpus]
    assert a1 == a2
    assert not set(a1) & set(b)


def test_unsupported_fields_read_as_not_supported() -> None:
    snap = fake_nvml.load_snapshot("a100-40gb")
    snap["gpu"].update(
        temperatureC="not supported",
        powerMilliwatts="not supported",
        eccUncorrectedVolatile="not supported",
        eccUncorrectedAggregate="not supported",
        remappedRows="not supported",
        retiredPagesPending="not supported",
        migMode="not supported",
    )
    gpu = nvml.NvmlReader(fake_nvml.build_fake(snap)).read().gpus[0]
    assert gpu["state"] == "ok"
    assert gpu["temperatureC"] == nvml.NOT_SUPPORTED
    assert gpu["powerMilliwatts"] == nvml.NOT_SUPPORTED
    assert gpu["eccUncorrected"] == {
        "volatile": nvml.NOT_SUPPORTED,
        "aggregate": nvml.NOT_SUPPORTED,
    }
    assert gpu["pageRetirement"] == {"mechanism": nvml.NOT_SUPPORTED}
    assert gpu["migMode"] == {"current": nvml.NOT_SUPPORTED, "pending": nvml.NOT_SUPPORTED}


def test_mig_overrides_and_pending_change() -> None:
    reading = read("h100-80gb", mig_mode="disabled", mig_pending="enabled")
    assert {(g["migMode"]["current"], g["migMode"]["pending"]) for g in reading.gpus} == {
        ("disabled", "enabled")
    }
    # MIG overrides leave GPUs without MIG support alone: the hardware decides.
    assert read("l40s", mig_mode="enabled").gpus[0]["migMode"]["current"] == nvml.NOT_SUPPORTED


def test_driver_override_moves_cuda_and_nvml_versions() -> None:
    reading = read("h100-80gb", driver_version="570.86.10")
    assert reading.driver_version == "570.86.10"
    assert reading.cuda_driver_version == "12.8"
    assert reading.nvml_version == "12.570.86.10"


def test_xid_events_are_drained_without_blocking() -> None:
    fake = fake_nvml.from_snapshot_file("h100-80gb", seed="n", xid_events=[(3, 48), (3, 63)])
    reader = nvml.NvmlReader(fake)
    first = reader.read()
    assert [(e.gpu, e.xid) for e in first.xid_events] == [(3, 48), (3, 63)]
    assert first.xid_events[0].uuid == first.gpus[3]["uuid"]
    assert reader.read().xid_events == []  # drained; the event set persists between reads
    fake.inject_xid(1, 94)
    assert [(e.gpu, e.xid) for e in reader.read().xid_events] == [(1, 94)]


def test_xid_storm_is_bounded_per_read() -> None:
    storm = [(0, 48)] * (nvml.MAX_EVENTS_PER_READ + 10)
    reader = nvml.NvmlReader(fake_nvml.from_snapshot_file("h100-80gb", xid_events=storm))
    assert len(reader.read().xid_events) == nvml.MAX_EVENTS_PER_READ
    assert len(reader.read().xid_events) == 10


def test_gpu_falling_off_the_bus() -> None:
    fake = fake_nvml.from_snapshot_file("b200", seed="n")
    reader = nvml.NvmlReader(fake)
    uuid5 = reader.read().gpus[5]["uuid"]
    fake.lose_gpu(5)
    reading = reader.read()
    lost = reading.gpus[5]
    assert lost["state"] == "lost"
    assert lost["uuid"] == uuid5  # remembered from the last good read
    assert "fell off the bus" in lost["error"]
    assert all(g["state"] == "ok" for i, g in enumerate(reading.gpus) if i != 5)
    assert [(e.gpu, e.xid, e.uuid) for e in reading.xid_events] == [(5, 79, uuid5)]


def test_lost_gpu_at_start_still_reports_xid_79() -> None:
    reading = read("h100-80gb", lost_gpus=[2])
    assert reading.gpus[2]["state"] == "lost"
    assert [(e.gpu, e.xid) for e in reading.xid_events] == [(2, 79)]


@pytest.mark.parametrize(
    ("error", "reason"),
    [("LibraryNotFound", "LibraryNotFound"), ("DriverNotLoaded", "DriverNotLoaded")],
)
def test_nvml_failing_to_start(error: str, reason: str) -> None:
    reader = nvml.NvmlReader(fake_nvml.from_snapshot_file("h100-80gb", nvml_error=error))
    with pytest.raises(nvml.NvmlUnavailableError) as info:
        reader.read()
    assert info.value.reason == reason


def test_reader_reinitialises_after_a_failure() -> None:
    fake = fake_nvml.from_snapshot_file("h100-80gb", nvml_error="DriverNotLoaded")
    reader = nvml.NvmlReader(fake)
    with pytest.raises(nvml.NvmlUnavailableError):
        reader.read()
    fake.init_error = None  # the driver pod came back
    assert len(reader.read().gpus) == 8
    reader.close()
    assert fake.initialized == 0


def test_fake_raises_pynvml_exception_classes() -> None:
    fake = fake_nvml.from_snapshot_file("l40s")
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError) as info:
        fake.nvmlDeviceGetMigMode(handle)
    assert type(info.value) is nvml.NotSupported
    assert type(info.value).__module__ == "pynvml"
    assert fake.NVMLError_NotSupported is nvml.NotSupported


def test_functions_missing_from_an_older_driver_read_as_not_supported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = fake_nvml.from_snapshot_file("a100-40gb")

    def missing(*_args: object) -> None:
        raise nvml.FunctionNotFound()

    monkeypatch.setattr(fake, "nvmlDeviceGetRemappedRows", missing)
    monkeypatch.setattr(fake, "nvmlDeviceGetRetiredPagesPendingStatus", missing)
    monkeypatch.setattr(fake, "nvmlSystemGetNVMLVersion", missing)
    reading = nvml.NvmlReader(fake).read()
    assert reading.nvml_version == nvml.NOT_SUPPORTED
    assert reading.gpus[0]["state"] == "ok"
    assert reading.gpus[0]["pageRetirement"] == {"mechanism": nvml.NOT_SUPPORTED}


def test_other_nvml_errors_mark_only_that_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvml.from_snapshot_file("a100-40gb")
    real = fake.nvmlDeviceGetPowerUsage

    def flaky(handle: fake_nvml.FakeHandle) -> int:
        if handle.index == 2:
            raise nvml.NoPermission()
        return real(handle)

    monkeypatch.setattr(fake, "nvmlDeviceGetPowerUsage", flaky)
    gpus = nvml.NvmlReader(fake).read().gpus
    assert gpus[2]["state"] == "error"
    assert "Insufficient Permissions" in gpus[2]["error"]
    assert [g["state"] for i, g in enumerate(gpus) if i != 2] == ["ok"] * 7


def test_simulator_controls_change_a_running_fake() -> None:
    fake = fake_nvml.from_snapshot_file("h100-80gb", seed="n")
    reader = nvml.NvmlReader(fake)
    assert reader.read().driver_version == "580.126.20"
    fake.set_driver_version("595.91.07", 13020)
    fake.set_mig_mode("disabled", pending="enabled")
    reading = reader.read()
    assert (reading.driver_version, reading.cuda_driver_version) == ("595.91.07", "13.2")
    assert reading.nvml_version == "13.595.91.07"
    assert reading.gpus[0]["migMode"] == {"current": "disabled", "pending": "enabled"}
    fake.set_mig_mode("enabled")
    assert reader.read().gpus[7]["migMode"] == {"current": "enabled", "pending": "enabled"}
