"""Multi-cluster fleets: bad cluster references are preflight errors with file:line, and a
controller is told which cluster it manages."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_gpu.errors import TestbedError
from gitops_gpu.execute import cluster_error
from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu.preflight import run_preflight
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.rollout import span
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed.nodes import read_pool_shapes

CLUSTERS = [{"name": "east", "context": "ctx-east"}, {"name": "west", "context": "ctx-west"}]
POOLS = {"a": {"cluster": "east"}, "b": {"cluster": "west"}}


def _line(path: Path, needle: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text)


def _errors(root: Path, **kw: str) -> list[Finding]:
    result = run_preflight(root, commit="c", **kw)  # type: ignore[arg-type]
    return [f for f in result.findings if f.severity == "error"]


def _kubeconfig(tmp: Path, contexts: list[str]) -> str:
    items = "".join(
        f"- name: {c}\n  context: {{cluster: x, user: x}}\n" for c in contexts
    )  # no server is ever contacted: the check reads the file
    path = tmp / "kubeconfig"
    path.write_text(f"apiVersion: v1\nkind: Config\ncontexts:\n{items}")
    return str(path)


def test_pool_naming_an_unknown_cluster(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "r", {**POOLS, "b": {"cluster": "north"}}, clusters=CLUSTERS)
    (f,) = _errors(root)
    assert (f.code, f.file) == ("GG004", "nodepools/b/pool.yaml")
    assert f.line == _line(root / f.file, "cluster: north")
    assert "names cluster 'north', which fleet.yaml does not define" in f.message


def test_two_clusters_with_the_same_name(tmp_path: Path) -> None:
    clusters = [*CLUSTERS, {"name": "east", "context": "ctx-other"}]
    root = write_repo(tmp_path / "r", POOLS, clusters=clusters)
    (f,) = _errors(root)
    assert (f.code, f.file, f.field) == ("GG004", "fleet.yaml", "spec.clusters[2].name")
    assert "name: east" in (root / "fleet.yaml").read_text().splitlines()[f.line - 1]
    assert f.line > _line(root / "fleet.yaml", "name: east")  # the second one
    assert "cluster 'east' is defined twice" in f.message


def test_a_context_missing_from_the_kubeconfig(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "r", POOLS, clusters=CLUSTERS)
    kubeconfig = _kubeconfig(tmp_path, ["ctx-east", "ctx-south"])
    (f,) = _errors(root, kubeconfig=kubeconfig)
    assert (f.code, f.file, f.field, f.cluster) == (
        "GG004",
        "fleet.yaml",
        "spec.clusters[1].context",
        "west",
    )
    assert f.line == _line(root / "fleet.yaml", "context: ctx-west")
    assert "context 'ctx-west', which" in f.message and "ctx-east, ctx-south" in f.message


def test_controller_cluster_choice() -> None:
    assert cluster_error(["default"], None) is None
    assert cluster_error(["east", "west"], "west") is None
    many = cluster_error(["west", "east"], None)
    assert many is not None and "east, west" in str(many) and "--cluster NAME" in str(many)
    unknown = cluster_error(["east", "west"], "north")
    assert unknown is not None and str(unknown).startswith("--cluster north: the fleet lists only")


def test_testbed_shapes_for_one_cluster(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "r", {**POOLS, "c": {"cluster": "east"}}, clusters=CLUSTERS)
    assert [s.name for s in read_pool_shapes(root, "east")] == ["a", "c"]
    assert [s.name for s in read_pool_shapes(root, "west")] == ["b"]
    assert [s.name for s in read_pool_shapes(root)] == ["a", "b", "c"]
    with pytest.raises(TestbedError, match="no pool names cluster 'north'"):
        read_pool_shapes(root, "north")


def test_the_two_cluster_example_is_clean_and_spans_a_stage() -> None:
    root = paths.PROJECT_ROOT / "fleet-repo-example-two-clusters"
    result = run_preflight(root, commit="c", crds_dir=paths.default_crds_dir())
    assert [f for f in result.findings if f.severity == "error"] == []
    compiled = result.compiled
    assert compiled is not None and sorted(compiled.clusters) == ["prod-eu", "staging"]
    pool_clusters = {p: c.name for c in compiled.clusters.values() for p in c.pools}
    spans = {s.name: span.stage_clusters(s, pool_clusters) for s in compiled.stages}
    assert spans == {
        "canary": ("staging",),
        "fleet": ("prod-eu", "staging"),
        "training": ("prod-eu",),
    }
