"""A cluster's gpuOperator chart reaches the export whole, by the tree rules, on both sides.

Helm renders the chart from the exported tree, so its non-YAML files (``templates/*.tpl``,
``NOTES.txt``, ``.helmignore``, a ``.tgz``) must be there, and nothing of it may be a symlink,
a submodule or a special file, or over the limits. Each case is a real git repo (git CLI), run
through the controller's export of a commit (from a mirror, as sync/source.py does) and through
``check``'s export of the working tree.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gitops_gpu.fleet import yamlio
from gitops_gpu.fleet.export import Export, TreeError, export_commit, export_worktree
from gitops_gpu.fleet.problems import TREE_CODE, YAML_CODE
from gitops_gpu.fleet.scaffold import write_repo

H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
CHART = "operator/gpu-operator"
CHART_FILES = {
    "Chart.yaml": b"apiVersion: v2\nname: gpu-operator\nversion: v26.7.0\n",
    "values.yaml": b"driver:\n  enabled: true\n",
    ".helmignore": b".git/\n*.swp\n",
    "templates/_helpers.tpl": b'{{- define "gpu-operator.name" -}}gpu-operator{{- end }}\n',
    "templates/NOTES.txt": b"The GPU Operator is installed.\n",
    "templates/operator.yaml": b"kind: Deployment\nmetadata:\n  name: gpu-operator\n",
}
Exporter = Callable[[Path, Path], Export]


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    return path


def _commit(work: Path) -> None:
    git(work, "add", "-A")
    git(work, "commit", "-q", "--allow-empty", "-m", "edit")


def _put(work: Path, rel: str, data: bytes) -> None:
    (work / rel).parent.mkdir(parents=True, exist_ok=True)
    (work / rel).write_bytes(data)


def _clusters(work: Path, *releases: str) -> None:
    """fleet.yaml gains spec.clusters: one cluster without gpuOperator, then one per release
    (each a YAML flow mapping), so the first release is clusters[1]."""
    text = "  clusters:\n  - name: edge\n"
    for i, release in enumerate(releases):
        text += f"  - name: c{i}\n    gpuOperator: {release}\n"
    with (work / "fleet.yaml").open("a") as fh:
        fh.write(text)


def _release(chart: str = CHART, values: str | None = "operator/values.yaml") -> str:
    extra = f", values: '{values}'" if values else ""
    return f"{{version: v26.7.0, chart: '{chart}'{extra}}}"


def _chart(work: Path, at: str = CHART) -> None:
    for rel, data in CHART_FILES.items():
        _put(work, f"{at}/{rel}", data)


def _tgz() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, data in CHART_FILES.items():
            info = tarfile.TarInfo(f"gpu-operator/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir()}


def _line_of(work: Path, text: str) -> int:
    lines = (work / "fleet.yaml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    work = _repo(tmp_path / "fleet")
    write_repo(work, {"a": H100}, stages=[{"name": "all", "pools": ["a"]}])
    _put(work, "README.md", b"# fleet\n")
    _put(work, "operator/values.yaml", b"toolkit:\n  enabled: true\n")
    return work


def _from_commit(work: Path, dest: Path) -> Export:
    _commit(work)
    mirror = dest.with_name(dest.name + ".git")
    git(work.parent, "clone", "-q", "--mirror", str(work), str(mirror))
    return export_commit(mirror, git(work, "rev-parse", "HEAD"), dest)


def _from_worktree(work: Path, dest: Path) -> Export:
    _commit(work)
    return export_worktree(work, dest)


@pytest.fixture(params=["commit", "worktree"])
def export(request: pytest.FixtureRequest) -> Exporter:
    return _from_commit if request.param == "commit" else _from_worktree


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small limits, so a size case costs kilobytes (the defaults: 1 MiB and 16 MiB)."""
    monkeypatch.setattr(yamlio.LIMITS, "file_bytes", 4096)
    monkeypatch.setattr(yamlio.LIMITS, "repo_bytes", 22_000)


def test_chart_directory_is_exported_whole(fleet: Path, tmp_path: Path, export: Exporter) -> None:
    _chart(fleet)
    _clusters(fleet, _release())
    dest = tmp_path / "out"
    result = export(fleet, dest)
    for rel, data in CHART_FILES.items():
        assert (dest / CHART / rel).read_bytes() == data, rel
    assert (dest / "operator/values.yaml").is_file()
    assert not (dest / "README.md").exists()
    assert result.skipped == []


