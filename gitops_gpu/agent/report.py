"""The NodeGPUReport status: built from one NVML reading as a plain dict, kept small.

Small on purpose: one report per GPU node is written every heartbeat, so Xid history is bounded
(:data:`MAX_XID_HISTORY` newest events plus a running total) and error messages are truncated.
The fingerprint leaves out the read time and the telemetry that drifts every second
(temperature, power), so an unchanged node is re-published only when its heartbeat is due.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import names
from gitops_gpu.agent import nvml

API_VERSION, KIND = names.NODE_GPU_REPORT_API
MAX_XID_HISTORY = 16
NVML_READY = "NVMLReady"
_VOLATILE_KEYS = ("temperatureC", "powerMilliwatts")


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class XidHistory:
    """The newest Xid events the agent has seen since it started, plus how many in all."""

    def __init__(self, size: int = MAX_XID_HISTORY) -> None:
        self.events: deque[dict[str, Any]] = deque(maxlen=size)
        self.total = 0

    def add(self, events: Sequence[nvml.XidEvent], seen_at: datetime) -> None:
        stamp = rfc3339(seen_at)
        for ev in events:
            self.events.append({"gpu": ev.gpu, "uuid": ev.uuid, "xid": ev.xid, "seenAt": stamp})
            self.total += 1


def mig_summary(gpus: Sequence[Mapping[str, Any]]) -> str:
    """One word for the printer column: enabled | disabled | mixed | not supported | unknown."""
    modes = {g["migMode"]["current"] for g in gpus if g.get("state") == "ok" and "migMode" in g}
    if not modes:
        return "unknown"
    return modes.pop() if len(modes) == 1 else "mixed"


def condition(
    status: bool, reason: str, message: str, now: datetime, previous: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The NVMLReady condition; lastTransitionTime only moves when the status flips."""
    value = "True" if status else "False"
    since = rfc3339(now)
    for old in previous:
        if old.get("type") == NVML_READY and old.get("status") == value:
            since = str(old.get("lastTransitionTime", since))
    return {
        "type": NVML_READY,
        "status": value,
        "reason": reason,
        "message": message[:1000],
        "lastTransitionTime": since,
    }


def status_from_reading(
    node: str,
    reading: nvml.Reading,
    history: XidHistory,
    now: datetime,
    heartbeat_seconds: float,
    previous_conditions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    lost = [g["index"] for g in reading.gpus if g.get("state") == "lost"]
    message = f"NVML read {len(reading.gpus)} GPUs"
    if lost:
        message += f"; lost: {', '.join(map(str, lost))}"
    facts = {
        "driverVersion": reading.driver_version,
        "cudaDriverVersion": reading.cuda_driver_version,
        "nvmlVersion": reading.nvml_version,
        "gpuCount": len(reading.gpus),
        "migMode": mig_summary(reading.gpus),
        "gpus": reading.gpus,
        "xidMonitoring": "supported" if reading.xid_monitoring else nvml.NOT_SUPPORTED,
    }
    ready = condition(True, "Read", message, now, previous_conditions)
    return _status(node, now, heartbeat_seconds, facts, history, ready)


def status_from_error(
    node: str,
    error: nvml.NvmlUnavailableError,
    history: XidHistory,
    now: datetime,
    heartbeat_seconds: float,
    previous_conditions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A report that says NVML is unavailable: no versions or GPUs, the reason in a condition."""
    ready = condition(False, error.reason, error.message, now, previous_conditions)
    return _status(node, now, heartbeat_seconds, {"migMode": "unknown", "gpus": []}, history, ready)


def _status(
    node: str,
    now: datetime,
    heartbeat_seconds: float,
    facts: Mapping[str, Any],
    history: XidHistory,
    ready: dict[str, Any],
) -> dict[str, Any]:
    """Every report's frame (node, read time, heartbeat; Xid history, NVMLReady) around
    ``facts``, in the order the status has always had."""
    return {
        "nodeName": node,
        "observedAt": rfc3339(now),
        "heartbeatSeconds": int(heartbeat_seconds),
        **facts,
        "xidEvents": list(history.events),
        "xidEventsTotal": history.total,
        "conditions": [ready],
    }


def fingerprint(status: Mapping[str, Any]) -> str:
    """A digest of the content that matters: no read or transition times, temperature, power."""
    stable = {k: v for k, v in status.items() if k != "observedAt"}
    stable["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    stable["gpus"] = [
        {k: v for k, v in gpu.items() if k not in _VOLATILE_KEYS} for gpu in status.get("gpus", [])
    ]
    blob = json.dumps(stable, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def report_object(node: str, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The NodeGPUReport as applied; ``status`` only for the status subresource."""
    obj: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": node}}
    if status is not None:
        obj["status"] = dict(status)
    return obj


def read_status(
    lib: Any, node: str, *, now: datetime | None = None, heartbeat_seconds: float = 120.0
) -> dict[str, Any]:
    """One-shot: read NVML through ``lib`` (pynvml or a fake) and build the status.

    For the testbed simulator, which publishes reports for fake nodes from snapshots.
    """
    when = now or datetime.now(UTC)
    history = XidHistory()
    reader = nvml.NvmlReader(lib)
    try:
        reading = reader.read()
    except nvml.NvmlUnavailableError as exc:
        return status_from_error(node, exc, history, when, heartbeat_seconds)
    finally:
        reader.close()
    history.add(reading.xid_events, when)
    return status_from_reading(node, reading, history, when, heartbeat_seconds)
