"""Pure diff: normalisation, field paths, node-label ownership, batch sizing."""

from __future__ import annotations

from typing import Any

import pytest

from gitops_gpu import names, timefmt
from gitops_gpu.fleet import budget
from gitops_gpu.sync import diff, labels


def _obj(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "p", **meta},
        "spec": spec,
    }


def test_volatile_metadata_status_and_provenance_are_not_drift() -> None:
    live = _obj(
        {"version": "1"},
        resourceVersion="7",
        uid="u",
        managedFields=[{}],
        generation=3,
        annotations={names.COMMIT_ANNOTATION: "old"},
    )
    live["status"] = {"state": "ready"}
    manifest = _obj({"version": "1"}, annotations={names.COMMIT_ANNOTATION: "new"})
    result = diff.diff_object(manifest, manifest, live, "p")
    assert result.action is diff.Action.UNCHANGED
    assert result.stale_commit  # same content, another commit: written once on adoption


def test_field_level_changes_name_path_live_and_desired() -> None:
    live = _obj({"version": "570.86.10", "upgradePolicy": {"autoUpgrade": True}})
    dry = _obj({"version": "580.126.20", "upgradePolicy": {}})
    result = diff.diff_object(dry, dry, live, "p")
    assert result.action is diff.Action.CONFIGURED
    assert ("spec.version", "570.86.10", "580.126.20") in result.changes
    assert ("spec.upgradePolicy.autoUpgrade", True, None) in result.changes


def test_missing_live_object_is_created() -> None:
    dry = _obj({"version": "1"})
    assert diff.diff_object(dry, dry, None, "p").action is diff.Action.CREATED


def test_node_labels_never_remove_keys_we_did_not_set() -> None:
    node = {
        "metadata": {
            "name": "n1",
            "labels": {"team": "ml", names.MIG_CONFIG_LABEL: "all-1g.10gb", "stale": "x"},
            "annotations": {names.MANAGED_LABELS_ANNOTATION: f"{names.MIG_CONFIG_LABEL},stale"},
        }
    }
    d = diff.diff_node_labels(node, {names.MIG_CONFIG_LABEL: "all-balanced"}, "p")
    assert d.set == {names.MIG_CONFIG_LABEL: "all-balanced"}
    assert d.remove == ("stale",)  # ours before, not wanted now
    assert "team" not in d.remove
    patch = labels.label_patch(d, "c0ffee")
    assert patch["metadata"]["labels"] == {names.MIG_CONFIG_LABEL: "all-balanced", "stale": None}
    assert (
        patch["metadata"]["annotations"][names.MANAGED_LABELS_ANNOTATION] == names.MIG_CONFIG_LABEL
    )
    assert patch["metadata"]["annotations"][names.COMMIT_ANNOTATION] == "c0ffee"


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [("25%", 20, 5), ("25%", 3, 1), ("10%", 21, 3), (2, 50, 2), (0, 5, 1)],
)
def test_max_unavailable_rounds_up(value: int | str, total: int, expected: int) -> None:
    assert budget.resolve_max_unavailable(value, total) == expected


def _node(name: str, *, busy: bool = False) -> dict[str, Any]:
    lab = {names.MIG_CONFIG_STATE_LABEL: "pending"} if busy else {}
    return {
        "metadata": {"name": name, "labels": lab},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_batch_counts_busy_nodes_against_max_unavailable() -> None:
    nodes = [_node(f"n{i:02d}", busy=i < 2) for i in range(20)]
    diffs = [diff.diff_node_labels(n, {"x": "1"}, "p") for n in nodes]
    batch = labels.next_batch(diffs, nodes, "25%")
    assert len(batch) == 3  # 5 allowed, 2 already reconfiguring
    assert [d.node for d in batch] == ["n00", "n01", "n02"]
    assert labels.next_batch(diffs, [_node(f"b{i}", busy=True) for i in range(20)], 5) == []


def _on_driver(name: str, version: str, state: str = "upgrade-done") -> dict[str, Any]:
    node = _node(name)
    node["metadata"]["labels"].update(
        {names.DRIVER_VERSION_LABEL: version, names.UPGRADE_STATE_LABEL: state}
    )
    return node


def test_a_mig_change_waits_until_the_node_runs_the_pools_driver() -> None:
    nodes = [
        _on_driver("old", "570.195.03"),
        _on_driver("upgrading", "570.195.03", "pod-restart-required"),
        _on_driver("done", "580.126.20"),
    ]
    mig = {names.MIG_CONFIG_LABEL: "all-1g.10gb"}
    diffs = [diff.diff_node_labels(n, mig, "p") for n in nodes]
    batch = labels.next_batch(diffs, nodes, 3, "580.126.20")
    assert [d.node for d in batch] == ["done"]  # driver first: the others keep their layout
    # a pool whose driver does not change relabels at once; other labels never wait
    assert [d.node for d in labels.next_batch(diffs[:1], nodes[:1], 3, "570.195.03")] == ["old"]
    plugin = [diff.diff_node_labels(n, {names.DEVICE_PLUGIN_CONFIG_LABEL: "k"}, "p") for n in nodes]
    assert len(labels.next_batch(plugin, nodes, 3, "580.126.20")) == 3


def test_a_mig_or_sharing_relabel_is_stamped_and_bookkeeping_is_not() -> None:
    node = _node("n")
    mig = labels.label_patch(diff.diff_node_labels(node, {names.MIG_CONFIG_LABEL: "x"}, "p"), "c")
    assert timefmt.parse(mig["metadata"]["annotations"][names.RELABELLED_ANNOTATION]) is not None
    gentle = labels.label_patch(diff.diff_node_labels(node, {}, "p"), "c")
    assert names.RELABELLED_ANNOTATION not in gentle["metadata"]["annotations"]
