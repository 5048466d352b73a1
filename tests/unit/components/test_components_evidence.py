"""Evidence values: pairing nodes with reports and pods, times, accessors, pod signals."""

from __future__ import annotations

from datetime import timedelta

from components_builders import NOW, healthy, node_obj, pod, pool

from gitops_gpu import timefmt
from gitops_gpu.components import evidence, ladder, signals
from gitops_gpu.components.health import Health


def test_assemble_pairs_reports_and_pods_by_node() -> None:
    nodes = [node_obj("b"), node_obj("a")]
    reports = [{"metadata": {"name": "a"}, "status": {"gpuCount": 8}}]
    pods = [pod(signals.APP_VALIDATOR, "a"), pod(signals.APP_GFD, "c"), {"spec": {}}]
    found = evidence.assemble(nodes, reports, pods, NOW)
    assert [e.name for e in found] == ["a", "b"]
    assert found[0].status == {"gpuCount": 8}
    assert [p["spec"]["nodeName"] for p in found[0].pods] == ["a"]
    assert found[1].report is None and found[1].pods == ()


def test_accessors() -> None:
    ev = healthy()
    assert ev.labels["nvidia.com/gpu.count"] == "8"
    assert ev.allocatable["nvidia.com/gpu"] == "8"
    assert ev.unschedulable is False
    assert ev.condition("Ready") is not None
    assert ev.report_age == 30.0
    assert ev.nvml_ready()
    assert len(ev.gpus) == 8


def test_parse_time() -> None:
    assert timefmt.parse("2026-11-29T12:00:00Z") == NOW
    assert timefmt.parse("2026-11-29T12:00:00") == NOW  # naive means UTC
    assert timefmt.parse("yesterday") is None
    assert timefmt.parse(None) is None
    assert timefmt.epoch("2026-11-29T12:00:00Z") == NOW.timestamp()
    assert timefmt.epoch("not a time") == 0.0


def test_selector_string_is_sorted() -> None:
    assert evidence.selector_string({"b": "2", "a": "1"}) == "a=1,b=2"


def test_new_node_without_nfd_labels_is_progressing() -> None:
    node = node_obj("fresh")
    for key in ("feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present"):
        del node["metadata"]["labels"][key]
    node["metadata"]["creationTimestamp"] = (NOW - timedelta(seconds=60)).isoformat()
    ev = evidence.NodeEvidence("fresh", node, None, (), NOW)
    verdict = ladder.walk(ev, pool())
    assert (verdict.failing.component, verdict.health) == ("nfd", Health.PROGRESSING)  # type: ignore[union-attr]


def test_pods_match_by_app_label_or_name_prefix() -> None:
    by_name = pod("x", "gpu-1")
    by_name["metadata"] = {"name": "nvidia-dcgm-exporter-abcde"}
    ev = evidence.NodeEvidence("gpu-1", node_obj("gpu-1"), None, (by_name,), NOW)
    assert signals.pods_for(ev, signals.APP_DCGM_EXPORTER) == [by_name]
    assert signals.pods_for(ev, signals.APP_DCGM) == []  # "nvidia-dcgm-" is not a prefix of it


def test_failed_pod_is_broken() -> None:
    failed = pod(signals.APP_VALIDATOR, "gpu-1")
    failed["status"] = {"phase": "Failed", "reason": "Evicted"}
    assert signals.pod_broken(failed) == "phase Failed (Evicted)"
