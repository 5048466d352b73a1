"""Device-plugin sharing configs in the fleet repo: compiled to one ConfigMap with a key per pool
and version, and checked against the plugin's own rules (GG080-GG084)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet import sharing
from gitops_gpu.fleet.compile import compile_checked
from gitops_gpu.fleet.loader import RepoLoadError, load_repo
from gitops_gpu.fleet.render import render_cluster, render_yaml
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.preflight import CODES, Finding, run_preflight

DP = names.DEVICE_PLUGIN_CONFIG_LABEL
H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
TWO = {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}}
TS4 = {
    "version": "v1",
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else render_yaml(data))
    return path


def _cluster(root: Path) -> Any:
    compiled, conflicts = compile_checked(load_repo(root), "c0ffee")
    assert conflicts == []
    return compiled.clusters["default"]


def check(root: Path) -> list[Finding]:
    return run_preflight(root, commit="c", today=datetime.date(2026, 11, 1)).findings


def only(findings: list[Finding], code: str) -> list[Finding]:
    got = [f for f in findings if f.code == code]
    assert got, f"no {code} in:\n" + "\n".join(f.text() for f in findings)
    for f in got:
        assert f.severity is CODES[code][0] and f.file and f.fix and f.line
    return got


def test_a_pools_own_config_is_a_key_of_the_one_configmap(tmp_path: Path) -> None:
    root = write_repo(tmp_path, TWO)
    _write(root / "nodepools/b/device-plugin.yaml", TS4)
    cluster = _cluster(root)
    (cm,) = cluster.config_maps
    assert cm["metadata"]["name"] == sharing.CONFIGMAP_NAME
    assert cm["metadata"]["namespace"] == "gpu-operator"
    (key,) = cm["data"]
    assert key.startswith("b-") and len(key) == len("b-") + 8
    assert "replicas: 4" in cm["data"][key]
    assert cluster.pools["b"].node_labels[DP] == key
    assert cluster.pools["b"].device_plugin_config == key
    assert cluster.pools["b"].device_plugin_file == "nodepools/b/device-plugin.yaml"
    assert DP not in cluster.pools["a"].node_labels  # the plugin's built-in config
    config = cluster.cluster_policy["spec"]["devicePlugin"]["config"]
    assert config == {"name": sharing.CONFIGMAP_NAME}
    assert f"configmap-{sharing.CONFIGMAP_NAME}.yaml" in render_cluster(cluster)
    assert check(root) == []


def test_a_change_is_a_new_key_and_a_comment_is_not(tmp_path: Path) -> None:
    root = write_repo(tmp_path, TWO)
    path = _write(root / "nodepools/b/device-plugin.yaml", TS4)
    before = _cluster(root).pools["b"].node_labels[DP]
    path.write_text("# four slices per GPU\n" + path.read_text())
    assert _cluster(root).pools["b"].node_labels[DP] == before
    path.write_text(path.read_text().replace("replicas: 4", "replicas: 8"))
    after = _cluster(root)
    assert after.pools["b"].node_labels[DP] != before
    assert list(after.config_maps[0]["data"]) == [after.pools["b"].node_labels[DP]]


def test_a_shared_config_gives_each_pool_its_own_key(tmp_path: Path) -> None:
    pools = {
        "a": {**H100, "devicePluginConfig": "ts4"},
        "b": {**H100, "nodeSelector": {"p": "b"}, "devicePluginConfig": "ts4"},
    }
    root = write_repo(tmp_path, pools)
    _write(root / "configs/device-plugin/ts4.yaml", TS4)
    cluster = _cluster(root)
    ka, kb = (cluster.pools[p].node_labels[DP] for p in ("a", "b"))
    assert ka.startswith("a-") and kb.startswith("b-")
    data = cluster.config_maps[0]["data"]
    assert data[ka] == data[kb]
    assert cluster.pools["a"].device_plugin_file == "configs/device-plugin/ts4.yaml"


def test_a_cluster_default_naming_a_repo_config_becomes_labels(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "", "default": "ts4"}
    root = write_repo(tmp_path, TWO, base=base, clusters=[{"name": "default"}])
    _write(root / "configs/device-plugin/ts4.yaml", TS4)
    fleet = (root / "fleet.yaml").read_text()
    (root / "fleet.yaml").write_text(
        fleet.replace("- name: default", "- name: default\n    operatorNamespace: nvidia-gpu")
    )
    cluster = _cluster(root)
    assert cluster.cluster_policy["spec"]["devicePlugin"]["config"] == {
        "name": sharing.CONFIGMAP_NAME
    }
    assert all(p.node_labels[DP].startswith(f"{n}-") for n, p in cluster.pools.items())
    assert cluster.config_maps[0]["metadata"]["namespace"] == "nvidia-gpu"


def test_a_key_that_exists_nowhere_is_an_error(tmp_path: Path) -> None:
    # the report: 'nvidia.com/device-plugin.config: a100-ts8' with no such key passed check
    root = write_repo(tmp_path, {"a": {**H100, "devicePluginConfig": "a100-ts8"}})
    (f,) = only(check(root), "GG082")
    assert f.file == "nodepools/a/pool.yaml" and f.field == "spec.devicePluginConfig"
    assert "no device-plugin ConfigMap is named" in f.message
    assert "configs/device-plugin/a100-ts8.yaml" in f.fix


def test_a_users_key_beside_repo_configs_is_an_error(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "my-configs"}
    pools = {"a": {**H100, "devicePluginConfig": "mine"}, "b": TWO["b"]}
    root = write_repo(tmp_path, pools, base=base)
    _write(root / "nodepools/b/device-plugin.yaml", TS4)
    (f,) = only(check(root), "GG082")
    assert f.pool == "a" and sharing.CONFIGMAP_NAME in f.message


def test_a_users_configmap_key_is_not_judged_offline(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "my-configs"}
    root = write_repo(tmp_path, {"a": {**H100, "devicePluginConfig": "mine"}}, base=base)
    assert not [f for f in check(root) if f.code == "GG082"]


def test_a_users_key_on_a_cluster_with_only_a_repo_mig_layout_is_still_the_users(
    tmp_path: Path,
) -> None:
    # the repo builds the MIG ConfigMap, not the device plugin's: the key is not judged offline
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "my-configs"}
    root = write_repo(tmp_path, {"a": {**H100, "devicePluginConfig": "mine"}}, base=base)
    layout = {
        "version": "v1",
        "mig-configs": {
            "m": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
        },
    }
    _write(root / "nodepools/a/mig-config.yaml", layout)
    assert not [f for f in check(root) if f.code == "GG082"]


def test_a_default_key_beside_repo_configs_is_an_error(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "", "default": "shared-default"}
    root = write_repo(tmp_path, TWO, base=base)
    _write(root / "nodepools/b/device-plugin.yaml", TS4)
    found = [f for f in only(check(root), "GG082") if f.field == "spec.devicePlugin.config.default"]
    (f,) = found
    assert "'shared-default' is in no fleet-repo config" in f.message
    assert "configs/device-plugin/shared-default.yaml" in f.fix


def test_configs_the_plugin_rejects(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {**H100, "devicePluginConfig": "bad"}})
    text = """version: v1
