"""NodeGPUReports for simulated nodes: the agent's own code (NvmlReader, report builder) run
against a fake NVML built from the node's GPU product snapshot and the simulator's state
(installed driver, applied MIG config, injected faults)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gitops_gpu.agent import fake_nvml, nvml, report
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.gpus import DEFAULT_PRODUCT, PRODUCTS

Obj = dict[str, Any]
# What an agent at the default 30 s interval uses: max(4 x interval, 60 s).
HEARTBEAT_SECONDS = 120.0


class SnapshotReports:
    """Callable per node -> report status; NVML is re-read only when the node's state changed."""

    def __init__(self, heartbeat_seconds: float = HEARTBEAT_SECONDS) -> None:
        self.heartbeat_seconds = heartbeat_seconds
        self._snapshots: dict[str, dict[str, Any]] = {}
        self._history: dict[str, report.XidHistory] = {}
        self._cache: dict[str, tuple[tuple[str | None, ...], Obj]] = {}

    def _snapshot(self, product: str) -> dict[str, Any]:
        name = PRODUCTS.get(product, PRODUCTS[DEFAULT_PRODUCT]).snapshot
        if name not in self._snapshots:
            self._snapshots[name] = fake_nvml.load_snapshot(name)
        return self._snapshots[name]

    def __call__(self, node: Obj) -> Obj | None:
        meta = node["metadata"]
        ann = meta.get("annotations") or {}
        driver = ann.get(sim.DRIVER_ANN)
        if driver is None:
            return None  # no driver installed yet: the agent pod is not running there either
        product = (meta.get("labels") or {}).get("nvidia.com/gpu.product", DEFAULT_PRODUCT)
        mig_cfg = ann.get(sim.MIG_ANN, "all-disabled")
        fault = ann.get(sim.FAULT_ANN)
        key = (product, driver, mig_cfg, fault)
        name = meta["name"]
        now = datetime.now(UTC)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == key:
            return {**cached[1], "observedAt": report.rfc3339(now)}
        fake = fake_nvml.build_fake(
            self._snapshot(product),
            seed=name,
            driver_version=driver,
            mig_mode="disabled" if mig_cfg == "all-disabled" else "enabled",
            lost_gpus=[0] if fault == "xid79" else (),
        )
        history = self._history.setdefault(name, report.XidHistory())
        reader = nvml.NvmlReader(fake)
        try:
            reading = reader.read()
            history.add(reading.xid_events, now)
            status = report.status_from_reading(name, reading, history, now, self.heartbeat_seconds)
        except nvml.NvmlUnavailableError as exc:
            status = report.status_from_error(name, exc, history, now, self.heartbeat_seconds)
        finally:
            reader.close()
        self._cache[name] = (key, status)
        return status


def snapshot_report(node: Obj) -> Obj | None:
    return _DEFAULT(node)


_DEFAULT = SnapshotReports()
