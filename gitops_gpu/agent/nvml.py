"""The only importer of pynvml: reads the NVML facts a NodeGPUReport carries.

The NVML library is injected as a module-like object (default: the real ``pynvml``), so the
fake in :mod:`gitops_gpu.agent.fake_nvml` can stand in on machines without GPUs. The fake raises
the exception classes re-exported here, which are pynvml's own, so both paths take the same
branches.

Failure model, from the smallest to the largest blast radius:
- a field the GPU does not support (``NVMLError_NotSupported``, or a function an older
  driver's NVML does not export: ``FunctionNotFound``) reads as :data:`NOT_SUPPORTED`;
- ``GPU_IS_LOST`` (a GPU that fell off the bus) marks that GPU ``state: lost``, others still read;
- any other error on one GPU marks that GPU ``state: error`` with the message;
- NVML that cannot start or fails system-wide raises :class:`NvmlUnavailableError`, which the agent
  turns into a report with an error condition.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import pynvml

# pynvml's exception classes, re-exported so no other module needs to import pynvml.
NVMLError: Any = pynvml.NVMLError
NotSupported: Any = pynvml.NVMLError_NotSupported
GpuIsLost: Any = pynvml.NVMLError_GpuIsLost
Timeout: Any = pynvml.NVMLError_Timeout
LibraryNotFound: Any = pynvml.NVMLError_LibraryNotFound
DriverNotLoaded: Any = pynvml.NVMLError_DriverNotLoaded
Uninitialized: Any = pynvml.NVMLError_Uninitialized
NoPermission: Any = pynvml.NVMLError_NoPermission
UnknownError: Any = pynvml.NVMLError_Unknown
InvalidArgument: Any = pynvml.NVMLError_InvalidArgument
FunctionNotFound: Any = pynvml.NVMLError_FunctionNotFound
# A query the GPU does not support, or that this (older) driver's NVML does not export at all.
UNSUPPORTED: tuple[Any, ...] = (NotSupported, FunctionNotFound)

# NVML ABI constants (stable across driver releases); the fake checks callers pass these.
TEMPERATURE_GPU: int = pynvml.NVML_TEMPERATURE_GPU
MEMORY_ERROR_TYPE_UNCORRECTED: int = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE_ECC: int = pynvml.NVML_VOLATILE_ECC
AGGREGATE_ECC: int = pynvml.NVML_AGGREGATE_ECC
EVENT_TYPE_XID: int = pynvml.nvmlEventTypeXidCriticalError
MIG_ENABLE: int = pynvml.NVML_DEVICE_MIG_ENABLE

NOT_SUPPORTED = "not supported"
# A storm must not keep one read busy forever; the rest is drained on the next read.
MAX_EVENTS_PER_READ = 256


@dataclass(frozen=True)
class XidEvent:
    gpu: int  # NVML index, -1 when the event's device could not be resolved
    uuid: str
    xid: int


@dataclass
class Reading:
    """One pass over NVML: system versions, one dict per GPU, Xid events new since last read."""

    driver_version: str
    cuda_driver_version: str
    nvml_version: str
    gpus: list[dict[str, Any]]
    xid_events: list[XidEvent] = field(default_factory=list)
    xid_monitoring: bool = True


class NvmlUnavailableError(Exception):
    """NVML could not be initialised or failed as a whole; ``reason`` is a CamelCase word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    # NVML encodes CUDA 13.0 as 13000 and 12.8 as 12080.
    return f"{value // 1000}.{(value % 1000) // 10}"


def _mig_mode(value: int) -> str:
    return "enabled" if value == MIG_ENABLE else "disabled"


def unavailable_from(exc: Exception) -> NvmlUnavailableError:
    """Name an NVML-wide failure and say what an operator should look at."""
    if isinstance(exc, LibraryNotFound):
        return NvmlUnavailableError(
            "LibraryNotFound",
            "NVML shared library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed "
            "or not mounted into the agent container",
        )
    if isinstance(exc, DriverNotLoaded):
        return NvmlUnavailableError(
            "DriverNotLoaded", "NVIDIA kernel driver is not loaded on the node"
        )
    if isinstance(exc, NoPermission):
        return NvmlUnavailableError("NoPermission", "NVML refused access: run the agent privileged")
    return NvmlUnavailableError("NVMLError", f"NVML failed: {exc}")


