"""Node heartbeats told from the watch line's bytes: a line that moved only its times and
resourceVersion is not decoded; any other change to a Node is (and reaches the cache)."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gitops_gpu.sync import line_beats, slim
from gitops_gpu.sync.live import Informer

T0, T1 = "2026-12-07T10:00:00Z", "2026-12-07T10:10:00.123456Z"


def _node(name: str = "gpu-a", rv: int = 10, beat: str = T0) -> dict[str, Any]:
    """A Node as the apiserver writes it (field order included), kwok's status and all."""
    conditions = [
        {
            "type": t,
            "status": "True" if t == "Ready" else "False",
            "reason": "KubeletReady" if t == "Ready" else "Fine",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": beat,
            "lastTransitionTime": T0,
        }
        for t in ("Ready", "MemoryPressure", "DiskPressure")
    ]
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": "3c1d2f7e-0000-4000-8000-000000000001",
            "resourceVersion": str(rv),
            "creationTimestamp": T0,
            "labels": {"kubernetes.io/hostname": name, "pool": "a", "time": "x"},
            "annotations": {"kwok.x-k8s.io/node": "fake", "gitops-gpu.io/commit": "c0ffee"},
            "managedFields": [
                {"manager": "kwok", "operation": "Update", "apiVersion": "v1", "time": beat}
            ],
        },
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": conditions},
    }


def _line(obj: dict[str, Any], kind: str = "MODIFIED") -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


class _Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.parse = slim.event_decoder("Node")

    def __call__(self, line: bytes) -> Any:
        self.calls += 1
        assert self.parse is not None
        return self.parse(line)


def _informer(*objs: dict[str, Any]) -> tuple[Informer, Any, _Counting]:
    inf = Informer(None, kind="Node")  # type: ignore[arg-type]  # fed lines, never started
    assert inf.line_beats is not None
    parse = _Counting()
    decode = inf.line_beats.decoder(parse)
    for obj in objs:
        inf._apply_event(decode(_line(obj, "ADDED")), "1")
    return inf, decode, parse


def test_a_status_heartbeat_is_answered_without_decoding_and_changes_nothing() -> None:
    inf, decode, parse = _informer(_node())
    version, cached, calls = inf.version, inf._items["gpu-a"], parse.calls
    event = decode(_line(_node(rv=11, beat=T1)))
    assert event["type"] == line_beats.BEAT and parse.calls == calls
    assert inf._apply_event(event, "10") == "11"  # the watch resumes from the new version
    assert inf.version == version and inf._items["gpu-a"] is cached
    assert inf.events == 2 and inf.line_beats is not None and inf.line_beats.beats == 1


def _changed(path: str) -> dict[str, Any]:
    obj = _node(rv=11, beat=T1)
    meta, status = obj["metadata"], obj["status"]
    edits = {
        "label": lambda: meta["labels"].update(pool="b"),
        "label named time": lambda: meta["labels"].update(time="y"),
        "our annotation": lambda: meta["annotations"].update({"gitops-gpu.io/commit": "beef"}),
        "unschedulable": lambda: obj["spec"].update(unschedulable=True),
        "ready": lambda: status["conditions"][0].update(status="False"),
        "ready since": lambda: status["conditions"][0].update(lastTransitionTime=T1),
        "allocatable": lambda: status["allocatable"].update({"nvidia.com/gpu": "7"}),
    }
    edits[path]()
    return obj


def test_every_fact_a_projection_reads_is_decoded_and_reaches_the_cache() -> None:
    for path in (
        "label",
        "label named time",
        "our annotation",
        "unschedulable",
        "ready",
        "ready since",
        "allocatable",
    ):
        inf, decode, parse = _informer(_node())
        calls, version = parse.calls, inf.version
        event = decode(_line(_changed(path)))
        assert event["type"] == "MODIFIED" and parse.calls == calls + 1, path
        inf._apply_event(event, "10")
        assert inf.version == version + 1, path
        assert slim.same_facts(inf._items["gpu-a"], slim.node(_changed(path))), path


def test_a_heartbeat_after_a_change_compares_with_the_change_not_the_first_line() -> None:
    inf, decode, _parse = _informer(_node())
    inf._apply_event(decode(_line(_changed("label"))), "10")
    back = _node(rv=12, beat=T1)  # the label back as it first was: a change, not a beat
    event = decode(_line(back))
    assert event["type"] == "MODIFIED"
    inf._apply_event(event, "11")
    assert inf._items["gpu-a"]["metadata"]["labels"]["pool"] == "a"


def test_a_deleted_and_recreated_node_and_a_relist_are_decoded_again() -> None:
    inf, decode, _parse = _informer(_node())
    gone = decode(_line(_node(rv=11), "DELETED"))
    assert gone["type"] == "DELETED"
    inf._apply_event(gone, "10")
    again = decode(_line(_node(rv=12), "ADDED"))  # the same bytes, a new life
    assert again["type"] == "ADDED"
    inf._apply_event(again, "11")
    assert decode(_line(_node(rv=13, beat=T1)))["type"] == line_beats.BEAT
    inf._items = {"gpu-a": slim.node(_node(rv=13))}  # a re-list: the cache may have moved
    assert decode(_line(_node(rv=14, beat=T0)))["type"] == "MODIFIED"


def test_lines_of_another_shape_are_always_decoded() -> None:
    _inf, decode, _parse = _informer(_node())
    spaced = json.dumps({"type": "MODIFIED", "object": _node(rv=11, beat=T1)}).encode()
    assert decode(spaced)["type"] == "MODIFIED"
    assert line_beats.fingerprint(spaced) is None
    reordered = {"apiVersion": "v1", **_node(rv=11, beat=T1)}
    assert line_beats.fingerprint(_line(reordered)) is None
    assert line_beats.fingerprint(_line(_node(), "DELETED")) is None


_LABEL = st.text("abcxyz-.", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    labels=st.dictionaries(st.sampled_from(["time", "pool", "zone", "lastHeartbeatTime"]), _LABEL),
    annotations=st.dictionaries(
        st.sampled_from(["time", "gitops-gpu.io/time", "nvidia.com/x", "other"]),
        st.sampled_from([T0, T1, "v", ""]),
    ),
    ready=st.sampled_from(["True", "False"]),
    since=st.sampled_from([T0, T1]),
    gpus=st.sampled_from(["8", "7"]),
)
def test_a_line_is_taken_for_a_heartbeat_only_when_its_projection_is_unchanged(
    labels: dict[str, str],
    annotations: dict[str, str],
    ready: str,
    since: str,
    gpus: str,
) -> None:
    first = _node()
    second = copy.deepcopy(_node(rv=11, beat=T1))
    second["metadata"]["labels"].update(labels)
    second["metadata"]["annotations"].update(annotations)
    second["status"]["conditions"][0].update(status=ready, lastTransitionTime=since)
    second["status"]["allocatable"]["nvidia.com/gpu"] = gpus
    a, b = line_beats.fingerprint(_line(first)), line_beats.fingerprint(_line(second))
    assert a is not None and b is not None
    was = first["metadata"]
    unchanged = (
        labels.items() <= was["labels"].items()
        and annotations.items() <= was["annotations"].items()
        and (ready, since, gpus) == ("True", T0, "8")
    )
    if unchanged:  # a heartbeat: known without decoding
        assert a[2] == b[2]
    if a[2] == b[2]:  # never a change taken for one
        assert slim.same_facts(slim.node(first), slim.node(second))
