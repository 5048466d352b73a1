"""Informer projections: what a cached Node or Pod keeps, heartbeats that change nothing, and
when a cached report was seen changing."""

from __future__ import annotations

import copy
import json
import logging
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitops_gpu import kube, names
from gitops_gpu.components import evidence
from gitops_gpu.components.gpu_facts import Gpu
from gitops_gpu.errors import KubeError
from gitops_gpu.sync import operands, slim
from gitops_gpu.sync.live import Informer, node_ready

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "n1",
        "resourceVersion": "10",
        "creationTimestamp": "2026-12-01T00:00:00Z",
        "labels": {"pool": "a", "nvidia.com/gpu-driver-upgrade-state": "upgrade-done"},
        "annotations": {
            "kwok.x-k8s.io/node": "fake",
            "gitops-gpu.io/managed-labels": "pool",
            "nvidia.com/gpu-driver-upgrade-enabled": "true",
        },
        "managedFields": [{"manager": "kwok"}],
    },
    "spec": {"unschedulable": True, "podCIDR": "10.0.0.0/24"},
    "status": {
        "allocatable": {"cpu": "96", "nvidia.com/gpu": "8"},
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "lastHeartbeatTime": "2026-12-01T00:00:00Z",
            },
        ],
        "images": [{"names": ["x"], "sizeBytes": 1}],
        "nodeInfo": {"kubeletVersion": "fake"},
    },
}


def test_node_keeps_what_decisions_read() -> None:
    out = slim.node(copy.deepcopy(NODE))
    ev = evidence.NodeEvidence("n1", out, None)
    assert ev.labels == NODE["metadata"]["labels"]
    assert dict(ev.annotations) == {
        "gitops-gpu.io/managed-labels": "pool",
        "nvidia.com/gpu-driver-upgrade-enabled": "true",
    }
    assert ev.unschedulable and node_ready(out)
    assert ev.condition("Ready") == {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    assert dict(ev.allocatable) == {"nvidia.com/gpu": "8"}
    assert ev.created is not None
    assert "images" not in out["status"] and "managedFields" not in out["metadata"]


def test_pod_keeps_owner_revision_node_and_states() -> None:
    pod = {
        "metadata": {
            "name": "nvidia-driver-abcde",
            "namespace": "gpu-operator",
            "uid": "u",
            "resourceVersion": "3",
            "labels": {"app": "nvidia-driver", "controller-revision-hash": "h1"},
            "ownerReferences": [{"kind": "DaemonSet", "uid": "ds", "name": "d", "apiVersion": "x"}],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "c", "restartCount": 2, "state": {"running": {}}, "image": "i"}
            ],
        },
    }
    out = slim.pod(pod)
    assert out["spec"] == {"nodeName": "n1"}
    assert out["metadata"]["ownerReferences"][0]["uid"] == "ds"
    assert out["metadata"]["labels"]["controller-revision-hash"] == "h1"
    assert out["status"]["containerStatuses"] == [
        {"name": "c", "restartCount": 2, "state": {"running": {}}}
    ]


def _informer() -> Informer:
    return Informer(cast(kube.Client, None), "v1", "Node")