class NvmlReader:
    """Reads NVML each pass; keeps NVML initialised and one Xid event set between passes.

    The event set must outlive a pass: NVML only delivers events that happen after a device is
    registered, so re-creating it each pass would lose Xids raised between passes.
    """

    def __init__(self, lib: Any = None) -> None:
        self.lib: Any = lib if lib is not None else pynvml
        self._initialized = False
        self._event_set: Any = None
        self._uuids: dict[int, str] = {}

    def read(self) -> Reading:
        try:
            if not self._initialized:
                self._init()
            return self._read()
        except NvmlUnavailableError:
            self.close()
            raise
        except NVMLError as exc:
            self.close()
            raise unavailable_from(exc) from exc

    def close(self) -> None:
        if not self._initialized:
            return
        self._initialized = False
        with contextlib.suppress(NVMLError):
            if self._event_set is not None:
                self.lib.nvmlEventSetFree(self._event_set)
        self._event_set = None
        with contextlib.suppress(NVMLError):
            self.lib.nvmlShutdown()

    # -- internals ------------------------------------------------------------------------------
    def _init(self) -> None:
        lib = self.lib
        try:
            lib.nvmlInit()
        except NVMLError as exc:
            raise unavailable_from(exc) from exc
        self._initialized = True
        try:
            self._event_set = lib.nvmlEventSetCreate()
        except UNSUPPORTED:
            self._event_set = None
            return
        for index in range(lib.nvmlDeviceGetCount()):
            try:
                handle = lib.nvmlDeviceGetHandleByIndex(index)
                if lib.nvmlDeviceGetSupportedEventTypes(handle) & EVENT_TYPE_XID:
                    lib.nvmlDeviceRegisterEvents(handle, EVENT_TYPE_XID, self._event_set)
            except (*UNSUPPORTED, GpuIsLost):
                continue  # this GPU's Xids cannot be watched; the others still are

    def _read(self) -> Reading:
        lib = self.lib
        driver = self._optional(lib.nvmlSystemGetDriverVersion)
        cuda = self._optional(lib.nvmlSystemGetCudaDriverVersion)
        nvml_version = self._optional(lib.nvmlSystemGetNVMLVersion)
        gpus = [self._read_gpu(i) for i in range(lib.nvmlDeviceGetCount())]
        for gpu in gpus:
            if isinstance(gpu.get("uuid"), str):
                self._uuids[gpu["index"]] = gpu["uuid"]
        return Reading(
            driver_version=_text(driver),
            cuda_driver_version=cuda if cuda == NOT_SUPPORTED else _cuda_version(int(cuda)),
            nvml_version=_text(nvml_version),
            gpus=gpus,
            xid_events=self._drain_events(),
            xid_monitoring=self._event_set is not None,
        )

    @staticmethod
    def _optional(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except UNSUPPORTED:
            return NOT_SUPPORTED

    def _read_gpu(self, index: int) -> dict[str, Any]:
        lib = self.lib
        opt = self._optional
        gpu: dict[str, Any] = {"index": index}
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            gpu["uuid"] = _text(lib.nvmlDeviceGetUUID(handle))
            gpu["name"] = _text(opt(lib.nvmlDeviceGetName, handle))
            pci = opt(lib.nvmlDeviceGetPciInfo, handle)
            gpu["pciBusId"] = pci if pci == NOT_SUPPORTED else _text(pci.busId)
            memory = opt(lib.nvmlDeviceGetMemoryInfo, handle)
            gpu["memoryTotalMiB"] = memory if memory == NOT_SUPPORTED else memory.total // 2**20
            cc = opt(lib.nvmlDeviceGetCudaComputeCapability, handle)
            gpu["computeCapability"] = cc if cc == NOT_SUPPORTED else f"{cc[0]}.{cc[1]}"
            mig = opt(lib.nvmlDeviceGetMigMode, handle)
            gpu["migMode"] = (
                {"current": NOT_SUPPORTED, "pending": NOT_SUPPORTED}
                if mig == NOT_SUPPORTED
                else {"current": _mig_mode(mig[0]), "pending": _mig_mode(mig[1])}
            )
            gpu["eccUncorrected"] = {
                "volatile": opt(
                    lib.nvmlDeviceGetTotalEccErrors,
                    handle,
                    MEMORY_ERROR_TYPE_UNCORRECTED,
                    VOLATILE_ECC,
                ),
                "aggregate": opt(
                    lib.nvmlDeviceGetTotalEccErrors,
                    handle,
                    MEMORY_ERROR_TYPE_UNCORRECTED,
                    AGGREGATE_ECC,
                ),
            }
            gpu["pageRetirement"] = self._page_retirement(handle)
            gpu["temperatureC"] = opt(lib.nvmlDeviceGetTemperature, handle, TEMPERATURE_GPU)
            gpu["powerMilliwatts"] = opt(lib.nvmlDeviceGetPowerUsage, handle)
            gpu["state"] = "ok"
        except GpuIsLost as exc:
            gpu.update(state="lost", error=f"GPU is lost (fell off the bus): {exc}")
            if index in self._uuids:
                gpu.setdefault("uuid", self._uuids[index])
        except UNSUPPORTED as exc:  # handle/UUID themselves unsupported: nothing to report
            gpu.update(state="error", error=f"GPU cannot be queried: {exc}")
        except NVMLError as exc:
            gpu.update(state="error", error=f"NVML error reading GPU {index}: {exc}"[:1000])
        return gpu

    def _page_retirement(self, handle: Any) -> dict[str, Any]:
        # Ampere and later remap rows; older GPUs retire pages. Ask for the newer first.
        try:
            _corr, _unc, pending, failure = self.lib.nvmlDeviceGetRemappedRows(handle)
            return {"mechanism": "remapped-rows", "pending": bool(pending), "failed": bool(failure)}
        except UNSUPPORTED:
            pass
        try:
            pending = self.lib.nvmlDeviceGetRetiredPagesPendingStatus(handle)
            return {"mechanism": "retired-pages", "pending": bool(pending), "failed": False}
        except UNSUPPORTED:
            return {"mechanism": NOT_SUPPORTED}

    def _drain_events(self) -> list[XidEvent]:
        """Collect Xid events without blocking (EventSetWait with a 0 ms timeout)."""
        if self._event_set is None:
            return []
        lib = self.lib
        events: list[XidEvent] = []
        for _ in range(MAX_EVENTS_PER_READ):
            try:
                data = lib.nvmlEventSetWait(self._event_set, 0)
            except Timeout:
                break
            if not int(data.eventType) & EVENT_TYPE_XID:
                continue
            try:
                index = int(lib.nvmlDeviceGetIndex(data.device))
            except NVMLError:
                index = -1
            try:
                uuid = _text(lib.nvmlDeviceGetUUID(data.device))
            except NVMLError:
                uuid = self._uuids.get(index, "")
            events.append(XidEvent(gpu=index, uuid=uuid, xid=int(data.eventData)))
        return events