sharing:
  timeSlicing:
    renameByDefault: "yes"
    resources:
      - name: nvidia.com/gpu
        replicas: 1
      - name: nvidia.com/gpu
        replicas: 4
        devices: some
  timeslicing:
    resources: []
"""
    _write(root / "configs/device-plugin/bad.yaml", text)
    found = {(f.line, f.field): f.message for f in only(check(root), "GG080")}
    assert "true or false" in found[(4, "sharing.timeSlicing.renameByDefault")]
    assert ">= 2" in found[(7, "sharing.timeSlicing.resources[0].replicas")]
    assert "'all'" in found[(10, "sharing.timeSlicing.resources[1].devices")]
    assert "drops unknown keys silently" in found[(11, "sharing.timeslicing")]


def test_a_config_without_resources_or_version(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    _write(
        root / "nodepools/a/device-plugin.yaml",
        {"version": "v2", "sharing": {"mps": {"renameByDefault": True}}},
    )
    messages = {f.field: f.message for f in only(check(root), "GG080")}
    assert messages["version"] == "unknown version: 'v2'"
    assert "no resources specified" in messages["sharing.mps.resources"]


def test_an_unknown_flag_only_warns(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    doc = {**TS4, "flags": {"migStrategy": "none", "plugin": {"passDeviceSpec": True}}}
    _write(root / "nodepools/a/device-plugin.yaml", doc)
    (f,) = only(check(root), "GG081")
    assert f.field == "flags.plugin.passDeviceSpec"
    doc["flags"] = {"migStrategy": "hybrid"}
    _write(root / "nodepools/a/device-plugin.yaml", doc)
    (f,) = only(check(root), "GG080")
    assert "'hybrid'" in f.message and "none, single, mixed" in f.fix


def test_mps_on_a_mig_layout_and_mig_names_without_mixed(tmp_path: Path) -> None:
    pools = {
        "a": {**H100, "migConfig": "all-1g.10gb"},
        "b": {**H100, "nodeSelector": {"p": "b"}},
    }
    root = write_repo(tmp_path, pools)
    mps = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 4}]}}}
    _write(root / "nodepools/a/device-plugin.yaml", mps)
    mig = {
        "version": "v1",
        "sharing": {
            "timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}
        },
    }
    _write(root / "nodepools/b/device-plugin.yaml", mig)
    found = {f.pool: f for f in only(check(root), "GG083")}
    assert "refuses MPS for MIG devices" in found["a"].message
    assert found["a"].file == "nodepools/a/device-plugin.yaml" and found["a"].line == 1
    assert "strategy 'single'" in found["b"].message


def test_own_file_and_a_named_config_is_an_error(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {**H100, "devicePluginConfig": "ts4"}})
    _write(root / "configs/device-plugin/ts4.yaml", TS4)
    _write(root / "nodepools/a/device-plugin.yaml", TS4)
    (f,) = only(check(root), "GG084")
    assert f.field == "spec.devicePluginConfig"
    assert _cluster(root).pools["a"].device_plugin_file == "nodepools/a/device-plugin.yaml"


def test_a_config_name_must_be_a_label_value(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    _write(root / "configs/device-plugin/-bad.yaml", TS4)
    try:
        load_repo(root)
    except RepoLoadError as exc:
        (err,) = exc.errors
        assert err.file == "configs/device-plugin/-bad.yaml" and "label value" in err.message
    else:
        raise AssertionError("a config named '-bad' loaded")


def test_time_slicing_overlay_over_an_empty_base_compiles(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["devicePlugin"]["config"] = {"name": "", "default": ""}
    ts = {"devicePlugin": {"config": {"name": "time-slicing-config", "default": "any"}}}
    root = write_repo(tmp_path, TWO, base=base, overlays={"b": overlay(ts)})
    assert not [f for f in check(root) if f.severity == "error"]