def test_tgz_chart_is_exported(fleet: Path, tmp_path: Path, export: Exporter) -> None:
    tgz = _tgz()
    _put(fleet, "operator/gpu-operator-v26.7.0.tgz", tgz)
    _put(fleet, "operator/values.txt", b"driver:\n  enabled: false\n")
    _clusters(fleet, _release("operator/gpu-operator-v26.7.0.tgz", "operator/values.txt"))
    dest = tmp_path / "out"
    export(fleet, dest)
    assert (dest / "operator/gpu-operator-v26.7.0.tgz").read_bytes() == tgz
    # a values file without a YAML suffix is what Helm reads too
    assert (dest / "operator/values.txt").read_bytes() == b"driver:\n  enabled: false\n"


def test_clusters_sharing_one_chart_write_it_once(
    fleet: Path, tmp_path: Path, export: Exporter
) -> None:
    _chart(fleet)
    _clusters(fleet, _release(), _release(values=None), _release(f"./{CHART}/"))
    dest = tmp_path / "out"
    export(fleet, dest)
    assert (dest / CHART / "templates/_helpers.tpl").read_bytes() == CHART_FILES[
        "templates/_helpers.tpl"
    ]


def test_symlink_in_the_chart_is_refused(fleet: Path, tmp_path: Path, export: Exporter) -> None:
    _chart(fleet)
    helpers = fleet / CHART / "templates/_helpers.tpl"
    helpers.unlink()
    helpers.symlink_to("/etc/passwd")
    _clusters(fleet, _release())
    dest = tmp_path / "out"
    with pytest.raises(TreeError) as info:
        export(fleet, dest)
    exc = info.value
    assert (exc.code, exc.file, exc.field) == (
        TREE_CODE,
        "fleet.yaml",
        "spec.clusters[1].gpuOperator.chart",
    )
    assert exc.line == _line_of(fleet, "gpuOperator:")
    assert f"{CHART}/templates/_helpers.tpl in the chart is a symlink" in exc.message
    assert "symlink" in exc.fix
    assert not [p for p in dest.rglob("*") if p.is_symlink()]


def test_symlinked_chart_directory_is_refused(
    fleet: Path, tmp_path: Path, export: Exporter
) -> None:
    _chart(fleet, "vendor/gpu-operator")
    (fleet / "operator/gpu-operator").symlink_to("../vendor/gpu-operator")
    _clusters(fleet, _release())
    with pytest.raises(TreeError, match="the chart operator/gpu-operator is a symlink") as info:
        export(fleet, tmp_path / "out")
    assert (info.value.file, info.value.field) == (
        "fleet.yaml",
        "spec.clusters[1].gpuOperator.chart",
    )


def test_chart_below_a_symlink_is_refused(fleet: Path, tmp_path: Path, export: Exporter) -> None:
    _chart(fleet, "vendor/gpu-operator")
    (fleet / "charts").symlink_to("vendor")
    _clusters(fleet, _release("charts/gpu-operator"))
    with pytest.raises(TreeError, match="inside the symlink charts") as info:
        export(fleet, tmp_path / "out")
    assert (info.value.file, info.value.field) == (
        "fleet.yaml",
        "spec.clusters[1].gpuOperator.chart",
    )


def test_chart_as_a_submodule_is_refused(fleet: Path, tmp_path: Path, export: Exporter) -> None:
    vendor = _repo(tmp_path / "vendor")
    _chart(vendor, ".")
    _commit(vendor)
    git(fleet, "submodule", "add", "-q", str(vendor), CHART)
    _clusters(fleet, _release())
    with pytest.raises(TreeError, match="is a git submodule") as info:
        export(fleet, tmp_path / "out")
    assert (info.value.file, info.value.field) == (
        "fleet.yaml",
        "spec.clusters[1].gpuOperator.chart",
    )
    assert info.value.fix.startswith("vendor the chart's files")


def test_values_inside_a_submodule_is_refused(
    fleet: Path, tmp_path: Path, export: Exporter
) -> None:
    vendor = _repo(tmp_path / "vendor")
    _chart(vendor, ".")
    _commit(vendor)
    git(fleet, "submodule", "add", "-q", str(vendor), CHART)
    _clusters(fleet, _release("oci://nvcr.io/nvidia/gpu-operator", f"{CHART}/values.yaml"))
    with pytest.raises(TreeError, match=f"inside the submodule {CHART}") as info:
        export(fleet, tmp_path / "out")
    assert info.value.field == "spec.clusters[1].gpuOperator.values"


