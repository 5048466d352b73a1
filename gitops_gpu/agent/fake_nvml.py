# ruff: noqa: N802, N815  (method and attribute names mirror pynvml's)
"""A pynvml-compatible module object driven by a JSON snapshot of one GPU node.

The one fake the project allows: machines without GPUs (CI, the testbed simulator) hand a
:class:`FakeNvml` to the agent's reader in place of ``pynvml``. It raises pynvml's own exception
classes (re-exported by :mod:`gitops_gpu.agent.nvml`, the only pynvml importer), so the reader
takes exactly the branches it takes on a real node.

Snapshots live in ``gitops_gpu/data/nvml-snapshots/<name>.json``: system versions, a GPU count,
PCI bus ids and one GPU template (values as NVML returns them: bytes, milliwatts, the string
``"not supported"`` for a query the GPU does not support), plus optional per-index overrides.
:func:`build_fake` applies the simulator's per-node overrides on top (driver version, MIG mode,
Xid events, a GPU falling off the bus, NVML failing to start).

One deliberate difference from real NVML: events queued before an event set exists are still
delivered to it, so a one-shot read of a freshly built fake reports the Xids it was given.
"""

from __future__ import annotations

import copy
import json
import uuid as uuidlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitops_gpu.agent import nvml

XID_FALLEN_OFF_BUS = 79
_UUID_NAMESPACE = uuidlib.UUID("6c1f4b8e-5f0a-4f43-9b8e-6a0b1e8f0d11")

# CUDA driver API version per driver branch (CUDA toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions"); used when a driver override does not say.
CUDA_BY_BRANCH = {
    535: 12020,
    550: 12040,
    560: 12060,
    565: 12070,
    570: 12080,
    575: 12090,
    580: 13000,
    590: 13010,
}


def _snapshot_dir() -> Path:
    # Package data next to the package (pyproject ships gitops_gpu/data/**).
    return Path(__file__).resolve().parent.parent / "data" / "nvml-snapshots"


def snapshot_names() -> list[str]:
    """Names of the bundled snapshots (file stems), sorted."""
    return sorted(p.name[:-5] for p in _snapshot_dir().iterdir() if p.name.endswith(".json"))


def load_snapshot(name_or_path: str | Path) -> dict[str, Any]:
    """Load a snapshot by file path, or by bundled name such as ``h100-80gb``."""
    path = Path(name_or_path)
    if path.is_file():
        text = path.read_text()
    elif str(name_or_path) in snapshot_names():
        text = (_snapshot_dir() / f"{name_or_path}.json").read_text()
    else:
        raise FileNotFoundError(
            f"NVML snapshot {name_or_path!r} not found: "
            f"pass a JSON file or one of {snapshot_names()}"
        )
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass(frozen=True)
class FakeHandle:
    index: int


@dataclass(frozen=True)
class FakePciInfo:
    busId: bytes


@dataclass(frozen=True)
class FakeMemory:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class FakeEventData:
    device: FakeHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


class FakeEventSet:
    def __init__(self) -> None:
        self.devices: set[int] = set()
        self.freed = False


