"""AICR recipes in preflight: resolution read from the shared snapshot, deviations as findings.

The real catalog is read in place from ../shared/upstream/aicr/recipes (the ``upstream``
fixture fails, never skips, when it is missing). Error cases use small catalogs written here.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.cli import check as check_cli
from gitops_gpu.fleet.scaffold import overlay, write_repo
from gitops_gpu.preflight import CODES, Finding, Severity, run_preflight
from gitops_gpu.preflight.recipe_catalog import RecipeFileError, load_catalog
from gitops_gpu.preflight.recipe_live import satisfied
from gitops_gpu.preflight.recipe_resolve import ResolveError, component_values, resolve

TODAY = datetime.date(2026, 11, 1)
H100 = {"product": "NVIDIA-H100-80GB-HBM3"}
LEAF = "h100-eks-ubuntu-training"
CRITERIA = {"service": "eks", "accelerator": "h100", "os": "ubuntu", "intent": "training"}
# what the recipe pins (read from the snapshot by the tests below, spelled out here once)
RECIPE_DRIVER, RECIPE_CHART = "580.105.08", "v25.10.1"


VALUES, H100_EKS = "components/gpu-operator/values.yaml", "overlays/h100-eks-training.yaml"


def at(recipes: Path, rel: str, needle: str, after: str = "") -> str:
    """'<recipes>/<rel>:<line>' of the first line holding ``needle`` (after ``after``)."""
    lines = (recipes / rel).read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if after in t) if after else 0
    line = next(i for i, t in enumerate(lines[start:], start + 1) if needle in t)
    return f"{recipes}/{rel}:{line}"


@pytest.fixture(scope="module")
def recipes(upstream: Path) -> Path:
    root = upstream / "aicr" / "recipes"
    assert (root / "overlays" / "base.yaml").is_file(), f"AICR snapshot missing under {root}"
    return root


# -- resolution, against the real snapshot ----------------------------------------------------


def test_by_name_walks_the_base_chain(recipes: Path) -> None:
    rec = resolve(load_catalog(recipes), LEAF, None)
    assert rec.applied == ["base", "eks", "eks-training", "h100-eks-training", LEAF]
    k8s = rec.constraints["K8s.server.version"]
    where = at(recipes, f"overlays/{LEAF}.yaml", "name: K8s.server.version")
    assert k8s.value == ">= 1.32.4" and k8s.origin == where
    assert rec.constraints["OS.release.ID"].value == "ubuntu"
    op = rec.components["gpu-operator"]
    assert op.fields["version"] == RECIPE_CHART and "overlays/base.yaml" in op.origins["version"]
    assert op.fields["valuesFile"] == "components/gpu-operator/values-eks-training.yaml"
    assert "skyhook-customizations" in op.fields["dependencyRefs"]  # added, not replaced
    assert op.overrides == {"cdi": {"enabled": True}, "gdrcopy": {"enabled": True}}


def test_by_criteria_adds_the_wildcard_overlay_and_ends_at_the_leaf(recipes: Path) -> None:
    rec = resolve(load_catalog(recipes), None, CRITERIA)
    # monitoring-hpa (intent: any) matches every query; least specific, so merged first
    assert rec.applied == [
        "base",
        "monitoring-hpa",
        "eks",
        "eks-training",
        "h100-eks-training",
        LEAF,
    ]
    assert "prometheus-adapter" in rec.components and rec.unmatched == []


def test_a_generic_query_does_not_match_specific_overlays(recipes: Path) -> None:
    rec = resolve(load_catalog(recipes), None, {"service": "eks"})
    assert rec.leaf == "eks" and "eks-training" not in rec.applied


def test_platform_and_aliases(recipes: Path) -> None:
    cat = load_catalog(recipes)
    rec = resolve(cat, None, {**CRITERIA, "platform": "kubeflow", "accelerator": "H100 "})
    assert rec.leaf == f"{LEAF}-kubeflow"
    assert resolve(cat, None, {"service": "eks", "accelerator": "h200"}).unmatched == [
        "accelerator=h200"
    ]


def test_values_merge_base_file_then_values_file_then_overrides(recipes: Path) -> None:
    cat = load_catalog(recipes)
    values, origins = component_values(cat, resolve(cat, LEAF, None).components["gpu-operator"])
    assert values["driver"]["version"] == RECIPE_DRIVER  # components/gpu-operator/values.yaml
    assert origins[("driver", "version")] == at(recipes, VALUES, "version: 580.105.08")
    assert values["hostPaths"]["driverInstallDir"] == "/run/nvidia/driver"  # values-eks-training
    assert origins[("cdi", "enabled")] == at(recipes, H100_EKS, "enabled: true", after="cdi:")


@pytest.mark.parametrize(
    ("criteria", "needle"),
    [
        ({"service": "eks", "accelerator": "h1OO"}, "accelerator 'h1oo' is not an AICR value"),
        ({"intent": "training"}, "no overlay of"),
    ],
)
def test_criteria_that_do_not_resolve(recipes: Path, criteria: dict[str, str], needle: str) -> None:
    with pytest.raises(ResolveError, match=needle):
        resolve(load_catalog(recipes), None, criteria)


def test_unknown_name_suggests_close_ones(recipes: Path) -> None:
    with pytest.raises(ResolveError, match="did you mean h100-eks-ubuntu-training"):
        resolve(load_catalog(recipes), "h100-eks-ubuntu-trainng", None)


@pytest.mark.parametrize(
    ("expr", "actual", "ok"),
    [
        (">= 1.32.4", "v1.36.3", True),
        (">= 1.32.4", "v1.31.9-eks-1a2b", False),
        (">= 6.8", "6.8.0-1015-aws", True),
        (">= 6.8", "5.15.0-1051-aws", False),
        ("ubuntu", "Ubuntu", True),
        ("24.04", "22.04", False),
        ("!= rhel", "ubuntu", True),
    ],
)
def test_constraint_expressions(expr: str, actual: str, ok: bool) -> None:
    assert satisfied(expr, actual) is ok


# -- small catalogs for the failure cases -----------------------------------------------------


def _overlay(name: str, base: str = "", **spec: Any) -> str:
    body = {"base": base, **spec} if base else dict(spec)
    doc = {"kind": "RecipeMetadata", "apiVersion": "aicr.nvidia.com/v1alpha1"}
    return json.dumps({**doc, "metadata": {"name": name}, "spec": body}, indent=2) + "\n"


def _catalog(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "recipes"
    files = {
        "overlays/base.yaml": _overlay(
            "base",
            componentRefs=[{"name": "gpu-operator", "type": "Helm", "version": "v25.10.1"}],
        ),
        **files,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_cycle_in_spec_base(tmp_path: Path) -> None:
    root = _catalog(
        tmp_path,
        {
            "overlays/a.yaml": _overlay("a", "b", criteria={"service": "eks"}),
            "overlays/b.yaml": _overlay(
                "b", "a", criteria={"service": "eks", "intent": "training"}
            ),
        },
    )
    with pytest.raises(ResolveError, match=r"cycle in spec.base: a -> b -> a"):
        resolve(load_catalog(root), "a", None)


def test_mixins_compose_and_collide(tmp_path: Path) -> None:
    mixin = {
        "kind": "RecipeMixin",
        "metadata": {"name": "os-ubuntu"},
        "spec": {"constraints": [{"name": "OS.release.ID", "value": "ubuntu"}]},
    }
    root = _catalog(
        tmp_path,
        {
            "overlays/a.yaml": _overlay("a", criteria={"service": "eks"}, mixins=["os-ubuntu"]),
            "mixins/os-ubuntu.yaml": json.dumps(mixin),
        },
    )
    rec = resolve(load_catalog(root), None, {"service": "eks"})
    assert rec.constraints["OS.release.ID"].origin.endswith("mixins/os-ubuntu.yaml:1")
    clash = _overlay(
        "b",
        criteria={"service": "gke"},
        mixins=["os-ubuntu", "gone"],
        constraints=[{"name": "OS.release.ID", "value": "cos"}],
    )
    (root / "overlays/b.yaml").write_text(clash)
    with pytest.raises(ResolveError, match=r"mixin 'os-ubuntu' constraint OS\.release\.ID"):
        resolve(load_catalog(root), "b", None)


def test_missing_mixin(tmp_path: Path) -> None:
    root = _catalog(tmp_path, {"overlays/a.yaml": _overlay("a", mixins=["gone"])})
    with pytest.raises(ResolveError, match=r"mixin 'gone'.*is not in"):
        resolve(load_catalog(root), "a", None)


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("kind: RecipeMetadata\nmetadata:\n  name: a\nspec:\n  base: [x\n", 6, "YAML syntax"),
        ("kind: RecipeMetadata\nmetadata:\n  name: a\nspec:\n  criteria: [eks]\n", 5, "wrong type"),
        (
            "kind: RecipeMetadata\nmetadata:\n  name: a\nspec:\n  criteria:\n    gpu: h100\n",
            6,
            "gpu",
        ),
        (
            "kind: RecipeMetadata\nmetadata:\n  name: a\nspec:\n  componentRefs:\n  - type: Helm\n",
            6,
            "needs a name",
        ),
    ],
)
def test_malformed_recipe_file_names_its_path_and_line(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    root = _catalog(tmp_path, {"overlays/a.yaml": text})
    with pytest.raises(RecipeFileError) as err:
        load_catalog(root, "recipes")
    assert err.value.file == "recipes/overlays/a.yaml" and err.value.line == line
    assert needle in err.value.message and err.value.fix


# -- preflight findings -----------------------------------------------------------------------


def check(root: Path, **kw: Any) -> list[Finding]:
    return run_preflight(root, commit="c", today=TODAY, **kw).findings


def only(findings: list[Finding], code: str, severity: Severity | None = None) -> list[Finding]:
    got = [f for f in findings if f.code == code]
    assert got, f"no {code} in:\n" + "\n".join(f.text() for f in findings)
    for f in got:
        assert f.severity is (severity or CODES[code][0]) and f.file and f.fix and f.line
    return got


def line_of(path: Path, needle: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if needle in t)


def _fleet(
    tmp_path: Path,
    recipe: Any = LEAF,
    *,
    version: str | None = RECIPE_CHART,
    policy: dict[str, Any] | None = None,
    pool: dict[str, Any] | None = None,
    **fleet_spec: Any,
) -> Path:
    cluster: dict[str, Any] = {"name": "default"}
    if version:
        cluster["gpuOperatorVersion"] = version
    root = write_repo(
        tmp_path / "fleet",
        {"a": {"gpu": H100, "recipe": recipe, **(pool or {})}},
        clusters=[cluster],
        overlays={"a": overlay(policy or {"driver": {"version": RECIPE_DRIVER}})},
    )
    if fleet_spec:
        fleet = root / "fleet.yaml"
        extra = "".join(f"  {k}: {v}\n" for k, v in fleet_spec.items())
        fleet.write_text(fleet.read_text().replace("spec:\n", "spec:\n" + extra, 1))
    return root


def test_following_the_recipe_is_clean(tmp_path: Path, recipes: Path) -> None:
    dcgm = {"enabled": True, "repository": "nvcr.io/nvidia/cloud-native", "image": "dcgm"}
    dcgm["version"] = "4.5.2-1-ubuntu22.04"
    root = _fleet(tmp_path, policy={"driver": {"version": RECIPE_DRIVER}, "dcgm": dcgm})
    assert [f.text() for f in check(root, recipes_dir=recipes)] == []


def test_gg050_unresolvable_recipe_names_pool_line_and_dir(tmp_path: Path, recipes: Path) -> None:
    root = _fleet(tmp_path, {"criteria": {"service": "eks", "accelerator": "h1OO"}})
    (f,) = only(check(root, recipes_dir=recipes), "GG050")
    assert f.file == "nodepools/a/pool.yaml" and f.line == line_of(root / f.file, "recipe:")
    assert str(recipes) in f.message and "h1oo" in f.message


def test_gg051_malformed_recipe_file(tmp_path: Path) -> None:
    cat = _catalog(tmp_path, {"overlays/h100.yaml": "kind: RecipeMetadata\nmetadata: {name: [x\n"})
    (f,) = only(check(_fleet(tmp_path), recipes_dir=cat), "GG051")
    assert f.file == f"{cat}/overlays/h100.yaml" and f.line == 3


def test_gg052_driver_and_gg054_values_differ(tmp_path: Path, recipes: Path) -> None:
    policy = {
        "driver": {"version": "580.126.20"},
        "dcgm": {"enabled": False},
        "cdi": {"enabled": False},
    }
    root = _fleet(tmp_path, policy=policy)
    findings = check(root, recipes_dir=recipes)
    (drv,) = only(findings, "GG052")
    cp = root / "nodepools/a/clusterpolicy.yaml"
    assert drv.file == "nodepools/a/clusterpolicy.yaml" and drv.line == line_of(cp, "580.126.20")
    assert RECIPE_DRIVER in drv.message and drv.source == at(recipes, VALUES, "version: 580.1")
    values = {f.field: f for f in only(findings, "GG054")}
    assert sorted(values) == ["cdi.enabled", "dcgm.enabled"]
    assert "false where recipe" in values["cdi.enabled"].message
    assert values["cdi.enabled"].source == at(recipes, H100_EKS, "enabled: true", after="cdi:")


def test_gg054_env_lists_compare_by_name(tmp_path: Path, recipes: Path) -> None:
    env = [{"name": "DEVICE_LIST_STRATEGY", "value": "envvar"}, {"name": "OTHER", "value": "1"}]
    policy = {
        "driver": {"version": RECIPE_DRIVER},
        "dcgm": {"enabled": True},
        "devicePlugin": {"env": env},
    }
    (f,) = only(check(_fleet(tmp_path, policy=policy), recipes_dir=recipes), "GG054")
    assert f.field == "devicePlugin.env" and 'DEVICE_LIST_STRATEGY="envvar"' in f.message


def test_gg053_operator_version_and_enforce(tmp_path: Path, recipes: Path) -> None:
    root = _fleet(tmp_path, version="v26.3.3")
    (f,) = only(check(root, recipes_dir=recipes), "GG053")
    assert f.file == "fleet.yaml" and f.line == line_of(root / "fleet.yaml", "gpuOperatorVersion")
    enforced = _fleet(tmp_path / "e", version="v26.3.3", recipePolicy="enforce")
    only(check(enforced, recipes_dir=recipes), "GG053", Severity.ERROR)


def test_gg056_not_compared(tmp_path: Path, recipes: Path) -> None:
    root = _fleet(tmp_path, version=None)
    assert (
        "declares no gpuOperatorVersion"
        in only(check(root, recipes_dir=recipes), "GG056")[0].message
    )
    assert "without --recipes" in only(check(root), "GG056")[0].message


class LiveClient:
    def __init__(self, version: str, nodes: list[dict[str, Any]]) -> None:
        self.version, self.nodes = version, nodes

    def list(self, api_version: str, kind: str, **_: Any) -> dict[str, Any]:
        return {"items": self.nodes}

    def apply(self, obj: Any, **_: Any) -> Any:
        return obj

    def request(self, method: str, path: str, **_: Any) -> Any:
        assert (method, path) == ("GET", "/version")
        return {"gitVersion": self.version}


def _node(name: str, **labels: str) -> dict[str, Any]:
    nfd = "feature.node.kubernetes.io/"
    return {
        "metadata": {
            "name": name,
            "labels": {"node.kubernetes.io/pool": "a", **{nfd + k: v for k, v in labels.items()}},
        }
    }


def test_gg055_live_cluster_constraints(tmp_path: Path, recipes: Path) -> None:
    good = {
        "system-os_release.ID": "ubuntu",
        "system-os_release.VERSION_ID": "24.04",
        "kernel-version.full": "6.8.0-1015-aws",
    }
    nodes = [_node("n1", **good), _node("n2", **{**good, "system-os_release.VERSION_ID": "22.04"})]
    root = _fleet(tmp_path)
    client = LiveClient("v1.31.2", nodes)
    findings = check(root, recipes_dir=recipes, client_factory=lambda ctx: client)
    msgs = sorted(f.message for f in only(findings, "GG055"))
    assert "Kubernetes v1.31.2" in msgs[1] and ">= 1.32.4" in msgs[1]
    assert "OS.release.VERSION_ID 24.04" in msgs[0] and "n2 (22.04)" in msgs[0]
    client = LiveClient("v1.36.3", [_node("n1", **good), _node("n3")])
    findings = check(root, recipes_dir=recipes, client_factory=lambda ctx: client)
    assert not [f for f in findings if f.code == "GG055"]
    assert any("no NFD label" in f.message for f in only(findings, "GG056"))


def test_gg037_cuda_and_gg038_operator_release_in_preflight(tmp_path: Path) -> None:
    root = _fleet(
        tmp_path,
        version="v25.10.1",
        pool={"gpu": {**H100, "cuda": "13.0"}},
        policy={"driver": {"version": "595.91.07"}},
    )
    findings = check(root)
    (old,) = only(findings, "GG038")
    assert old.file == "nodepools/a/clusterpolicy.yaml" and "values-v25.10.1.yaml" in old.source
    assert not [f for f in findings if f.code == "GG037"]
    root = _fleet(
        tmp_path / "b",
        pool={"gpu": {**H100, "cuda": "13.0"}},
        policy={"driver": {"version": "570.195.03"}},
    )
    (cuda,) = only(check(root), "GG037")
    assert "needs driver >= 580" in cuda.message and cuda.source


def test_the_issue_case_r470_on_hopper_is_an_error(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {"a": {"gpu": H100}},
        overlays={"a": overlay({"driver": {"version": "470.141.10"}})},
    )
    (f,) = only(check(root), "GG030")
    assert "predates hopper" in f.message and f.source


def test_recipe_shape_errors_in_pool_yaml(tmp_path: Path) -> None:
    root = _fleet(tmp_path, {"name": LEAF, "criteria": {"service": "eks"}})
    (f,) = only(check(root), "GG002")
    assert "not both" in f.message and f.file == "nodepools/a/pool.yaml"


def test_cli_json_carries_sources_and_enforce_fails(
    tmp_path: Path, recipes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _fleet(tmp_path, version="v26.3.3", recipePolicy="enforce")
    rc = run_cli(
        ["check", str(root), "--commit", "c", "--recipes", str(recipes), "--format", "json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    (f,) = [f for f in doc["findings"] if f["code"] == "GG053"]
    assert f["severity"] == "error"
    assert f["source"] == at(recipes, "overlays/base.yaml", "version: v25.10.1")


def test_cli_usage_error_for_a_missing_recipes_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = run_cli(["check", str(_fleet(tmp_path)), "--recipes", str(tmp_path / "nope")])
    assert rc == 2 and "recipes directory" in capsys.readouterr().err


def run_cli(argv: list[str]) -> int:
    """`gitops-gpu check` through its own argument parser (the check command alone)."""
    parser = argparse.ArgumentParser()
    check_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


def test_pr_status_names_the_worst_recipe_finding(tmp_path: Path, recipes: Path) -> None:
    warned = run_preflight(_fleet(tmp_path, version="v26.3.3"), commit="c", recipes_dir=recipes)
    text = check_cli.status_description(warned)
    # the scaffold's base switches DCGM off; the recipe pins it on (plus GG053: v26.3.3)
    assert text.startswith("clean (2 warnings; worst GG054 pool 'a': dcgm.enabled is false")
    enforced = _fleet(tmp_path / "e", version="v26.3.3", recipePolicy="enforce")
    failed = run_preflight(enforced, commit="c", recipes_dir=recipes)
    assert check_cli.status_description(failed).startswith("2 errors: GG054 pool 'a'")


def test_values_file_problems(tmp_path: Path) -> None:
    named = _overlay(
        "h100",
        criteria={"accelerator": "h100"},
        componentRefs=[{"name": "gpu-operator", "valuesFile": "components/gpu-operator/v.yaml"}],
    )
    cat = _catalog(tmp_path, {"overlays/h100.yaml": named})
    (gone,) = only(check(_fleet(tmp_path, "h100"), recipes_dir=cat), "GG050")
    assert "components/gpu-operator/v.yaml" in gone.message and "does not exist" in gone.message
    (cat / "components/gpu-operator").mkdir(parents=True)
    (cat / "components/gpu-operator/v.yaml").write_text("driver:\n  version: [580\n")
    (bad,) = only(check(_fleet(tmp_path / "b", "h100"), recipes_dir=cat), "GG051")
    assert bad.file == f"{cat}/components/gpu-operator/v.yaml" and bad.line == 3


def test_a_missing_recipes_dir_is_a_usage_error_even_without_recipe_pools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_repo(tmp_path, {"a": {"gpu": H100}})
    assert run_cli(["check", str(root), "--recipes", str(tmp_path / "nope")]) == 2
    assert "recipes directory" in capsys.readouterr().err
