"""compile_fleet: one ClusterPolicy per cluster, one NVIDIADriver per pool, node labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.errors import FleetError
from gitops_gpu.fleet.compile import compile_checked, compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.fleet.sharing_promise import SharingPromise
from gitops_gpu_dev import paths

EXAMPLE = paths.fleet_example()


@pytest.fixture(scope="module")
def example() -> Any:
    return compile_fleet(load_repo(EXAMPLE), "c0ffee")


def test_one_cluster_policy_with_driver_crd(example: Any) -> None:
    (cluster,) = example.clusters.values()
    cp = cluster.cluster_policy
    assert (cp["apiVersion"], cp["kind"]) == names.CLUSTER_POLICY_API
    assert cp["metadata"]["name"] == names.CLUSTER_POLICY_NAME
    assert cp["spec"]["driver"]["useNvidiaDriverCRD"] is True
    # per-pool driver fields live in the NVIDIADrivers, not in the ClusterPolicy
    assert "version" not in cp["spec"]["driver"] and "gdrcopy" not in cp["spec"]
    assert cp["metadata"]["labels"][names.MANAGED_BY_LABEL] == names.MANAGED_BY_VALUE
    ann = cp["metadata"]["annotations"]
    assert ann[names.COMMIT_ANNOTATION] == "c0ffee"
    assert ann[names.POOL_ANNOTATION] == "canary,infer-l40s,train-b200,train-h100"
    assert ann[names.STAGE_ANNOTATION] == "canary"


def test_one_driver_per_pool(example: Any) -> None:
    for pool in ("canary", "train-h100", "infer-l40s", "train-b200"):
        target = example.pool(pool)
        drv = target.driver
        assert (drv["apiVersion"], drv["kind"]) == names.NVIDIA_DRIVER_API
        assert drv["metadata"]["name"] == pool
        assert drv["spec"]["nodeSelector"] == dict(target.node_selector)
        assert drv["spec"]["default"] is False and drv["spec"]["driverType"] == "gpu"
        assert drv["metadata"]["annotations"] == {
            names.COMMIT_ANNOTATION: "c0ffee",
            names.POOL_ANNOTATION: pool,
            names.STAGE_ANNOTATION: example.stage_of(pool).name,
        }
        assert drv["metadata"]["labels"] == {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}
        assert target.driver_version == "580.126.20" == drv["spec"]["version"]
        assert target.stage == example.stage_of(pool).name


def test_per_pool_driver_fields(example: Any) -> None:
    b200 = example.pool("train-b200").driver["spec"]
    h100 = example.pool("train-h100").driver["spec"]
    assert b200["kernelModuleType"] == "open" and b200["gdrcopy"]["enabled"] is True
    assert h100["kernelModuleType"] == "auto" and h100["gdrcopy"]["enabled"] is False
    assert h100["rdma"] == {"enabled": True, "useHostMofed": True}
    assert h100["upgradePolicy"]["waitForCompletion"]["timeoutSeconds"] == 14400
    # ClusterPolicy-shaped names become NVIDIADriver names (the operator's Helm chart does so)
    assert b200["repoConfig"] == {"name": ""} and b200["virtualTopologyConfig"] == {"name": ""}
    assert b200["tolerations"][0]["key"] == "nvidia.com/gpu"  # from daemonsets
    # pool.yaml's disruption budget bounds the operator's upgrade too
    assert b200["upgradePolicy"]["maxUnavailable"] == 1
    assert example.pool("infer-l40s").driver["spec"]["upgradePolicy"]["maxUnavailable"] == "25%"


def test_cluster_policy_keeps_only_agreed_upgrade_settings(example: Any) -> None:
    up = example.clusters["default"].cluster_policy["spec"]["driver"]["upgradePolicy"]
    assert up["autoUpgrade"] is True and up["maxParallelUpgrades"] == 1
    assert "waitForCompletion" not in up  # train-h100 differs from the rest


def test_node_labels(example: Any) -> None:
    h100 = example.pool("train-h100")
    layout = h100.node_labels[names.MIG_CONFIG_LABEL]  # configs/mig/h100-train-mix.yaml
    assert h100.node_labels == {names.POOL_LABEL: "train-h100", names.MIG_CONFIG_LABEL: layout}
    assert layout.startswith("train-h100-") and h100.mig_enabled is True
    assert h100.mig_resources == {  # mig.strategy mixed in the base ClusterPolicy
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }
    assert example.pool("canary").node_labels[names.MIG_CONFIG_LABEL] == "all-disabled"
    labels = example.pool("infer-l40s").node_labels
    key = labels[names.DEVICE_PLUGIN_CONFIG_LABEL]
    assert labels == {names.POOL_LABEL: "infer-l40s", names.DEVICE_PLUGIN_CONFIG_LABEL: key}
    # configs/device-plugin/l40s-time-sliced-4.yaml, under the pool's versioned key
    cm, _mig = example.clusters["default"].config_maps
    assert key.startswith("infer-l40s-") and set(cm["data"]) == {key}
    assert "replicas: 4" in cm["data"][key]
    promised = example.pool("infer-l40s").device_plugin_promise
    assert promised == SharingPromise("time-slicing", "nvidia.com/gpu", 4)
    assert example.pool("train-h100").device_plugin_promise is None
    policy = example.clusters["default"].cluster_policy["spec"]["devicePlugin"]
    assert policy["config"] == {"name": cm["metadata"]["name"]}


def test_workload_and_disabled_components(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {"vm": {"workload": "vm-passthrough", "disabledComponents": ["dcgm-exporter", "driver"]}},
    )
    target = compile_fleet(load_repo(root), "x").pool("vm")
    assert target.node_labels == {
        names.POOL_LABEL: "vm",
        names.WORKLOAD_CONFIG_LABEL: "vm-passthrough",
        names.DEPLOY_LABEL_PREFIX + "dcgm-exporter": "false",
        names.DEPLOY_LABEL_PREFIX + "driver": "false",
    }


def test_driver_type_from_pool_yaml(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"v": {"driverType": "vgpu"}})
    assert compile_fleet(load_repo(root), "x").pool("v").driver["spec"]["driverType"] == "vgpu"


def test_unavailable_nodes_from_pool_yaml(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {"unavailableNodes": "wait"}, "b": {}})
    compiled = compile_fleet(load_repo(root), "x")
    assert compiled.pool("a").unavailable_nodes == "wait"
    assert compiled.pool("b").unavailable_nodes == "skip"  # the default
    assert "unavailableNodes" not in compiled.pool("a").driver["spec"]  # ours, not the CR's


def test_verify_new_nodes_makes_the_operands_tolerate_the_unverified_taint(tmp_path: Path) -> None:
    tolerates = {"key": names.UNVERIFIED_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    root = write_repo(tmp_path, {"a": {"verifyNewNodes": True}, "b": {}})
    compiled = compile_fleet(load_repo(root), "x")
    assert compiled.pool("a").verify_new_nodes and not compiled.pool("b").verify_new_nodes
    assert tolerates in compiled.pool("a").driver["spec"]["tolerations"]
    assert tolerates not in compiled.pool("b").driver["spec"].get("tolerations", [])
    # The cluster's operand DaemonSets reach every pool's unverified nodes: one list, once.
    cp = compiled.clusters["default"].cluster_policy["spec"]["daemonsets"]["tolerations"]
    assert cp.count(tolerates) == 1
    off = compile_fleet(load_repo(write_repo(tmp_path / "off", {"a": {}, "b": {}})), "x")
    spec = off.clusters["default"].cluster_policy["spec"]["daemonsets"]
    assert tolerates not in spec.get("tolerations", [])


def test_cluster_field_disagreement(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {"a": {}, "b": {"nodeSelector": {"p": "b"}}},
        overlays={"b": overlay({"toolkit": {"version": "v9"}})},
    )
    repo = load_repo(root)
    _, conflicts = compile_checked(repo, "x")
    assert [(c.cluster, c.path) for c in conflicts] == [("default", ("spec", "toolkit", "version"))]
    with pytest.raises(FleetError) as info:
        compile_fleet(repo, "x")
    assert info.value.file == "nodepools/b/clusterpolicy.yaml" and info.value.line == 7
    assert "spec.toolkit.version" in str(info.value)


def test_per_pool_fields_may_differ(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {"a": {}, "b": {"nodeSelector": {"p": "b"}}},
        overlays={
            "b": overlay(
                {
                    "driver": {
                        "version": "570.195.03",
                        "upgradePolicy": {"maxParallelUpgrades": 3},
                    },
                    "gds": {"enabled": True},
                }
            )
        },
    )
    compiled, conflicts = compile_checked(load_repo(root), "x")
    assert conflicts == []
    assert compiled.pool("b").driver_version == "570.195.03"
    assert compiled.pool("a").driver_version == "580.126.20"
    assert compiled.pool("b").driver["spec"]["gds"] == {"enabled": True}
    cp_up = compiled.clusters["default"].cluster_policy["spec"]["driver"]["upgradePolicy"]
    assert cp_up == {"autoUpgrade": True}


def test_clusters_are_compiled_separately(tmp_path: Path) -> None:
    clusters = [{"name": "east", "context": "ctx-east"}, {"name": "west"}, {"name": "empty"}]
    root = write_repo(
        tmp_path,
        {"a": {"cluster": "east"}, "b": {"cluster": "west"}},
        clusters=clusters,
        overlays={"b": overlay({"toolkit": {"version": "v9"}})},
    )
    compiled = compile_fleet(load_repo(root), "x")  # no conflict: different clusters
    assert sorted(compiled.clusters) == ["east", "west"]
    assert compiled.clusters["east"].context == "ctx-east"
    assert compiled.clusters["west"].context is None
    assert list(compiled.clusters["west"].pools) == ["b"]


def test_stages_and_gates(tmp_path: Path) -> None:
    stages = [
        {
            "name": "one",
            "pools": ["a"],
            "gate": {"soak": "10m", "maxUnhealthyNodes": 2, "timeout": "1h"},
        },
        {"name": "two", "pools": ["b"], "gate": {"approval": "required"}, "onFailure": "rollback"},
    ]
    root = write_repo(tmp_path, {"a": {}, "b": {"nodeSelector": {"p": "b"}}}, stages=stages)
    compiled = compile_fleet(load_repo(root), "x")
    one, two = compiled.stages
    assert (one.gate.soak_seconds, one.gate.max_unhealthy_nodes, one.gate.timeout_seconds) == (
        600.0,
        2,
        3600.0,
    )
    assert two.gate.approval_required and two.on_failure == "rollback"
    assert (
        compiled.clusters["default"].cluster_policy["metadata"]["annotations"][
            names.STAGE_ANNOTATION
        ]
        == "one"
    )


def test_compile_does_not_mutate_the_repo(tmp_path: Path) -> None:
    base = minimal_base()
    root = write_repo(tmp_path, {"a": {}}, base=base)
    repo = load_repo(root)
    before = repo.merged_policy("a")
    compile_fleet(repo, "x")
    assert repo.merged_policy("a") == before


def _scribble(data: Any) -> None:
    """Change every map and list inside ``data`` in place."""
    if isinstance(data, dict):
        for value in list(data.values()):
            _scribble(value)
        data["scribbled"] = True
    elif isinstance(data, list):
        for value in data:
            _scribble(value)
        data.append("scribbled")


def test_compiled_objects_share_no_map_with_the_repo_or_each_other() -> None:
    # the compiler reads each pool through views that share the base's maps (fast at 2,000
    # pools); what it hands out must still be the caller's own to change
    repo = load_repo(paths.fleet_example())
    fresh = compile_fleet(load_repo(paths.fleet_example()), "x")
    compiled = compile_fleet(repo, "x")
    views = {p: repr(repo.policy_view(p)) for p in repo.pools}
    for cluster in compiled.clusters.values():
        _scribble(cluster.cluster_policy)
        for target in cluster.pools.values():
            _scribble(target.driver)
    assert {p: repr(repo.policy_view(p)) for p in repo.pools} == views
    assert compile_fleet(repo, "x") == fresh