def test_a_heartbeat_is_not_a_change() -> None:
    inf = _informer()
    inf._apply_event({"type": "ADDED", "object": copy.deepcopy(NODE)}, "1")
    assert (inf.version, inf.changes) == (1, 1)
    beat = copy.deepcopy(NODE)
    beat["metadata"]["resourceVersion"] = "11"
    beat["status"]["conditions"][1]["lastHeartbeatTime"] = "2026-12-01T00:01:00Z"
    assert inf._apply_event({"type": "MODIFIED", "object": beat}, "10") == "11"
    assert (inf.version, inf.events, inf.changes) == (1, 2, 1)
    assert inf._items["n1"]["metadata"]["resourceVersion"] == "10"  # memos keyed on it hold
    cordon = copy.deepcopy(beat)
    cordon["metadata"]["resourceVersion"] = "12"
    cordon["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] = "cordon-required"
    inf._apply_event({"type": "MODIFIED", "object": cordon}, "11")
    assert inf.version == 2 and inf._items["n1"]["metadata"]["resourceVersion"] == "12"
    inf._apply_event({"type": "DELETED", "object": cordon}, "12")
    inf._apply_event({"type": "DELETED", "object": cordon}, "12")
    assert inf.version == 3 and not inf._items


def test_ready_keeps_since_when_and_its_heartbeat_is_still_not_a_change() -> None:
    """ "NotReady since 12m" (components/node.py) reads Ready's lastTransitionTime, which moves
    only when Ready flips; a heartbeat still changes nothing."""
    down = copy.deepcopy(NODE)
    down["status"]["conditions"][1].update(
        status="Unknown", reason="NodeStatusUnknown", lastTransitionTime="2026-12-01T00:00:30Z"
    )
    decode = slim.event_decoder("Node")
    assert decode is not None
    typed = decode(json.dumps({"type": "MODIFIED", "object": down}).encode())["object"]
    for out in (slim.node(copy.deepcopy(down)), slim.node(typed)):
        ready = evidence.NodeEvidence("n1", out, None).condition("Ready")
        assert ready == {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "lastTransitionTime": "2026-12-01T00:00:30Z",
        }
    inf = _informer()
    inf._apply_event({"type": "ADDED", "object": copy.deepcopy(down)}, "1")
    beat = copy.deepcopy(down)
    beat["metadata"]["resourceVersion"] = "11"
    beat["status"]["conditions"][1]["lastHeartbeatTime"] = "2026-12-01T00:01:00Z"
    inf._apply_event({"type": "MODIFIED", "object": beat}, "10")
    assert (inf.version, inf.changes) == (1, 1)


def test_typed_decode_projects_like_json() -> None:
    line = json.dumps({"type": "MODIFIED", "object": NODE}).encode()
    decode = slim.event_decoder("Node")
    assert decode is not None
    event = decode(line)
    assert event["type"] == "MODIFIED" and "images" not in event["object"]["status"]
    assert slim.node(event["object"]) == slim.node(copy.deepcopy(NODE))
    listed = slim.list_decoder("Node")
    assert listed is not None
    page = listed(json.dumps({"metadata": {"continue": "x"}, "items": [NODE]}).encode())
    assert page["metadata"]["continue"] == "x"
    assert slim.node(page["items"][0]) == slim.node(copy.deepcopy(NODE))


def test_typed_decode_falls_back_on_what_it_does_not_fit() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 410}}
    decode = slim.event_decoder("Node")
    assert decode is not None
    assert decode(json.dumps(gone).encode()) == gone
    null_labels = copy.deepcopy(NODE)
    null_labels["metadata"]["labels"] = None
    assert (
        decode(json.dumps({"type": "ADDED", "object": null_labels}).encode())["object"]["metadata"][
            "labels"
        ]
        is None
    )