class FakeNvml:
    """Module-like stand-in for ``pynvml``; attribute names match pynvml's."""

    NVMLError = nvml.NVMLError
    NVMLError_NotSupported = nvml.NotSupported
    NVMLError_GpuIsLost = nvml.GpuIsLost
    NVMLError_Timeout = nvml.Timeout
    NVMLError_LibraryNotFound = nvml.LibraryNotFound
    NVMLError_DriverNotLoaded = nvml.DriverNotLoaded
    NVMLError_Uninitialized = nvml.Uninitialized
    NVML_TEMPERATURE_GPU = nvml.TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = nvml.MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = nvml.VOLATILE_ECC
    NVML_AGGREGATE_ECC = nvml.AGGREGATE_ECC
    NVML_DEVICE_MIG_ENABLE = nvml.MIG_ENABLE
    nvmlEventTypeXidCriticalError = nvml.EVENT_TYPE_XID

    def __init__(
        self,
        *,
        driver_version: str,
        cuda_driver_version: int,
        nvml_version: str,
        gpus: list[dict[str, Any]],
        init_error: str | None = None,
    ) -> None:
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.nvml_version = nvml_version
        self.gpus = gpus
        self.init_error = init_error
        self.lost: set[int] = set()
        self.events: list[tuple[int, int]] = []  # (gpu index, xid), oldest first
        self.initialized = 0
        self.calls = 0  # NVML calls made, so tests can assert a read is bounded

    # -- simulator controls -------------------------------------------------------------------
    def inject_xid(self, gpu: int, xid: int) -> None:
        self.events.append((gpu, xid))

    def set_driver_version(self, version: str, cuda_driver_version: int | None = None) -> None:
        """A driver upgrade: driver, CUDA driver API and NVML versions move together."""
        self.driver_version = version
        self.cuda_driver_version = cuda_driver_version or cuda_for_driver(
            version, self.cuda_driver_version
        )
        self.nvml_version = f"{self.cuda_driver_version // 1000}.{version}"

    def set_mig_mode(self, current: str | None = None, pending: str | None = None) -> None:
        """MIG mode of every MIG-capable GPU; a ``pending`` unlike current awaits a GPU reset."""
        for gpu in self.gpus:
            mig = gpu.get("migMode")
            if not isinstance(mig, dict):
                continue  # no MIG on this GPU: the hardware decides, not the override
            if current is not None:
                mig["current"] = mig["pending"] = _mig_int(current)
            if pending is not None:
                mig["pending"] = _mig_int(pending)

    def lose_gpu(self, gpu: int) -> None:
        """The GPU falls off the bus: Xid 79, then every query on it raises GPU_IS_LOST."""
        self.lost.add(gpu)
        self.inject_xid(gpu, XID_FALLEN_OFF_BUS)

    # -- helpers ------------------------------------------------------------------------------
    def _check_init(self) -> None:
        self.calls += 1
        if not self.initialized:
            raise nvml.Uninitialized()

    def _gpu(self, handle: FakeHandle) -> dict[str, Any]:
        self._check_init()
        if handle.index in self.lost:
            raise nvml.GpuIsLost()
        return self.gpus[handle.index]

    @staticmethod
    def _value(gpu: Mapping[str, Any], key: str) -> Any:
        value = gpu.get(key, nvml.NOT_SUPPORTED)
        if value == nvml.NOT_SUPPORTED:
            raise nvml.NotSupported()
        return value

    # -- pynvml API ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error == "LibraryNotFound":
            raise nvml.LibraryNotFound()
        if self.init_error == "DriverNotLoaded":
            raise nvml.DriverNotLoaded()
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check_init()
        return self.cuda_driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise nvml.InvalidArgument()
        return FakeHandle(index)

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        self._check_init()
        return handle.index

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return str(self._gpu(handle)["uuid"])

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return str(self._value(self._gpu(handle), "name"))

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        return FakePciInfo(str(self._value(self._gpu(handle), "pciBusId")).encode())

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:
        total = int(self._value(self._gpu(handle), "memoryTotalBytes"))
        return FakeMemory(total=total, free=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeHandle) -> tuple[int, int]:
        major, minor = self._value(self._gpu(handle), "computeCapability")
        return int(major), int(minor)

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        mig = self._value(self._gpu(handle), "migMode")
        return [int(mig["current"]), int(mig["pending"])]

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter: int) -> int:
        gpu = self._gpu(handle)
        if error_type != nvml.MEMORY_ERROR_TYPE_UNCORRECTED:
            raise nvml.NotSupported()  # the snapshots carry uncorrected counts only
        key = (
            "eccUncorrectedVolatile" if counter == nvml.VOLATILE_ECC else "eccUncorrectedAggregate"
        )
        return int(self._value(gpu, key))

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        rows = self._value(self._gpu(handle), "remappedRows")
        return (
            int(rows["correctable"]),
            int(rows["uncorrectable"]),
            int(bool(rows["pending"])),
            int(bool(rows["failure"])),
        )

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:
        return int(bool(self._value(self._gpu(handle), "retiredPagesPending")))

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        if sensor != nvml.TEMPERATURE_GPU:
            raise nvml.NotSupported()
        return int(self._value(self._gpu(handle), "temperatureC"))

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return int(self._value(self._gpu(handle), "powerMilliwatts"))

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._check_init()
        return FakeEventSet()

    # Event registration works on a lost GPU, so its Xid 79 reaches the reader: on a real node
    # the agent registered long before the GPU fell off the bus.
    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        self._check_init()
        return nvml.EVENT_TYPE_XID if self.gpus[handle.index].get("xidEvents", True) else 0

    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, types: int, event_set: FakeEventSet
    ) -> None:
        self._check_init()
        if types & nvml.EVENT_TYPE_XID:
            event_set.devices.add(handle.index)

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeout_ms: int) -> FakeEventData:
        self._check_init()
        for i, (gpu, xid) in enumerate(self.events):
            if gpu in event_set.devices:
                del self.events[i]
                return FakeEventData(FakeHandle(gpu), nvml.EVENT_TYPE_XID, xid)
        raise nvml.Timeout()  # real NVML also raises Timeout when nothing arrived in time

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._check_init()
        event_set.freed = True


