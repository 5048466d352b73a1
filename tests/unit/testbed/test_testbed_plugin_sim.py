"""The simulated host's device plugin: it advertises what its node's config key promises, from
the same ConfigMap the real operator mounts, and the fault plugin-stale keeps the old numbers."""

from __future__ import annotations

from typing import Any

from gitops_gpu_dev.testbed.plugin_sim import STALE_FAULT, Configs, node_step

TS4 = {
    "version": "v1",
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}
SHARED = {
    "version": "v1",
    "sharing": {
        "timeSlicing": {
            "renameByDefault": True,
            "resources": [{"name": "nvidia.com/gpu", "replicas": 2}],
        }
    },
}


def _node(key: str | None = None, **allocatable: str) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.count": "4"}
    if key:
        labels["nvidia.com/device-plugin.config"] = key
    return {
        "metadata": {"name": "n", "labels": labels},
        "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "4", **allocatable}},
    }


def test_the_labelled_key_sets_allocatable_and_gfd_labels() -> None:
    labels, status = node_step(_node("ts"), Configs(keys={"ts": TS4}), None)
    assert labels == {
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    assert status == {
        "status": {"capacity": {"nvidia.com/gpu": "16"}, "allocatable": {"nvidia.com/gpu": "16"}}
    }


def test_a_node_already_advertising_it_writes_nothing() -> None:
    node = _node("ts", **{"nvidia.com/gpu": "16"})
    node["metadata"]["labels"].update(
        {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    )
    assert node_step(node, Configs(keys={"ts": TS4}), None) == ({}, None)


def test_the_default_key_applies_to_unlabelled_nodes_and_rename_empties_the_plain_resource() -> (
    None
):
    _, status = node_step(_node(), Configs(default="shared", keys={"shared": SHARED}), None)
    assert status is not None
    assert status["status"]["allocatable"] == {"nvidia.com/gpu.shared": "8", "nvidia.com/gpu": "0"}


def test_a_missing_key_falls_back_to_whole_gpus() -> None:
    node = _node("gone", **{"nvidia.com/gpu": "16", "nvidia.com/gpu.shared": "8"})
    labels, status = node_step(node, Configs(keys={"ts": TS4}), None)
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert status is not None
    assert status["status"]["allocatable"] == {"nvidia.com/gpu": "4", "nvidia.com/gpu.shared": "0"}


def test_a_stale_plugin_keeps_what_it_advertised() -> None:
    assert node_step(_node("ts"), Configs(keys={"ts": TS4}), STALE_FAULT) == ({}, None)


MIX = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "3g.40gb": 1}}]
ONE = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]


def _mig_node(applied: str) -> dict[str, Any]:
    node = _node()
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = "8"
    node["metadata"]["annotations"] = {"sim.gitops-gpu.io/mig-config": applied}
    return node


def test_a_mig_layout_is_advertised_as_the_strategy_names_it() -> None:
    mixed = Configs(mig_layouts={"p-1": MIX}, mig_strategy="mixed")
    _, status = node_step(_mig_node("p-1"), mixed, None)
    assert status is not None and status["status"]["allocatable"] == {
        "nvidia.com/mig-1g.10gb": "16",
        "nvidia.com/mig-3g.40gb": "8",
        "nvidia.com/gpu": "0",
    }
    single = Configs(mig_layouts={"p-2": ONE}, mig_strategy="single")
    _, status = node_step(_mig_node("p-2"), single, None)
    assert status is not None and status["status"]["allocatable"] == {"nvidia.com/gpu": "56"}


def test_a_layout_not_in_the_configmap_leaves_whole_gpus() -> None:
    _, status = node_step(_mig_node("all-balanced"), Configs(mig_strategy="mixed"), None)
    assert status is not None and status["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
