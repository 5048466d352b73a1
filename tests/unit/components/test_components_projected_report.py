"""The informer keeps a projection of each NodeGPUReport (sync/slim.py): the ladder must judge
a projected report exactly as it judges the whole one, for every snapshot and fault."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from components_builders import APPS, NOW, node_obj, pod, pool, status_for

from gitops_gpu.agent import fake_nvml
from gitops_gpu.components import ladder
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.sync import slim

FAULTS: dict[str, dict[str, Any]] = {
    "none": {},
    "old driver": {"driver_version": "570.195.03"},
    "xid 79": {"xid_events": [(0, 79)]},
    "xid 13": {"xid_events": [(1, 13)]},
    "lost gpu": {"lost_gpus": [1]},
    "mig pending": {"mig_mode": "disabled", "mig_pending": "enabled"},
    "no library": {"nvml_error": "LibraryNotFound"},
    "stale": {"age": 3600.0},
}


def _report(name: str, snapshot: str, fault: dict[str, Any]) -> dict[str, Any]:
    status = status_for(name, snapshot, **fault)
    return {
        "apiVersion": "gitops-gpu.io/v1alpha1",
        "kind": "NodeGPUReport",
        "metadata": {"name": name, "resourceVersion": "7", "managedFields": [{"manager": "a"}]},
        "status": status,
    }


@pytest.mark.parametrize("snapshot", fake_nvml.snapshot_names())
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_ladder_judges_a_projected_report_as_the_whole(snapshot: str, fault: str) -> None:
    whole = _report("gpu-1", snapshot, FAULTS[fault])
    projected = slim.report(copy.deepcopy(whole))
    node = node_obj("gpu-1", snapshot) if snapshot in _PRODUCTS else node_obj("gpu-1")
    pods = tuple(pod(app, "gpu-1") for app in APPS)
    target = pool()
    a = ladder.walk(NodeEvidence("gpu-1", node, whole, pods, NOW), target)
    b = ladder.walk(NodeEvidence("gpu-1", node, projected, pods, NOW), target)
    assert (b.health, b.reason, b.rungs) == (a.health, a.reason, a.rungs)


_PRODUCTS = {"h100-80gb", "h100-80gb-mig", "l40s", "a100-40gb", "b200"}


def test_the_projection_drops_gpu_telemetry_and_keeps_the_rest() -> None:
    whole = _report("gpu-1", "h100-80gb", FAULTS["xid 79"])
    out = msgspec.to_builtins(slim.report(copy.deepcopy(whole)))
    gpu = out["status"]["gpus"][0]
    assert set(gpu) == {"index", "uuid", "state", "migMode", "eccUncorrected", "pageRetirement"}
    assert set(gpu["eccUncorrected"]) == {"volatile"}
    assert out["status"]["xidEvents"] == whole["status"]["xidEvents"]
    assert "managedFields" not in out["metadata"]
    assert len(json.dumps(out)) < 0.7 * len(json.dumps(whole))


def test_typed_decode_of_reports_projects_like_json() -> None:
    whole = _report("gpu-1", "b200", FAULTS["lost gpu"])
    decode = slim.event_decoder("NodeGPUReport")
    assert decode is not None
    event = decode(json.dumps({"type": "MODIFIED", "object": whole}).encode())
    assert slim.report(event["object"]) == slim.report(copy.deepcopy(whole))
    listed = slim.list_decoder("NodeGPUReport")
    assert listed is not None
    page = listed(json.dumps({"metadata": {"resourceVersion": "9"}, "items": [whole]}).encode())
    assert slim.report(page["items"][0]) == slim.report(copy.deepcopy(whole))


def _event_object(report: dict[str, Any]) -> dict[str, Any]:
    decode = slim.event_decoder("NodeGPUReport")
    assert decode is not None
    obj: dict[str, Any] = decode(json.dumps({"type": "MODIFIED", "object": report}).encode())[
        "object"
    ]
    return obj


@pytest.mark.parametrize("snapshot", fake_nvml.snapshot_names())
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_heartbeat_moves_the_projection_exactly_as_projecting_it(
    snapshot: str, fault: str
) -> None:
    """The informer's shortcut for report heartbeats (only observedAt and resourceVersion
    moved) gives what projecting the event would; any other change is not a heartbeat."""
    before = _report("gpu-1", snapshot, FAULTS[fault])
    old = slim.report(copy.deepcopy(before))
    beat = copy.deepcopy(before)
    beat["metadata"]["resourceVersion"] = "8"
    beat["status"]["observedAt"] = "2026-11-29T12:05:00Z"
    moved = slim.report_heartbeat(old, _event_object(beat))
    assert moved is not None
    assert moved == slim.report(copy.deepcopy(beat))
    changed = copy.deepcopy(beat)
    changed["status"]["driverVersion"] = "999.1.1"
    assert slim.report_heartbeat(old, _event_object(changed)) is None
    labelled = copy.deepcopy(beat)
    labelled["metadata"]["labels"] = {"x": "y"}
    assert slim.report_heartbeat(old, _event_object(labelled)) is None
