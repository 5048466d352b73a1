"""Loader: every refusal names file, line and column; positions survive loading."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import yamlio
from gitops_gpu.fleet.loader import RepoError, RepoLoadError, load_repo
from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu_dev import paths

EXAMPLE = paths.fleet_example()


def _errors(root: Path) -> list[RepoError]:
    with pytest.raises(RepoLoadError) as info:
        load_repo(root)
    return info.value.errors


def _one(root: Path, code: str) -> RepoError:
    errs = [e for e in _errors(root) if e.code == code]
    assert errs, f"no {code} in {[str(e) for e in _errors(root)]}"
    return errs[0]


def _repo(tmp_path: Path) -> Path:
    return write_repo(tmp_path / "repo", {"a": {}, "b": {"nodeSelector": {"x": "b"}}})


def test_example_repo_loads_with_positions() -> None:
    repo = load_repo(EXAMPLE)
    assert sorted(repo.pools) == ["canary", "infer-l40s", "train-b200", "train-h100"]
    doc = repo.pools["train-b200"].policy_doc
    assert doc is not None
    lines = (EXAMPLE / doc.file).read_text().splitlines()
    expected = next(i for i, t in enumerate(lines, 1) if t.startswith("    kernelModuleType:"))
    assert doc.positions[("spec", "driver", "kernelModuleType")] == (expected, 5)
    assert repo.stage_of("train-h100") == "training"


@pytest.mark.parametrize(
    ("text", "needle", "line", "column"),
    [
        ("a: 1\nb:\n  c: 2\n  c: 3\n", "duplicate key 'c' (first at line 3)", 4, 3),
        ("a: 1\n\tb: 2\n", "tab character in indentation", 2, 1),
        ("a: &anchor [1]\nb: *anchor\n", "YAML anchor '&anchor'", 1, 4),
        ("a: [1, 2\nb: 3\n", "YAML syntax error", 2, 2),
        ("a: !!binary aGVsbG8=\n", "unsupported YAML tag", 1, 4),
        ("a: 1\n---\nb: 2\n", "more than one YAML document", 3, 1),
    ],
)
def test_yaml_refusals_carry_position(text: str, needle: str, line: int, column: int) -> None:
    with pytest.raises(FleetError) as info:
        yamlio.parse_single("f.yaml", text)
    err = info.value
    assert needle in str(err)
    assert (err.file, err.line, err.column) == ("f.yaml", line, column)
    assert str(err).startswith(f"f.yaml:{line}:{column}: ")
    assert err.fix


def test_billion_laughs_is_refused_before_expansion() -> None:
    lol = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)
    )
    with pytest.raises(FleetError, match="anchor"):
        yamlio.parse_single("lol.yaml", lol)


def test_merge_key_refused() -> None:
    with pytest.raises(FleetError, match="merge key"):
        yamlio.parse_single("m.yaml", "<<: {a: 1}\nb: 2\n")


def test_scalars_follow_yaml_1_2(tmp_path: Path) -> None:
    doc = yamlio.parse_single(
        "s.yaml", "a: yes\nb: on\nc: 0x1F\nd: 1.5\ne: ~\nf: 2024-01-01\ng: '7'\n"
    )
    assert doc.data == {
        "a": "yes",
        "b": "on",
        "c": 31,
        "d": 1.5,
        "e": None,
        "f": "2024-01-01",
        "g": "7",
    }


def test_non_utf8_file(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "nodepools" / "a" / "pool.yaml").write_bytes(b"apiVersion: x\nkind: \xff\n")
    err = _one(root, "GG001")
    assert (err.file, err.line, err.column) == ("nodepools/a/pool.yaml", 2, 7)
    assert "UTF-8" in str(err)


def test_oversized_file(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "nodepools" / "a" / "clusterpolicy.yaml").write_text("a: " + "x" * (1 << 20) + "\n")
    err = _one(root, "GG001")
    assert err.file == "nodepools/a/clusterpolicy.yaml"
    assert "byte limit" in str(err)


def test_symlink_leaving_the_repo(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    outside = tmp_path / "outside.yaml"
    outside.write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\n")
    os.symlink(outside, root / "nodepools" / "a" / "clusterpolicy.yaml")
    err = _one(root, "GG001")
    assert err.file == "nodepools/a/clusterpolicy.yaml"
    assert "outside the repository" in str(err)


def test_symlink_inside_the_repo_is_fine(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "shared.yaml").write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nspec: {}\n")
    os.symlink(root / "shared.yaml", root / "nodepools" / "a" / "clusterpolicy.yaml")
    assert load_repo(root).pools["a"].policy_doc is not None


def test_base_outside_repo(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    text = (root / "fleet.yaml").read_text().replace("base/clusterpolicy.yaml", "../x.yaml")
    (root / "fleet.yaml").write_text(text)
    err = _one(root, "GG004")
    assert err.file == "fleet.yaml" and err.line > 0 and "outside the repository" in str(err)


def test_every_broken_file_is_reported_together(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "nodepools" / "a" / "pool.yaml").write_text("a: [\n")
    (root / "nodepools" / "b" / "pool.yaml").write_text("x: 1\nx: 2\n")
    files = sorted(e.file for e in _errors(root))
    assert files == ["nodepools/a/pool.yaml", "nodepools/b/pool.yaml"]


def test_missing_fleet_file(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "fleet.yaml").unlink()
    err = _one(root, "GG004")
    assert err.file == "fleet.yaml" and "missing" in str(err)


@pytest.mark.parametrize("name", ["clusterpolicy.yml", "ClusterPolicy.yaml", "pool.yml"])
def test_misspelt_pool_file_is_not_ignored(tmp_path: Path, name: str) -> None:
    root = _repo(tmp_path)
    (root / "nodepools" / "a" / name).write_text("apiVersion: nvidia.com/v1\n")
    err = _one(root, "GG004")
    assert err.file == f"nodepools/a/{name}" and "would be ignored" in str(err)


def test_pool_file_outside_a_pool_folder(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "nodepools" / "c.yaml").write_text("kind: NodePool\n")
    assert "sits directly in nodepools/" in str(_one(root, "GG004"))


def test_merged_policy_is_a_new_object_per_call() -> None:
    repo = load_repo(EXAMPLE)
    pool = sorted(repo.pools)[0]
    first = repo.merged_policy(pool)
    first["spec"]["driver"]["version"] = "mutated"
    first["spec"].clear()
    again = repo.merged_policy(pool)
    assert again["spec"] and again["spec"]["driver"].get("version") != "mutated"
    other = repo.merged_policy(sorted(repo.pools)[-1])
    assert other["spec"] is not again["spec"]


def test_policy_view_is_built_once_and_equals_a_fresh_merge() -> None:
    repo = load_repo(EXAMPLE)
    pool = sorted(repo.pools)[0]
    view = repo.policy_view(pool)
    assert repo.policy_view(pool) is view
    fresh = repo.merged_policy(pool)
    assert fresh == view and fresh is not view
    fresh["spec"].clear()  # a caller's own copy: the shared view is untouched
    assert view["spec"]
