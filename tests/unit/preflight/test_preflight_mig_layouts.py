"""Custom MIG layouts in the fleet repo: compiled to one mig-parted ConfigMap with a layout per
pool and version, and checked against mig-parted's format and the pool's GPUs (GG034,
GG085-GG087)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu import names
from gitops_gpu.fleet import mig_layouts
from gitops_gpu.fleet.compile import compile_checked
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.render import render_cluster, render_yaml
from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu.preflight import CODES, Finding, run_preflight

MIG = names.MIG_CONFIG_LABEL
H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
TWO = {"a": {**H100, "migConfig": "all-disabled"}, "b": {**H100, "nodeSelector": {"p": "b"}}}


def layout(mig: dict[str, int] | None = None, **entry: Any) -> dict[str, Any]:
    body = {"devices": "all", "mig-enabled": True, "mig-devices": mig or {"1g.10gb": 7}}
    return {"version": "v1", "mig-configs": {"mine": [{**body, **entry}]}}


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


def test_a_pools_own_layout_is_a_versioned_layout_of_the_one_configmap(tmp_path: Path) -> None:
    root = write_repo(tmp_path, TWO)
    _write(root / "nodepools/b/mig-config.yaml", layout())
    cluster = _cluster(root)
    (cm,) = cluster.config_maps
    assert cm["metadata"] == {
        "name": mig_layouts.CONFIGMAP_NAME,
        "namespace": "gpu-operator",
        "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
    }
    configs = mig_layouts.parse(cm["data"]["config.yaml"])
    key = cluster.pools["b"].node_labels[MIG]
    assert key.startswith("b-") and set(configs) == {"all-disabled", key}
    assert configs[key] == [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    assert cluster.pools["b"].mig_config == key and cluster.pools["b"].mig_enabled is True
    assert cluster.pools["b"].mig_layout_file == "nodepools/b/mig-config.yaml"
    assert cluster.pools["a"].node_labels[MIG] == "all-disabled"
    assert cluster.cluster_policy["spec"]["migManager"]["config"] == {
        "name": mig_layouts.CONFIGMAP_NAME,
        "default": "all-disabled",
    }
    assert f"configmap-{mig_layouts.CONFIGMAP_NAME}.yaml" in render_cluster(cluster)
    assert [f for f in check(root) if f.severity.value == "error"] == []


def test_a_shared_layout_is_named_and_a_change_is_a_new_layout(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {**TWO, "b": {**TWO["b"], "migConfig": "h100-mix"}})
    path = _write(root / "configs/mig/h100-mix.yaml", layout({"1g.10gb": 2, "2g.20gb": 1}))
    before = _cluster(root).pools["b"].node_labels[MIG]
    path.write_text("# two small, one medium\n" + path.read_text())
    assert _cluster(root).pools["b"].node_labels[MIG] == before
    path.write_text(path.read_text().replace("2g.20gb: 1", "3g.40gb: 1"))
    after = _cluster(root).pools["b"].node_labels[MIG]
    assert after != before and after.startswith("b-")
    configs = mig_layouts.parse(_cluster(root).config_maps[0]["data"]["config.yaml"])
    assert set(configs) == {"all-disabled", after}


def test_a_layout_off_for_every_gpu_is_judged_as_mig_off(tmp_path: Path) -> None:
    root = write_repo(tmp_path, TWO)
    off = {"version": "v1", "mig-configs": {"off": [{"devices": "all", "mig-enabled": False}]}}
    _write(root / "nodepools/b/mig-config.yaml", off)
    assert _cluster(root).pools["b"].mig_enabled is False


@pytest.mark.parametrize(
    ("data", "field", "needle"),
    [
        (
            {"version": "v2", "mig-configs": layout()["mig-configs"]},
            "version",
            "version must be v1",
        ),
        (
            {"version": "v1", "mig-configs": {**layout()["mig-configs"], "other": []}},
            "mig-configs",
            "exactly one layout",
        ),
        (layout(migEnabled=True), "mig-configs.mine[0].migEnabled", "unknown key 'migEnabled'"),
        (
            layout(**{"mig-enabled": "yes"}),
            "mig-configs.mine[0].mig-enabled",
            "required",
        ),
        (layout(**{"devices": [0, "one"]}), "mig-configs.mine[0].devices", "GPU indices"),
        (layout(**{"mig-devices": {"1g.10gb": -1}}), "mig-configs.mine[0].mig-devices", "a count"),
        (layout(**{"mig-enabled": False}), "mig-configs.mine[0].mig-devices", "no MIG device"),
        (layout(**{"device-filter": "H100"}), "mig-configs.mine[0].device-filter", "PCI device ID"),
    ],
)
def test_gg085_a_layout_mig_parted_would_reject(
    tmp_path: Path, data: dict[str, Any], field: str, needle: str
) -> None:
    root = write_repo(tmp_path, TWO)
    _write(root / "nodepools/b/mig-config.yaml", data)
    (found,) = only(check(root), "GG085")
    assert found.field == field and needle in found.message
    assert found.file == "nodepools/b/mig-config.yaml"


def test_gg085_a_pool_with_its_own_layout_that_names_another(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {**TWO, "b": {**TWO["b"], "migConfig": "all-balanced"}})
    _write(root / "nodepools/b/mig-config.yaml", layout())
    (found,) = only(check(root), "GG085")
    assert found.field == "spec.migConfig" and found.file == "nodepools/b/pool.yaml"


def test_gg034_a_profile_the_gpu_does_not_have_and_too_many_slices(tmp_path: Path) -> None:
    root = write_repo(tmp_path, TWO)
    _write(root / "nodepools/b/mig-config.yaml", layout({"1g.12gb": 1, "3g.40gb": 2, "2g.20gb": 1}))
    got = only(check(root), "GG034")
    text = " | ".join(f.message for f in got)
    assert "MIG profile '1g.12gb' does not exist on H100-80GB" in text
    assert "needs 8 compute slices per GPU, a H100-80GB has 7" in text
    assert {f.file for f in got} == {"nodepools/b/mig-config.yaml"}


def test_gg034_mig_on_a_gpu_without_mig(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path, {**TWO, "b": {"gpu": {"product": "NVIDIA-L40S"}, "nodeSelector": {"p": "b"}}}
    )
    _write(root / "nodepools/b/mig-config.yaml", layout())
    (found,) = only(check(root), "GG034")
    assert "NVIDIA-L40S (pool.yaml) is not MIG-capable" in found.message


def test_gg086_more_of_a_profile_than_the_catalogue_places(tmp_path: Path) -> None:
    root = write_repo(tmp_path, TWO)
    _write(root / "nodepools/b/mig-config.yaml", layout({"1g.20gb": 5}))
    (found,) = only(check(root), "GG086")
    assert "5 x 1g.20gb on one H100-80GB" in found.message and "more than 4" in found.message


def test_an_entry_for_other_gpus_is_not_held_against_this_one(tmp_path: Path) -> None:
    root = write_repo(tmp_path, TWO)
    a30_only = layout({"1g.6gb": 4}, **{"device-filter": ["0x20B710DE"]})
    _write(root / "nodepools/b/mig-config.yaml", a30_only)
    assert [f for f in check(root) if f.code in ("GG034", "GG086")] == []


def test_gg087_a_catalogue_layout_on_a_cluster_whose_configmap_the_repo_builds(
    tmp_path: Path,
) -> None:
    root = write_repo(tmp_path, {**TWO, "a": {**H100, "migConfig": "all-balanced"}})
    _write(root / "nodepools/b/mig-config.yaml", layout())
    (found,) = only(check(root), "GG087")
    assert "selects MIG layout 'all-balanced'" in found.message
    assert found.file == "nodepools/a/pool.yaml" and found.field == "spec.migConfig"
    assert "configs/mig/all-balanced.yaml" in found.fix
    # without a repo layout, the operator's catalogue serves it: no finding
    (root / "nodepools/b/mig-config.yaml").unlink()
    assert [f for f in check(root) if f.code == "GG087"] == []


@pytest.mark.parametrize(
    ("devices", "strategy", "want"),
    [
        (
            {"1g.10gb": 2, "1g.10gb+me": 1},
            "mixed",
            {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-1g.10gb.me": 1},
        ),
        ({"1g.10gb": 7}, "single", {"nvidia.com/gpu": 7}),
        ({"1g.10gb": 2, "3g.40gb": 1}, "single", None),  # single needs one profile
        ({"1g.10gb": 7}, "none", {"nvidia.com/gpu": 1}),
    ],
)
def test_what_a_layout_advertises_under_each_strategy(
    devices: dict[str, int], strategy: str, want: dict[str, int] | None
) -> None:
    assert mig_layouts.advertised(devices, strategy) == want


def test_only_a_layout_alike_on_every_gpu_has_per_gpu_devices() -> None:
    one = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
    assert mig_layouts.per_gpu([one]) == {"1g.10gb": 7}
    assert mig_layouts.per_gpu([{**one, "devices": [0, 1]}]) is None
    assert mig_layouts.per_gpu([one, one]) is None
    assert mig_layouts.per_gpu([{**one, "mig-enabled": False}]) is None
