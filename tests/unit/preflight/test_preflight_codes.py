"""One minimal bad repo per finding code; each finding names file, line and a fix."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu.errors import KubeError
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.preflight import CODES, Finding, Severity, run_preflight
from gitops_gpu_dev import paths

TODAY = datetime.date(2026, 11, 1)
CRDS = paths.default_crds_dir()
H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}


def check(root: Path, **kw: Any) -> list[Finding]:
    return run_preflight(root, commit="c", today=TODAY, **kw).findings


def only(findings: list[Finding], code: str) -> list[Finding]:
    got = [f for f in findings if f.code == code]
    assert got, f"no {code} in:\n" + "\n".join(f.text() for f in findings)
    for f in got:
        assert f.severity is CODES[code][0]
        assert f.file and f.fix and f.message
    return got


def line_of(path: Path, needle: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if needle in t)


def test_clean_repo_has_no_findings(tmp_path: Path) -> None:
    assert check(write_repo(tmp_path, {"a": H100})) == []


def test_gg001_yaml(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    (root / "nodepools/a/clusterpolicy.yaml").write_text("spec:\n  x: 1\n  x: 2\n")
    (f,) = only(check(root), "GG001")
    assert (f.file, f.line) == ("nodepools/a/clusterpolicy.yaml", 3)


def test_gg002_shape(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {**H100, "maxUnavailble": 1}})
    (f,) = only(check(root), "GG002")
    assert f.file == "nodepools/a/pool.yaml" and f.field == "spec.maxUnavailble"
    assert f.line == line_of(root / f.file, "maxUnavailble")


@pytest.mark.parametrize(
    ("stages", "needle"),
    [
        ([{"name": "s", "pools": ["a"]}], "pool 'b' is in no stage"),
        ([{"name": "s", "pools": ["a", "b"]}, {"name": "t", "pools": ["b"]}], "again in stage 't'"),
        ([{"name": "s", "pools": ["a", "b", "ghost"]}], "names pool 'ghost'"),
        ([{"name": "s", "pools": ["a"]}, {"name": "s", "pools": ["b"]}], "defined twice"),
    ],
)
def test_gg003_stages(tmp_path: Path, stages: list[dict[str, Any]], needle: str) -> None:
    root = write_repo(
        tmp_path, {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}}, stages=stages
    )
    (f,) = only(check(root), "GG003")
    assert needle in f.message and f.line > 0


def test_gg004_unknown_cluster(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {**H100, "cluster": "mars"}})
    (f,) = only(check(root), "GG004")
    assert f.file == "nodepools/a/pool.yaml" and "'mars'" in f.message
    assert f.line == line_of(root / f.file, "cluster: mars")


def test_gg004_name_differs_from_folder(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    pool = root / "nodepools/a/pool.yaml"
    pool.write_text(pool.read_text().replace("name: a", "name: b"))
    (f,) = only(check(root), "GG004")
    assert "folder name 'a'" in f.message and f.line == line_of(pool, "name: b")


def test_gg004_pool_without_policy(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    fleet = root / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("  base: base/clusterpolicy.yaml\n", ""))
    (f,) = only(check(root), "GG004")
    assert f.file == "nodepools/a/clusterpolicy.yaml" and "no ClusterPolicy" in f.message


def test_gg005_symlinked_pool_file(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    (root / "shared.yaml").write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\n")
    (root / "nodepools/a/clusterpolicy.yaml").symlink_to("../../shared.yaml")
    (f,) = only(check(root), "GG005")
    assert f.file == "nodepools/a/clusterpolicy.yaml" and "is a symlink" in f.message


def test_gg006_symlink_outside_fleet_files_is_a_note(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    (root / "docs").mkdir()
    (root / "docs/base.yaml").symlink_to("../base/clusterpolicy.yaml")
    (f,) = only(check(root), "GG006")
    assert f.file == "docs/base.yaml" and f.message == "symlink, ignored"


def test_gg010_schema_error_points_at_the_base(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["toolkit"]["enabled"] = "yes"
    base["spec"]["mig"] = {"strategy": "both"}
    root = write_repo(tmp_path, {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}}, base=base)
    found = only(check(root), "GG010")
    # one finding per field even though two pools inherit the base
    assert sorted((f.field, f.line) for f in found) == [
        ("spec.mig.strategy", line_of(root / "base/clusterpolicy.yaml", "strategy: both")),
        ("spec.toolkit.enabled", line_of(root / "base/clusterpolicy.yaml", "enabled: 'yes'")),
    ]
    assert "supported values" in next(f for f in found if "mig" in f.field).message


def test_gg010_missing_required_field(tmp_path: Path) -> None:
    base = minimal_base()
    del base["spec"]["gfd"]
    root = write_repo(tmp_path, {"a": H100}, base=base)
    (f,) = only(check(root), "GG010")
    assert f.field == "spec.gfd" and "required" in f.message


def test_gg010_unknown_field_in_overlay_not_reported_twice(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100}, overlays={"a": overlay({"driver": {"verison": "1"}})})
    findings = check(root)
    (f,) = only(findings, "GG010")
    assert f.file == "nodepools/a/clusterpolicy.yaml" and "unknown field 'verison'" in f.message
    assert not [x for x in findings if x.code == "GG011"]  # same field, said once


def _crds_copy(tmp_path: Path, edit: Any) -> Path:
    out = tmp_path / "crds"
    out.mkdir()
    yaml = YAML(typ="safe", pure=True)
    for src in CRDS.glob("*.yaml"):
        docs = list(yaml.load_all(src.read_text()))
        for doc in docs:
            if isinstance(doc, dict):
                edit(doc)
        with (out / src.name).open("w") as fh:
            yaml.dump_all(docs, fh)
    return out


def _nvd_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["spec"]["names"]["kind"] != "NVIDIADriver":
        return None
    spec: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]
    return spec


def test_gg011_stale_nvidiadriver_crd(tmp_path: Path) -> None:
    def drop_gdrcopy(doc: dict[str, Any]) -> None:
        spec = _nvd_spec(doc)
        if spec:
            del spec["properties"]["gdrcopy"]

    crds = _crds_copy(tmp_path, drop_gdrcopy)
    root = write_repo(
        tmp_path / "r", {"a": H100}, overlays={"a": overlay({"gdrcopy": {"enabled": True}})}
    )
    (f,) = only(check(root, crds_dir=crds), "GG011")
    assert f.file == "nodepools/a/clusterpolicy.yaml" and f.line == line_of(
        root / f.file, "gdrcopy"
    )
    assert "NVIDIADriver 'a'" in f.message


def test_gg013_untranslated_cel_rule_is_named(tmp_path: Path) -> None:
    def add_rule(doc: dict[str, Any]) -> None:
        spec = _nvd_spec(doc)
        if spec:
            spec["x-kubernetes-validations"].append({"rule": "self.version.startsWith('5')"})

    crds = _crds_copy(tmp_path, add_rule)
    root = write_repo(tmp_path / "r", {"a": H100})
    (f,) = only(check(root, crds_dir=crds), "GG013")
    assert "startsWith" in f.message and f.severity is Severity.INFO


def operator_deployment(*env: str) -> dict[str, Any]:
    """The gpu-operator Deployment as the Helm chart renders it, with ``env`` set."""
    container = {"name": "gpu-operator", "env": [{"name": e, "value": "img:1"} for e in env]}
    return {
        "metadata": {"name": "gpu-operator", "namespace": "gpu-operator"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


class FakeClient:
    def __init__(
        self,
        nodes: list[dict[str, Any]],
        refuse: str = "",
        deployments: list[dict[str, Any]] | None = None,
    ) -> None:
        self.nodes, self.refuse, self.applied = nodes, refuse, []
        self.deployments = deployments if deployments is not None else [operator_deployment()]

    def list(self, api_version: str, kind: str, **kw: Any) -> dict[str, Any]:
        if (api_version, kind) == ("apps/v1", "Deployment"):
            assert kw.get("namespace") == "gpu-operator"
            return {"items": self.deployments}
        if (api_version, kind) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
            return {"items": []}  # the live CRDs' checks run on the real apiserver
        assert (api_version, kind) == ("v1", "Node")
        return {"items": self.nodes}

    def apply(self, obj: Any, *, field_manager: str, dry_run: bool = False, **_: Any) -> Any:
        assert dry_run and field_manager == "gitops-gpu"
        self.applied.append(obj["metadata"]["name"])
        if obj["metadata"]["name"] == self.refuse:
            raise KubeError("PATCH x: invalid: spec.version: bad", fix="fix it")
        return obj


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_gg012_dry_run_refused(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    client = FakeClient([node("n1", **{"node.kubernetes.io/pool": "a"})], refuse="a")
    (f,) = only(check(root, client_factory=lambda ctx: client), "GG012")
    assert "NVIDIADriver/a" in f.message and f.file == "nodepools/a/pool.yaml"
    assert client.applied == ["cluster-policy", "a"]


def test_gg020_cluster_scoped_disagreement(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}},
        overlays={"b": overlay({"toolkit": {"version": "v1.20.0"}})},
    )
    (f,) = only(check(root), "GG020")
    assert f.file == "nodepools/b/clusterpolicy.yaml" and f.pool == "b"
    assert "spec.toolkit" in f.message and "no per-node mechanism" in f.message


@pytest.mark.parametrize(
    "selector_b", [{"node.kubernetes.io/pool": "a"}, {"node.kubernetes.io/pool": "a", "z": "1"}]
)
def test_gg021_overlapping_selectors(tmp_path: Path, selector_b: dict[str, str]) -> None:
    root = write_repo(tmp_path, {"a": H100, "b": {**H100, "nodeSelector": selector_b}})
    (f,) = only(check(root), "GG021")
    assert f.pool == "a" and f.line == line_of(root / "nodepools/a/pool.yaml", "nodeSelector")


def test_disjoint_selectors_do_not_overlap(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path, {"a": H100, "b": {**H100, "nodeSelector": {"node.kubernetes.io/pool": "b"}}}
    )
    assert not [f for f in check(root) if f.code == "GG021"]


def test_gg022_live_node_in_two_pools(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {"a": {**H100, "nodeSelector": {"x": "1"}}, "b": {**H100, "nodeSelector": {"y": "1"}}},
    )
    nodes = {"default": [node("both", x="1", y="1"), node("only-a", x="1")]}
    (f,) = only(check(root, live_nodes=nodes), "GG022")
    assert "'both'" in f.message and "a, b" in f.message


def test_gg023_pool_without_nodes(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    (f,) = only(check(root, live_nodes={"default": [node("n", other="x")]}), "GG023")
    assert f.pool == "a"


def test_gg026_selector_on_managed_label(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path, {"a": {**H100, "nodeSelector": {"nvidia.com/mig.config": "all-disabled"}}}
    )
    (f,) = only(check(root), "GG026")
    assert f.line == line_of(root / "nodepools/a/pool.yaml", "nvidia.com/mig.config")


@pytest.mark.parametrize(
    ("pool", "policy", "needle"),
    [
        ({"migConfig": "all-balanced", "disabledComponents": ["mig-manager"]}, None, "MIG manager"),
        ({"workload": "vm-passthrough"}, None, "sandboxWorkloads"),
        ({"maxUnavailable": 1}, {"driver": {"upgradePolicy": {"maxUnavailable": 3}}}, "replaced"),
    ],
)
def test_gg027_no_effect(
    tmp_path: Path, pool: dict[str, Any], policy: dict[str, Any] | None, needle: str
) -> None:
    root = write_repo(
        tmp_path, {"a": {**H100, **pool}}, overlays={"a": overlay(policy)} if policy else None
    )
    (f,) = only(check(root), "GG027")
    assert needle in f.message


def test_gg028_auto_upgrade_unset(tmp_path: Path) -> None:
    base = minimal_base()
    del base["spec"]["driver"]["upgradePolicy"]
    root = write_repo(tmp_path, {"a": H100}, base=base)
    (f,) = only(check(root), "GG028")
    assert f.file == "base/clusterpolicy.yaml"


def test_gg042_rolling_update_reaches_every_pool_at_once(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["daemonsets"] = {"updateStrategy": "RollingUpdate"}
    root = write_repo(tmp_path, {"a": H100}, base=base)
    (f,) = only(check(root), "GG042")
    assert f.file == "base/clusterpolicy.yaml" and f.severity == "warning"
    assert "cluster-wide operand changes will reach every pool at once" in f.message
    # left out, compile sets OnDelete and nothing is said
    root = write_repo(tmp_path / "b", {"a": H100})
    assert not [f for f in check(root) if f.code == "GG042"]


NOW = datetime.datetime(2026, 12, 2, 12, tzinfo=datetime.UTC).timestamp()  # a Wednesday


def _windowed(tmp_path: Path, windows: dict[str, Any]) -> Path:
    return write_repo(
        tmp_path, {"a": H100}, stages=[{"name": "all", "pools": ["a"], "windows": windows}]
    )


def test_gg070_a_window_that_never_opens(tmp_path: Path) -> None:
    tuesdays = {"schedule": "0 2 * * 2", "duration": "1h"}
    always = {"schedule": "0 0 * * *", "duration": "24h"}
    root = _windowed(tmp_path, {"allow": [tuesdays], "deny": [always]})
    (f,) = only(check(root, now=NOW), "GG070")
    assert f.file == "fleet.yaml" and f.field == "spec.stages[all].windows"
    assert f.line == line_of(root / "fleet.yaml", "windows:")
    assert "never opens in the next 4 years" in f.message and "deny" in f.fix


def test_gg071_says_when_a_stage_opens_next(tmp_path: Path) -> None:
    root = _windowed(
        tmp_path,
        {"timezone": "Europe/Berlin", "allow": [{"schedule": "0 2 * * 2", "duration": "4h"}]},
    )
    (f,) = only(check(root, now=NOW), "GG071")
    # Wednesday 13:00 Berlin: the next Tuesday 02:00 is 5 days and 13 hours away.
    assert f.message == "stage all: waiting for window: opens Tue 02:00 Europe/Berlin (in 5d13h)"
    assert not [x for x in check(root, now=NOW) if x.severity == "error"]


@pytest.mark.parametrize(
    ("windows", "field", "needle"),
    [
        ({"timezone": "Mars/Olympus"}, "spec.stages.0.windows.timezone", "Mars/Olympus"),
        (
            {"allow": [{"schedule": "0 2 * *", "duration": "1h"}]},
            "spec.stages.0.windows.allow.0.schedule",
            "5 fields",
        ),
        (
            {"allow": [{"schedule": "0 2 * * *", "duration": "0s"}]},
            "spec.stages.0.windows.allow.0.duration",
            "longer than 0s",
        ),
    ],
)
def test_gg002_malformed_windows(
    tmp_path: Path, windows: dict[str, Any], field: str, needle: str
) -> None:
    root = _windowed(tmp_path, windows)
    (f,) = only(check(root, now=NOW), "GG002")
    assert f.file == "fleet.yaml" and needle in f.message, f.text()


def test_gg002_a_freeze_that_ends_before_it_starts(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100})
    fleet = root / "fleet.yaml"
    fleet.write_text(
        fleet.read_text()
        + '  freezes:\n  - {from: "2027-01-04T00:00:00Z", to: "2026-12-20T00:00:00Z", reason: x}\n'
    )
    (f,) = only(check(root, now=NOW), "GG002")
    assert "'to' must be later than 'from'" in f.message and f.file == "fleet.yaml"


def _driver(tmp_path: Path, product: str, **driver: Any) -> list[Finding]:
    root = write_repo(
        tmp_path, {"a": {"gpu": {"product": product}}}, overlays={"a": overlay({"driver": driver})}
    )
    return check(root)


def test_gg030_branch_too_new_for_volta(tmp_path: Path) -> None:
    (f,) = only(_driver(tmp_path, "Tesla-V100-SXM2-16GB", version="595.91.07"), "GG030")
    assert "R580 is the last branch" in f.message
    assert f.file == "nodepools/a/clusterpolicy.yaml" and f.field == "version"


def test_gg030_b200_needs_570_133_20(tmp_path: Path) -> None:
    (f,) = only(_driver(tmp_path, "NVIDIA-B200", version="570.124.06"), "GG030")
    assert "570.133.20" in f.message


def test_gg031_blackwell_needs_open_modules(tmp_path: Path) -> None:
    (f,) = only(_driver(tmp_path, "NVIDIA-B200", kernelModuleType="proprietary"), "GG031")
    assert f.line == line_of(tmp_path / "nodepools/a/clusterpolicy.yaml", "kernelModuleType")


def test_gg031_grace_hopper_needs_open_modules(tmp_path: Path) -> None:
    only(_driver(tmp_path, "NVIDIA-GH200-480GB", kernelModuleType="proprietary"), "GG031")


def test_gg032_volta_cannot_run_open_modules(tmp_path: Path) -> None:
    only(_driver(tmp_path, "Tesla-V100-SXM2-32GB", kernelModuleType="open"), "GG032")


def test_gg033_auto_needs_a_newer_driver(tmp_path: Path) -> None:
    (f,) = only(_driver(tmp_path, "Tesla-T4", version="570.86.10"), "GG033")
    assert "570.86.15" in f.message


def test_gg034_mig_profile_for_another_gpu(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path, {"a": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "migConfig": "all-1g.5gb"}}
    )
    (f,) = only(check(root), "GG034")
    assert "A100-40GB" in f.message and "all-1g.10gb" in f.fix
    assert f.line == line_of(root / "nodepools/a/pool.yaml", "migConfig")


def test_gg034_mig_on_a_gpu_without_mig(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path, {"a": {"gpu": {"product": "NVIDIA-L40S"}, "migConfig": "all-balanced"}}
    )
    (f,) = only(check(root), "GG034")
    assert "not MIG-capable" in f.message


def test_gg034_becomes_a_note_with_a_custom_mig_config(tmp_path: Path) -> None:
    base = minimal_base()
    base["spec"]["migManager"] = {"enabled": True, "config": {"name": "my-mig"}}
    root = write_repo(
        tmp_path,
        {"a": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "migConfig": "all-1g.5gb"}},
        base=base,
    )
    findings = check(root)
    assert not [f for f in findings if f.code == "GG034"]
    assert "my-mig" in only(findings, "GG036")[0].message


def test_gg034_stays_an_error_when_the_operators_own_mig_configmap_is_named(
    tmp_path: Path,
) -> None:
    # default-mig-parted-config is the default catalogue, not a custom layout to trust
    base = minimal_base()
    base["spec"]["migManager"] = {
        "enabled": True,
        "config": {"name": "default-mig-parted-config"},
    }
    root = write_repo(
        tmp_path,
        {"a": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "migConfig": "all-1g.5gb"}},
        base=base,
    )
    (f,) = only(check(root), "GG034")
    assert "not valid for NVIDIA-H100-80GB-HBM3" in f.message


def test_gg035_end_of_life_branch(tmp_path: Path) -> None:
    (f,) = only(
        _driver(tmp_path, "NVIDIA-H100-80GB-HBM3", version="550.54.15", kernelModuleType="open"),
        "GG035",
    )
    assert "R550" in f.message


def test_gg035_lts_branch_after_its_end_date(tmp_path: Path) -> None:
    findings = _driver(
        tmp_path, "NVIDIA-L40S", version="535.247.01", kernelModuleType="proprietary"
    )
    assert "since 2026-06-30" in only(findings, "GG035")[0].message


@pytest.mark.parametrize(
    ("product", "version", "needle"),
    [
        ("NVIDIA-H100-80GB-HBM3", "sha256:e243d778bd83", "not a version number"),
        ("NVIDIA-Z9000", "580.126.20", "not in the version matrix"),
    ],
)
def test_gg036_matrix_cannot_judge(tmp_path: Path, product: str, version: str, needle: str) -> None:
    found = only(_driver(tmp_path, product, version=version), "GG036")
    assert any(needle in f.message for f in found)


def test_gg039_a_driver_in_no_known_release(tmp_path: Path) -> None:
    (f,) = only(_driver(tmp_path, "NVIDIA-H100-80GB-HBM3", version="508.126.20"), "GG039")
    assert "R508 is in no known NVIDIA data center release" in f.message
    assert f.field and f.field.endswith("version") and "version_matrix.yaml" in f.fix


def test_gg036_no_product_known(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {}})
    assert "no GPU product known" in only(check(root), "GG036")[0].message


def test_live_gpu_product_overrides_declared(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path, {"a": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "migConfig": "all-1g.10gb"}}
    )
    gpu = node(
        "n1",
        **{
            "node.kubernetes.io/pool": "a",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        },
    )
    findings = check(root, live_nodes={"default": [gpu]})
    # all-1g.10gb is valid on A100-40GB too (4 instances): no finding for the live product
    assert not [f for f in findings if f.code == "GG034"]
    gpu["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A30"
    (f,) = only(check(root, live_nodes={"default": [gpu]}), "GG034")
    assert "node n1" in f.message


def _without_validator_image() -> dict[str, Any]:
    base = minimal_base()
    base["spec"]["validator"] = {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}}
    return base


def test_gg044_image_left_to_the_operators_env_without_a_cluster(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100}, base=_without_validator_image())
    (f,) = only(check(root), "GG044")
    assert "VALIDATOR_IMAGE" in f.message and "Helm chart sets it" in f.message
    assert f.field == "spec.validator" and f.line == line_of(
        root / "base/clusterpolicy.yaml", "validator:"
    )


def test_gg043_image_the_running_operator_cannot_resolve(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": H100}, base=_without_validator_image())
    nodes = [node("n1", **{"node.kubernetes.io/pool": "a"})]
    bare = FakeClient(nodes, deployments=[operator_deployment("DRIVER_MANAGER_IMAGE")])
    (f,) = only(check(root, client_factory=lambda ctx: bare), "GG043")
    assert "does not set VALIDATOR_IMAGE" in f.message and "GG044" not in {
        x.code for x in check(root, client_factory=lambda ctx: bare)
    }
    helm = FakeClient(nodes, deployments=[operator_deployment("VALIDATOR_IMAGE")])
    codes = {x.code for x in check(root, client_factory=lambda ctx: helm)}
    assert not codes & {"GG043", "GG044"}


def test_gg043_partial_image_and_a_driver_without_one(tmp_path: Path) -> None:
    base = minimal_base()
    del base["spec"]["toolkit"]["repository"]  # image and version only: the operator refuses
    del base["spec"]["driver"]["repository"]  # an NVIDIADriver image has no env fallback
    root = write_repo(tmp_path, {"a": H100}, base=base)
    found = only(check(root), "GG043")
    assert {f.field for f in found} == {"spec.toolkit", "spec.driver"}
    assert all("only some of repository, image and version" in f.message for f in found)


def test_every_code_is_tested() -> None:
    text = (
        Path(__file__).read_text()
        + (Path(__file__).parent / "test_preflight_history.py").read_text()
        + (Path(__file__).parent / "test_preflight_recipes.py").read_text()
        + (Path(__file__).parent / "test_preflight_gates.py").read_text()
        + (Path(__file__).parent / "test_preflight_sharing.py").read_text()
        + (Path(__file__).parent / "test_preflight_mig_layouts.py").read_text()
        # the gpuOperator release's codes need Helm and a real apiserver
        + (Path(__file__).parents[2] / "integration" / "test_operator_release.py").read_text()
        + (Path(__file__).parents[2] / "integration" / "test_operator_crds.py").read_text()
    )
    for code in CODES:
        assert f'"{code}"' in text.replace(f"test_{code.lower()}", ""), code