def test_fifo_in_the_chart_is_refused(fleet: Path, tmp_path: Path) -> None:
    """git cannot commit a fifo: only the working tree can hold one."""
    _chart(fleet)
    _clusters(fleet, _release())
    os.mkfifo(fleet / CHART / "templates/pipe.tpl")
    with pytest.raises(TreeError, match=r"pipe\.tpl in the chart is a fifo") as info:
        export_worktree(fleet, tmp_path / "out")
    assert (info.value.file, info.value.field) == (
        "fleet.yaml",
        "spec.clusters[1].gpuOperator.chart",
    )


def test_chart_file_over_the_file_limit_is_refused(
    fleet: Path, tmp_path: Path, export: Exporter, limits: None
) -> None:
    _chart(fleet)
    _put(fleet, f"{CHART}/templates/big.tpl", b"#" * 5000)
    _clusters(fleet, _release())
    with pytest.raises(TreeError, match=r"big\.tpl in the chart is 5000 bytes") as info:
        export(fleet, tmp_path / "out")
    exc = info.value
    assert (exc.code, exc.file, exc.field) == (
        YAML_CODE,
        "fleet.yaml",
        "spec.clusters[1].gpuOperator.chart",
    )


def test_tgz_chart_over_the_file_limit_is_refused(
    fleet: Path, tmp_path: Path, export: Exporter, limits: None
) -> None:
    _put(fleet, "operator/gpu-operator.tgz", os.urandom(5000))
    _clusters(fleet, _release("operator/gpu-operator.tgz"))
    with pytest.raises(TreeError, match=r"the chart operator/gpu-operator\.tgz is 5000") as info:
        export(fleet, tmp_path / "out")
    assert (info.value.code, info.value.file) == (YAML_CODE, "fleet.yaml")


def test_chart_over_the_repo_limit_is_refused(
    fleet: Path, tmp_path: Path, export: Exporter, limits: None
) -> None:
    """Five 4,000 byte templates: each within the file limit, all within the repo's; with a
    3,000 byte YAML file elsewhere, the fleet's files and the chart's are over it together."""
    _chart(fleet)
    for i in range(5):
        _put(fleet, f"{CHART}/templates/part-{i}.tpl", b"#" * 4000)
    _clusters(fleet, _release())
    export(fleet, tmp_path / "out")
    _put(fleet, "docs/notes.yaml", b"#" * 3000)
    with pytest.raises(TreeError, match="exceed 22000 bytes together") as info:
        export(fleet, tmp_path / "out2")
    exc = info.value
    assert (exc.code, exc.file, exc.field) == (
        YAML_CODE,
        "fleet.yaml",
        "spec.clusters[1].gpuOperator.chart",
    )


def test_remote_chart_exports_nothing_extra(fleet: Path, tmp_path: Path, export: Exporter) -> None:
    _chart(fleet)
    _clusters(fleet, _release("oci://nvcr.io/nvidia/gpu-operator"))
    dest = tmp_path / "out"
    export(fleet, dest)
    assert _files(dest) == {
        "fleet.yaml",
        "base/clusterpolicy.yaml",
        "nodepools/a/pool.yaml",
        "operator/values.yaml",
        f"{CHART}/Chart.yaml",
        f"{CHART}/values.yaml",
        f"{CHART}/templates/operator.yaml",
    }


def test_files_outside_the_chart_are_still_not_exported(
    fleet: Path, tmp_path: Path, export: Exporter
) -> None:
    _chart(fleet)
    _put(fleet, "operator/gpu-operator-old/templates/_helpers.tpl", b"old\n")  # a prefix only
    _put(fleet, "operator/NOTES.txt", b"beside the chart\n")
    _put(fleet, "scripts/render.sh", b"#!/bin/sh\n")
    _clusters(fleet, _release())
    dest = tmp_path / "out"
    export(fleet, dest)
    assert _files(dest) == {
        "fleet.yaml",
        "base/clusterpolicy.yaml",
        "nodepools/a/pool.yaml",
        "operator/values.yaml",
        *(f"{CHART}/{rel}" for rel in CHART_FILES),
    }


def test_missing_chart_exports_nothing_extra(fleet: Path, tmp_path: Path, export: Exporter) -> None:
    """Preflight reports a chart that is not there; the export has nothing to add."""
    _clusters(fleet, _release("operator/not-there"), "not a mapping")
    dest = tmp_path / "out"
    export(fleet, dest)
    assert _files(dest) == {
        "fleet.yaml",
        "base/clusterpolicy.yaml",
        "nodepools/a/pool.yaml",
        "operator/values.yaml",
    }