def test_the_cluster_policy_keeps_who_wrote_it_and_when() -> None:
    fields = {"f:spec": {"f:driver": {}}}
    cp = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": "cluster-policy",
            "annotations": {"gitops-gpu.io/commit": "abc"},
            "managedFields": [
                {"manager": "gitops-gpu", "operation": "Apply", "time": "2026-12-01T10:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": fields},
                {"manager": "gpu-operator", "operation": "Update", "time": "2026-12-01T10:00:05Z",
                 "subresource": "status", "fieldsV1": fields},
            ],
        },
        "spec": {"driver": {"enabled": True}},
        "status": {"state": "ready"},
    }  # fmt: skip
    out = slim.for_kind("ClusterPolicy")(copy.deepcopy(cp))
    assert out["spec"] == cp["spec"] and out["status"] == cp["status"]
    assert out["metadata"]["annotations"] == cp["metadata"]["annotations"]
    assert out["metadata"]["managedFields"] == [
        {"manager": "gitops-gpu", "operation": "Apply", "time": "2026-12-01T10:00:00Z"},
        {"manager": "gpu-operator", "operation": "Update", "time": "2026-12-01T10:00:05Z"},
    ]
    assert operands.applied_at(out, "gitops-gpu") == operands.applied_at(cp, "gitops-gpu")


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class _Lister:
    """Answers the informer's LIST with ``items`` (one page)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def list(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "99"}, "items": copy.deepcopy(self.items)}


def _gpu_report(rv: str, observed: str, driver: str = "580.126.20") -> dict[str, Any]:
    status = {"observedAt": observed, "heartbeatSeconds": 120, "driverVersion": driver}
    return {"metadata": {"name": "n1", "resourceVersion": rv}, "status": status}


def test_a_report_carries_when_the_controller_saw_its_content_change() -> None:
    """The report informer stamps each cached report with its clock when the content changes
    (observedAt included); an event that changes nothing, or a re-list that finds the report
    as it was, keeps the stamp, so a report that stopped changing ages."""
    clock, lister = _Clock(), _Lister()
    inf = Informer(
        cast(kube.Client, lister), "gitops-gpu.io/v1alpha1", "NodeGPUReport", clock=clock
    )
    seen = names.REPORT_SEEN_KEY

    def apply(obj: dict[str, Any]) -> datetime:
        inf._apply_event({"type": "MODIFIED", "object": copy.deepcopy(obj)}, "1")
        stamp: datetime = inf._items["n1"][seen]
        return stamp

    first = clock()
    assert apply(_gpu_report("1", "2026-12-01T00:00:00Z")) == first
    clock.tick(60)
    assert apply(_gpu_report("2", "2026-12-01T00:00:00Z")) == first  # same facts
    beat = clock.tick(60)
    assert apply(_gpu_report("3", "2026-12-01T00:02:00Z")) == beat  # observedAt moved
    changed = clock.tick(60)
    assert apply(_gpu_report("4", "2026-12-01T00:02:00Z", driver="1.2.3")) == changed
    clock.tick(60)
    lister.items = [_gpu_report("5", "2026-12-01T00:02:00Z", driver="1.2.3")]
    inf._list()
    assert inf._items["n1"][seen] == changed  # a re-list is no news of an unchanged report
    relisted = clock.tick(60)
    lister.items = [_gpu_report("6", "2026-12-01T00:05:00Z", driver="1.2.3")]
    inf._list()
    assert inf._items["n1"][seen] == relisted
    # Other kinds carry no stamp.
    nodes = Informer(cast(kube.Client, None), "v1", "Node", clock=clock)
    nodes._apply_event({"type": "ADDED", "object": copy.deepcopy(NODE)}, "1")
    assert seen not in nodes._items["n1"]


def test_a_managed_object_list_keeps_who_wrote_when_but_not_the_field_sets() -> None:
    entry = {"manager": "gitops-gpu", "operation": "Apply", "time": "2026-12-01T10:00:00Z"}
    listing = {
        "items": [
            {
                "metadata": {
                    "name": "train",
                    "managedFields": [{**entry, "fieldsType": "FieldsV1", "fieldsV1": {"f:a": {}}}],
                },
                "spec": {"version": "580.126.20"},
            }
        ]
    }
    (item,) = slim.OBJECT_LIST(json.dumps(listing).encode())["items"]
    assert item["metadata"]["managedFields"] == [entry]
    assert operands.applied_at(item, "gitops-gpu") == operands.applied_at(
        listing["items"][0], "gitops-gpu"
    )


class _EndingWatch(_Lister):
    """LISTs, then a watch that the informer is stopped during, and that then breaks."""

    def __init__(self) -> None:
        super().__init__()
        self.stop: Callable[[], None] = lambda: None

    def watch(self, *_: Any, **__: Any) -> Iterator[dict[str, Any]]:
        self.stop()  # the controller shuts down while the watch is open ...
        raise KubeError("WATCH /api/v1/nodes: stream ended: connection closed mid-stream", fix="")
        yield {}  # ... and its control plane goes away


def test_a_watch_that_ends_after_the_informer_stopped_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _EndingWatch()
    inf = Informer(cast(kube.Client, client), "v1", "Node")
    client.stop = inf.stop
    with caplog.at_level(logging.WARNING):
        inf._run()  # returns: stopped, not re-listing forever
    assert "watch failed" not in caplog.text


def _two_gpu_report(name: str, volatile: int) -> dict[str, Any]:
    gpus = [
        {
            "index": i,
            "uuid": f"GPU-{name}-{i}",
            "state": "ok",
            "migMode": {"current": "disabled", "pending": "disabled"},
            "eccUncorrected": {"volatile": volatile if i == 0 else 0, "aggregate": 0},
            "pageRetirement": {"pending": "false", "failure": "false"},
            "temperatureC": 40 + i,
        }
        for i in range(2)
    ]
    return {"metadata": {"name": name, "resourceVersion": "1"}, "status": {"gpus": gpus}}


def test_gpus_that_read_the_same_share_their_small_mappings_and_others_do_not() -> None:
    a, b = slim.report(_two_gpu_report("a", 0)), slim.report(_two_gpu_report("b", 3))
    ga, gb = a["status"]["gpus"], b["status"]["gpus"]
    assert ga[0].mig_mode is gb[1].mig_mode is ga[1].mig_mode
    assert ga[0].page_retirement is gb[0].page_retirement
    assert ga[0].ecc_uncorrected is ga[1].ecc_uncorrected is gb[1].ecc_uncorrected
    assert gb[0].ecc_uncorrected == {"volatile": 3} != ga[0].ecc_uncorrected
    # ...and what each reads is what it was sent, GPU by GPU, its own uuid included.
    assert [g.uuid for g in gb] == ["GPU-b-0", "GPU-b-1"]
    assert msgspec.to_builtins(ga[1]) == {
        "index": 1,
        "uuid": "GPU-a-1",
        "state": "ok",
        "migMode": {"current": "disabled", "pending": "disabled"},
        "pageRetirement": {"pending": "false", "failure": "false"},
        "eccUncorrected": {"volatile": 0},
    }


def test_a_report_keeps_its_gpus_as_small_records_and_not_what_nothing_reads() -> None:
    """80,000 GPUs at 10,000 nodes: each a 72-byte record, not a 272-byte dict. Not kept: the
    Node owner reference (garbage collection's), uid, creation time, nodeName (the report's
    own name) and xidEventsTotal (its xidEvents are)."""
    whole = _two_gpu_report("a", 0)
    whole["metadata"].update(
        ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": "a"}],
        uid="u-1",
        creationTimestamp="2026-12-01T00:00:00Z",
    )
    whole["status"].update(nodeName="a", xidEventsTotal=0, xidEvents=[], driverVersion="580.1")
    decode = slim.event_decoder("NodeGPUReport")
    assert decode is not None
    event = decode(json.dumps({"type": "MODIFIED", "object": whole}).encode())
    for out in (slim.report(copy.deepcopy(whole)), slim.report(event["object"])):
        gpu = out["status"]["gpus"][0]
        assert type(gpu) is Gpu and sys.getsizeof(gpu) <= 72
        assert set(out["metadata"]) == {"name", "resourceVersion"}
        assert set(out["status"]) == {"gpus", "xidEvents", "driverVersion"}


def test_a_gpu_uuid_is_held_as_a_number_and_read_back_exactly() -> None:
    """NVML's form is 44 bytes as a number, 89 as a string; decoded or built, it reads back
    as written (messages, the web view), and any other form is kept as it came."""
    nvml = "GPU-8a1c2b3d-0e1f-4a5b-9c8d-7e6f5a4b3c2d"
    decode = slim.event_decoder("NodeGPUReport")
    assert decode is not None
    for raw in (nvml, "GPU-8A1C2B3D-0E1F-4A5B-9C8D-7E6F5A4B3C2D", "MIG-1/2/3", "GPU-00"):
        report = {"metadata": {"name": "a"}, "status": {"gpus": [{"index": 1, "uuid": raw}]}}
        event = decode(json.dumps({"type": "MODIFIED", "object": report}).encode())
        decoded = event["object"]["status"]["gpus"][0]
        for gpu in (decoded, slim.report(event["object"])["status"]["gpus"][0]):
            assert gpu.uuid == raw and gpu.name == f"GPU 1 ({raw})"
            assert gpu.plain() == {"index": 1, "uuid": raw}
        assert gpu == decoded  # a heartbeat's GPUs compare equal to the cached ones
        assert (type(gpu.uid) is int) == (raw == nvml)
    assert sys.getsizeof(Gpu(uid=nvml).uid) < sys.getsizeof(nvml) / 2 and Gpu().uuid is None


def test_gpu_entries_that_do_not_fit_read_as_absent_fields() -> None:
    """A hostile or older agent's entry (wrong types, not an object) does not break the
    projection: a field of the wrong type reads as absent, a non-object entry is dropped."""
    report = {
        "metadata": {"name": "a"},
        "status": {"gpus": [{"index": "zero", "state": "lost", "migMode": "on"}, "junk"]},
    }
    decode = slim.event_decoder("NodeGPUReport")
    assert decode is not None
    event = decode(json.dumps({"type": "MODIFIED", "object": report}).encode())
    (gpu,) = slim.report(event["object"])["status"]["gpus"]
    assert (gpu.index, gpu.state, gpu.mig_mode) == (None, "lost", None)
    assert gpu.name == "GPU ?"


def test_conditions_that_read_the_same_are_kept_once_and_others_are_their_own() -> None:
    def with_condition(name: str, message: str) -> dict[str, Any]:
        cond = {"type": "NVMLReady", "status": "True", "reason": "Read", "message": message}
        return {"metadata": {"name": name}, "status": {"conditions": [cond]}}

    a = slim.report(with_condition("a", "NVML read 8 GPUs"))
    b = slim.report(with_condition("b", "NVML read 8 GPUs"))
    c = slim.report(with_condition("c", "NVML read 7 GPUs"))
    (ca,), (cb,), (cc,) = (r["status"]["conditions"] for r in (a, b, c))
    assert ca is cb and cc is not ca
    assert cc == {
        "type": "NVMLReady",
        "status": "True",
        "reason": "Read",
        "message": "NVML read 7 GPUs",
    }


_metas = st.fixed_dictionaries(
    {"name": st.sampled_from(["gpu-1", "gpu-2"]), "resourceVersion": st.sampled_from(["1", "2"])},
    optional={
        "uid": st.sampled_from(["u1", "u2"]),
        "creationTimestamp": st.sampled_from(["2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z"]),
        "deletionTimestamp": st.just("2026-12-03T00:00:00Z"),
        "labels": st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["1", "2"])),
        "annotations": st.dictionaries(
            st.sampled_from(["nvidia.com/x", "gitops-gpu.io/y", "other.io/z"]),
            st.sampled_from(["1", "2"]),
        ),
        "ownerReferences": st.lists(
            st.fixed_dictionaries(
                {"kind": st.just("Node"), "name": st.sampled_from(["gpu-1", "gpu-2"])},
                optional={"uid": st.sampled_from(["n1", "n2"]), "controller": st.booleans()},
            ),
            max_size=2,
        ),
    },
)


@settings(max_examples=500, deadline=None)
@given(before=_metas, after=_metas)
def test_a_report_heartbeat_is_told_from_a_metadata_change_as_projecting_would(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    """report_heartbeat compares the new metadata with the kept projection field by field; it
    must say "only the resourceVersion moved" exactly when the projections would."""
    status = {"observedAt": "2026-12-01T00:00:00Z", "driverVersion": "580.95.05"}
    old = slim.report({"metadata": before, "status": status})
    beat = {"metadata": after, "status": {**status, "observedAt": "2026-12-01T00:02:00Z"}}
    projected = slim.report(beat)
    same = {**projected["metadata"], "resourceVersion": None} == {
        **old["metadata"],
        "resourceVersion": None,
    }
    moved = slim.report_heartbeat(old, beat)
    assert (moved is not None) == same
    if moved is not None:
        assert moved == projected
