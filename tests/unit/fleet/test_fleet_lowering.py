"""Per-pool ClusterPolicy fields with a per-node mechanism compile to node labels, not GG020."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet.compile import compile_checked
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.lowering import considered
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.preflight import run_preflight

H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
TWO = {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}}
DP = names.DEVICE_PLUGIN_CONFIG_LABEL


def _compile(root: Path) -> Any:
    compiled, conflicts = compile_checked(load_repo(root), "c0ffee")
    return compiled, conflicts


def test_time_slicing_in_one_pool_is_a_label_and_one_configmap(tmp_path: Path) -> None:
    # the common pattern: one pool's overlay turns on time-slicing
    ts = {"devicePlugin": {"config": {"name": "time-slicing-config", "default": "any"}}}
    root = write_repo(tmp_path, TWO, overlays={"b": overlay(ts)})
    compiled, conflicts = _compile(root)
    assert conflicts == []
    cluster = compiled.clusters["default"]
    config = cluster.cluster_policy["spec"]["devicePlugin"]["config"]
    assert config == {"name": "time-slicing-config"}  # one ConfigMap, no cluster default
    assert cluster.pools["b"].node_labels[DP] == "any"
    assert cluster.pools["b"].device_plugin_config == "any"
    assert DP not in cluster.pools["a"].node_labels
    assert not [f for f in run_preflight(root).findings if f.code == "GG020"]


def test_time_slicing_over_an_empty_base_config_is_lowered(tmp_path: Path) -> None:
    # the shape users copy from OpenShift and Red Hat's GitOps catalog: the base names no
    # ConfigMap ("" is the operator's "none"), one pool's overlay turns time-slicing on
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "", "default": ""}
    ts = {"devicePlugin": {"config": {"name": "time-slicing-config", "default": "any"}}}
    root = write_repo(tmp_path, TWO, base=base, overlays={"b": overlay(ts)})
    compiled, conflicts = _compile(root)
    assert conflicts == []
    cluster = compiled.clusters["default"]
    assert cluster.cluster_policy["spec"]["devicePlugin"]["config"] == {
        "name": "time-slicing-config"
    }
    assert cluster.pools["b"].node_labels[DP] == "any"
    # "" selects no key: no label with an empty value, the plugin's built-in config applies
    assert DP not in cluster.pools["a"].node_labels
    assert not [f for f in run_preflight(root).findings if f.code == "GG020"]


def test_pools_agreeing_keep_the_cluster_default_and_no_labels(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "cm", "default": "x"}
    root = write_repo(tmp_path, TWO, base=base)
    compiled, _ = _compile(root)
    cluster = compiled.clusters["default"]
    assert cluster.cluster_policy["spec"]["devicePlugin"]["config"] == {
        "name": "cm",
        "default": "x",
    }
    assert all(DP not in p.node_labels for p in cluster.pools.values())


def test_two_configmap_names_stay_a_conflict_naming_the_mechanism(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        TWO,
        overlays={
            "a": overlay({"devicePlugin": {"config": {"name": "cm1", "default": "x"}}}),
            "b": overlay({"devicePlugin": {"config": {"name": "cm2", "default": "y"}}}),
        },
    )
    (f,) = [f for f in run_preflight(root).findings if f.code == "GG020"]
    assert f.field == "spec.devicePlugin.config.name"
    assert "considered nvidia.com/device-plugin.config" in f.message


def test_operand_off_in_one_pool_is_a_deploy_label(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        TWO,
        overlays={"b": overlay({"dcgmExporter": {"enabled": False}, "dcgm": {"enabled": True}})},
    )
    compiled, conflicts = _compile(root)
    assert conflicts == []
    cluster = compiled.clusters["default"]
    spec = cluster.cluster_policy["spec"]
    # dcgmExporter: on in a (base), off in b -> on in the ClusterPolicy, b's nodes opt out
    assert spec["dcgmExporter"]["enabled"] is True
    assert cluster.pools["b"].node_labels[names.DEPLOY_LABEL_PREFIX + "dcgm-exporter"] == "false"
    assert names.DEPLOY_LABEL_PREFIX + "dcgm-exporter" not in cluster.pools["a"].node_labels
    # dcgm: off in a (base), on in b -> on in the ClusterPolicy, a's nodes opt out
    assert spec["dcgm"]["enabled"] is True
    assert cluster.pools["a"].node_labels[names.DEPLOY_LABEL_PREFIX + "dcgm"] == "false"


def test_operand_default_counts_when_a_pool_does_not_say(tmp_path: Path) -> None:
    # nodeStatusExporter is off unless enabled (IsEnabled() default false): a pool that says
    # nothing keeps it off through its label when another pool turns it on
    base = minimal_base()
    del base["spec"]["nodeStatusExporter"]
    root = write_repo(
        tmp_path, TWO, base=base, overlays={"b": overlay({"nodeStatusExporter": {"enabled": True}})}
    )
    compiled, conflicts = _compile(root)
    assert conflicts == []
    cluster = compiled.clusters["default"]
    assert cluster.cluster_policy["spec"]["nodeStatusExporter"]["enabled"] is True
    label = names.DEPLOY_LABEL_PREFIX + "node-status-exporter"
    assert cluster.pools["a"].node_labels[label] == "false"
    assert label not in cluster.pools["b"].node_labels


def test_mig_manager_default_per_pool_is_the_mig_config_label(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        TWO,
        overlays={
            "a": overlay({"migManager": {"config": {"default": "all-disabled"}}}),
            "b": overlay({"migManager": {"config": {"default": "all-1g.10gb"}}}),
        },
    )
    compiled, conflicts = _compile(root)
    assert conflicts == []
    cluster = compiled.clusters["default"]
    assert "config" not in (cluster.cluster_policy["spec"].get("migManager") or {})
    assert cluster.pools["a"].node_labels[names.MIG_CONFIG_LABEL] == "all-disabled"
    assert cluster.pools["b"].mig_config == "all-1g.10gb"


def test_pool_yaml_wins_over_a_lowered_value(tmp_path: Path) -> None:
    pools = {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}, "devicePluginConfig": "k2"}}
    ts = {"devicePlugin": {"config": {"name": "cm", "default": "k1"}}}
    root = write_repo(tmp_path, pools, overlays={"b": overlay(ts)})
    compiled, _ = _compile(root)
    assert compiled.clusters["default"].pools["b"].node_labels[DP] == "k2"


def test_workload_default_per_pool(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        TWO,
        overlays={"b": overlay({"sandboxWorkloads": {"defaultWorkload": "vm-passthrough"}})},
    )
    compiled, conflicts = _compile(root)
    assert conflicts == []
    pools = compiled.clusters["default"].pools
    assert pools["b"].node_labels[names.WORKLOAD_CONFIG_LABEL] == "vm-passthrough"


def test_fields_without_a_mechanism_say_so() -> None:
    assert "no per-node mechanism" in considered(("toolkit", "version"))
    assert "nvidia.com/cc.mode" in considered(("ccManager", "defaultMode"))
    assert "mig.strategy" in considered(("mig", "strategy"))