def gpu_uuid(seed: str, index: int) -> str:
    """A stable, per-node-unique UUID in NVML's ``GPU-xxxxxxxx-...`` form."""
    return "GPU-" + str(uuidlib.uuid5(_UUID_NAMESPACE, f"{seed}/{index}"))


def cuda_for_driver(driver_version: str, default: int) -> int:
    try:
        return CUDA_BY_BRANCH.get(int(driver_version.split(".", maxsplit=1)[0]), default)
    except ValueError:
        return default


def build_fake(
    snapshot: Mapping[str, Any],
    *,
    seed: str = "",
    driver_version: str | None = None,
    cuda_driver_version: int | None = None,
    mig_mode: str | None = None,
    mig_pending: str | None = None,
    xid_events: Iterable[tuple[int, int]] = (),
    lost_gpus: Collection[int] = (),
    nvml_error: str | None = None,
    gpu_count: int | None = None,
) -> FakeNvml:
    """Build a fake NVML for one node from a snapshot dict and the simulator's overrides.

    ``seed`` (the node name) makes GPU UUIDs unique per node; ``mig_mode``/``mig_pending`` are
    ``"enabled"``/``"disabled"`` and leave GPUs without MIG support alone; ``xid_events`` are
    ``(gpu index, xid)`` pairs; ``lost_gpus`` fall off the bus (Xid 79, then GPU_IS_LOST);
    ``nvml_error`` (``"LibraryNotFound"`` | ``"DriverNotLoaded"``) makes ``nvmlInit`` fail.
    """
    if nvml_error not in (None, "LibraryNotFound", "DriverNotLoaded"):
        raise ValueError(
            f"nvml_error must be LibraryNotFound or DriverNotLoaded, not {nvml_error!r}"
        )
    count = int(gpu_count if gpu_count is not None else snapshot["gpuCount"])
    bus_ids: list[str] = list(snapshot.get("pciBusIds", []))
    per_index: Mapping[str, Any] = snapshot.get("gpus", {})
    gpus = []
    for index in range(count):
        gpu = copy.deepcopy(dict(snapshot["gpu"]))
        gpu.update(copy.deepcopy(per_index.get(str(index), {})))
        gpu["uuid"] = gpu_uuid(seed, index)
        gpu.setdefault(
            "pciBusId",
            bus_ids[index] if index < len(bus_ids) else f"00000000:{0x10 + index:02X}:00.0",
        )
        gpus.append(gpu)
    fake = FakeNvml(
        driver_version=str(snapshot["driverVersion"]),
        cuda_driver_version=int(snapshot["cudaDriverVersion"]),
        nvml_version=str(snapshot["nvmlVersion"]),
        gpus=gpus,
        init_error=nvml_error,
    )
    if driver_version or cuda_driver_version:
        fake.set_driver_version(driver_version or fake.driver_version, cuda_driver_version)
    fake.set_mig_mode(mig_mode, mig_pending)
    for gpu_index, xid in xid_events:
        fake.inject_xid(gpu_index, xid)
    for gpu_index in sorted(lost_gpus):
        fake.lose_gpu(gpu_index)
    return fake


def from_snapshot_file(name_or_path: str | Path, **overrides: Any) -> FakeNvml:
    return build_fake(load_snapshot(name_or_path), **overrides)


def _mig_int(mode: str) -> int:
    if mode not in ("enabled", "disabled"):
        raise ValueError(f"MIG mode must be 'enabled' or 'disabled', not {mode!r}")
    return nvml.MIG_ENABLE if mode == "enabled" else 0
