"""A cluster's gpuOperator release, rendered by the real Helm from the real GPU Operator chart
(v26.7.0 and v26.3.3 from ../shared/thirdparty) in a real git fleet repo: what preflight says
about it, and what ``compile --out`` shows for review."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu import helm as product_helm
from gitops_gpu.cli import main
from gitops_gpu.errors import BuildError
from gitops_gpu.preflight import Finding, run_preflight
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import helm

CRDS = paths.default_crds_dir()
VALUES = "operator:\n  version: v26.7.0\n"


@pytest.fixture(scope="module", autouse=True)
def helm_env() -> Any:
    try:
        path = helm.ensure_helm(progress=lambda _m: None)
    except BuildError as exc:
        msg = f"helm is missing and could not be built (make binaries):\n{exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    old = os.environ.get(product_helm.ENV)
    os.environ[product_helm.ENV] = str(path)
    yield path
    if old is None:
        os.environ.pop(product_helm.ENV, None)
    else:
        os.environ[product_helm.ENV] = old


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def fleet(
    tmp_path: Path,
    *,
    values: str | None = VALUES,
    version: str = "v26.7.0",
    chart: str = "operator/gpu-operator",
    extra: str = "",
    edit: Callable[[Path], None] | None = None,
) -> Path:
    """The example fleet with the release's chart committed under operator/."""
    root = tmp_path / "fleet"
    shutil.copytree(paths.fleet_example(), root)
    paths.extract_operator_chart(version, root / "operator")
    lines = [f"        version: {version}", f"        chart: {chart}"]
    if values is not None:
        (root / "operator" / "values.yaml").write_text(values)
        lines.append("        values: operator/values.yaml")
    text = (root / "fleet.yaml").read_text()
    block = "    - name: default\n      gpuOperator:\n" + "\n".join(lines) + "\n" + extra
    (root / "fleet.yaml").write_text(text.replace("    - name: default\n", block, 1))
    if edit is not None:
        edit(root)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "fleet with its operator release")
    return root


def findings(root: Path, code: str) -> list[Finding]:
    result = run_preflight(root, crds_dir=CRDS)
    return [f for f in result.findings if f.code == code]


def line_of(path: Path, needle: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if needle in t)


def test_the_release_renders_clean_and_compile_shows_what_it_applies(tmp_path: Path) -> None:
    root = fleet(tmp_path)
    result = run_preflight(root, crds_dir=CRDS)
    assert [
        f.text()
        for f in result.findings
        if f.code.startswith("GG0") and f.severity.value == "error"
    ] == []
    release = result.releases["default"]
    assert release.operator_image == "nvcr.io/nvidia/gpu-operator:v26.7.0"
    assert {c["metadata"]["name"] for c in release.crds} >= {
        "clusterpolicies.nvidia.com",
        "nvidiadrivers.nvidia.com",
    }
    assert all(o["kind"] != "CustomResourceDefinition" for o in release.objects)
    left = dict(release.dropped)
    assert "ClusterPolicy/cluster-policy" in left  # the pools compile it
    assert "Job/gpu-operator-upgrade-crd" in left  # CRDs first replaces the hook

    out = tmp_path / "out"
    assert main(["compile", str(root), "--out", str(out)]) == 0
    op = out / "default" / "gpu-operator"
    deployment = YAML(typ="safe").load((op / "deployment-gpu-operator.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v26.7.0")
    assert (op / "crds" / "nvidiadrivers.nvidia.com.yaml").is_file()
    assert "upgrade-crd" in (op / "left-out.yaml").read_text()
    assert not list(op.glob("clusterpolicy-*")) and not list(op.glob("job-*"))


def test_a_misspelt_values_key_names_its_line_and_the_key_meant(tmp_path: Path) -> None:
    typos = "daemonset:\n  updateStrategy: OnDelete\n"
    typos += "driver:\n  upgradePolicy:\n    maxParalelUpgrades: 2\n"
    values = VALUES + typos
    root = fleet(tmp_path, values=values)
    found = {f.field: f for f in findings(root, "GG089")}
    assert set(found) == {"daemonset", "driver.upgradePolicy.maxParalelUpgrades"}
    vf = root / "operator" / "values.yaml"
    assert (found["daemonset"].file, found["daemonset"].line) == (
        "operator/values.yaml",
        line_of(vf, "daemonset:"),
    )
    assert "did you mean 'daemonsets'" in found["daemonset"].fix
    assert "maxParallelUpgrades" in found["driver.upgradePolicy.maxParalelUpgrades"].fix


def test_the_operator_image_must_be_the_declared_release(tmp_path: Path) -> None:
    root = fleet(tmp_path, values=None)  # the source chart defaults to its appVersion
    (bad,) = findings(root, "GG092")
    assert "gpu-operator:main-latest" in bad.message and "v26.7.0" in bad.message
    assert (bad.file, bad.line) == ("fleet.yaml", line_of(root / "fleet.yaml", "version: v26.7.0"))
    assert "operator.version: v26.7.0" in bad.fix


def test_values_helm_cannot_render_are_an_error_with_helms_words(tmp_path: Path) -> None:
    root = fleet(tmp_path, values=VALUES + "daemonsets: not-a-map\n")
    (bad,) = findings(root, "GG091")
    assert "helm template" in bad.message and bad.field == "spec.clusters[0].gpuOperator.chart"
    assert bad.line == line_of(root / "fleet.yaml", "chart: operator/gpu-operator")


def test_a_missing_chart_or_values_file_is_named(tmp_path: Path) -> None:
    root = fleet(tmp_path, chart="operator/gpu-operatr")
    (bad,) = findings(root, "GG088")
    assert "operator/gpu-operatr" in bad.message and bad.file == "fleet.yaml"
    assert main(["compile", str(root), "--out", str(tmp_path / "out")]) != 0
    assert not (tmp_path / "out").exists()  # nothing written when the release does not render


def test_rolling_operands_cannot_be_staged_unless_allowed(tmp_path: Path) -> None:
    def rolling(root: Path) -> None:
        base = root / "base" / "clusterpolicy.yaml"
        text = base.read_text()
        assert "daemonsets:" in text
        base.write_text(
            text.replace("daemonsets:\n", "daemonsets:\n    updateStrategy: RollingUpdate\n", 1)
        )

    (bad,) = findings(fleet(tmp_path / "a", edit=rolling), "GG090")
    assert bad.severity.value == "error" and "RollingUpdate" in bad.message
    allowed = fleet(tmp_path / "b", edit=rolling, extra="        allowUnstagedUpgrade: true\n")
    (meant,) = findings(allowed, "GG090")
    assert meant.severity.value == "warning"


def test_a_packaged_chart_renders_as_its_folder(tmp_path: Path, helm_env: Path) -> None:
    def package(root: Path) -> None:
        subprocess.run(
            [
                str(helm_env),
                "package",
                "gpu-operator",
                "--version",
                "v26.7.0",
                "--app-version",
                "v26.7.0",
            ],
            cwd=root / "operator",
            check=True,
            capture_output=True,
        )
        shutil.rmtree(root / "operator" / "gpu-operator")

    root = fleet(tmp_path, values=None, chart="operator/gpu-operator-v26.7.0.tgz", edit=package)
    result = run_preflight(root, crds_dir=CRDS)
    assert [f.text() for f in result.findings if f.code in ("GG088", "GG091", "GG092")] == []
    assert result.releases["default"].operator_image == "nvcr.io/nvidia/gpu-operator:v26.7.0"
