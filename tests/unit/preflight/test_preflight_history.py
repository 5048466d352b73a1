"""``--base REV``: immutable fields, blast radius and the plan, from real git history."""

from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path
from typing import Any

import git
import pytest

from gitops_gpu.errors import SourceError
from gitops_gpu.fleet.export import TreeError
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.preflight import run_preflight
from gitops_gpu.preflight.history import export_revision, head_commit
from gitops_gpu.preflight.plan import plan_json, plan_text

H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
STAGES = [{"name": "canary", "pools": ["a"]}, {"name": "prod", "pools": ["b"]}]


def _commit(repo: git.Repo, message: str) -> str:
    repo.git.add(A=True)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    with repo.git.custom_environment(**env):
        repo.git.commit(m=message, no_gpg_sign=True)
    return str(repo.head.commit.hexsha)


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[git.Repo, Path, str]:
    """A git repo whose fleet lives in a subdirectory (as in a monorepo)."""
    repo = git.Repo.init(tmp_path)
    root = write_repo(
        tmp_path / "gpu-fleet",
        {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}},
        stages=STAGES,
    )
    return repo, root, _commit(repo, "v1")


def _rewrite(root: Path, **kw: Any) -> None:
    write_repo(root, {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}}, stages=STAGES, **kw)


def _check(root: Path, base: str) -> Any:
    return run_preflight(root, base_rev=base, today=datetime.date(2026, 11, 1))


def test_no_change_no_plan(fleet: tuple[git.Repo, Path, str]) -> None:
    _, root, v1 = fleet
    result = _check(root, v1)
    assert result.findings == [] and result.plan is not None and result.plan.empty
    assert result.base_commit == v1 and result.compiled is not None
    assert result.compiled.commit == v1  # HEAD of the enclosing repo


def test_gg024_immutable_driver_type(fleet: tuple[git.Repo, Path, str]) -> None:
    _, root, v1 = fleet
    write_repo(
        root,
        {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}, "driverType": "vgpu"}},
        stages=STAGES,
    )
    (f,) = [f for f in _check(root, v1).findings if f.code == "GG024"]
    assert f.file == "nodepools/b/pool.yaml" and f.pool == "b" and "'gpu' -> 'vgpu'" in f.message
    assert "new pool" in f.fix


def test_gg024_immutable_use_precompiled(fleet: tuple[git.Repo, Path, str]) -> None:
    _, root, v1 = fleet
    _rewrite(root, overlays={"a": overlay({"driver": {"usePrecompiled": True, "version": "580"}})})
    (f,) = [f for f in _check(root, v1).findings if f.code == "GG024"]
    assert f.file == "nodepools/a/clusterpolicy.yaml" and f.field == "usePrecompiled"


def test_gg025_blast_radius_and_plan(fleet: tuple[git.Repo, Path, str]) -> None:
    _, root, v1 = fleet
    base = minimal_base()
    base["spec"]["toolkit"]["version"] = "v1.20.0"
    base["spec"]["driver"]["version"] = "580.159.01"
    _rewrite(root, base=base, overlays={"b": overlay({"driver": {"version": "580.126.20"}})})
    result = _check(root, v1)
    (f,) = [f for f in result.findings if f.code == "GG025"]
    assert f.severity == "warning" and f.file == "base/clusterpolicy.yaml"
    assert "spec.toolkit.version" in f.message and "stage 'canary'" in f.message
    plan = result.plan
    assert plan is not None
    assert plan.head_commit == f"{v1}-dirty"  # the work tree differs from HEAD
    canary, prod = plan.stages
    ((cluster, cp),) = canary.cluster_changes
    assert cluster == "default" and cp.kind == "ClusterPolicy" and cp.action == "update"
    assert [(c.path, c.old, c.new) for c in cp.fields] == [
        ("spec.toolkit.version", "v1.19.1", "v1.20.0")
    ]
    (pool_a,) = canary.pools
    (drv,) = pool_a.changes
    assert [(c.path, c.old, c.new) for c in drv.fields] == [
        ("spec.version", "580.126.20", "580.159.01")
    ]
    assert prod.pools == () and prod.cluster_changes == ()  # b pins its driver
    text = plan_text(plan)
    assert "stage canary:" in text and "~ spec.version: '580.126.20' -> '580.159.01'" in text
    assert plan_json(plan)["stages"][0]["pools"][0]["pool"] == "a"


def test_plan_shows_new_and_removed_pools_and_labels(fleet: tuple[git.Repo, Path, str]) -> None:
    _, root, v1 = fleet
    for p in (root / "nodepools" / "b").iterdir():
        p.unlink()
    (root / "nodepools" / "b").rmdir()
    write_repo(
        root,
        {"a": {**H100, "migConfig": "all-1g.10gb"}, "c": {**H100, "nodeSelector": {"p": "c"}}},
        stages=[{"name": "canary", "pools": ["a"]}, {"name": "prod", "pools": ["c"]}],
    )
    plan = _check(root, v1).plan
    assert plan is not None
    (labels,) = plan.stages[0].pools[0].changes
    assert labels.kind == "NodeLabels" and labels.fields[0].new == "all-1g.10gb"
    created = plan.stages[1].pools[0]
    assert created.pool == "c" and {c.action for c in created.changes} == {"create"}
    (removed,) = plan.removed
    assert removed.pool == "b" and {c.action for c in removed.changes} == {"delete"}
    assert removed.pruned_by == "prod"  # the stage that held it, not the ClusterPolicy's
    assert "removed pool b (cluster default, pruned when stage prod adopts):" in plan_text(plan)


def test_gg040_base_revision_that_does_not_load(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path)
    (tmp_path / "README").write_text("no fleet yet\n")
    v0 = _commit(repo, "v0")
    write_repo(tmp_path, {"a": H100})
    _commit(repo, "v1")
    result = _check(tmp_path, v0)
    (f,) = [f for f in result.findings if f.code == "GG040"]
    assert f.severity == "info" and result.plan is None


def test_unknown_revision_is_a_usage_error(fleet: tuple[git.Repo, Path, str]) -> None:
    _, root, _ = fleet
    with pytest.raises(SourceError, match="unknown revision"):
        _check(root, "no-such-branch")


def test_export_refuses_a_fleet_file_that_is_a_symlink(
    fleet: tuple[git.Repo, Path, str], tmp_path: Path
) -> None:
    repo, root, _ = fleet
    policy = root / "nodepools" / "a" / "clusterpolicy.yaml"
    os.symlink("/etc/hostname", policy)
    sha = _commit(repo, "symlink")
    policy.unlink()
    _commit(repo, "fixed")
    with pytest.raises(TreeError, match="is a symlink") as exc:
        export_revision(root, sha, tmp_path / "export")
    assert exc.value.file == "nodepools/a/clusterpolicy.yaml"
    assert not (tmp_path / "export" / "nodepools" / "a" / "clusterpolicy.yaml").exists()
    # as a base it is a finding, never an exception or a file read through the link
    findings = _check(root, sha).findings
    assert any(f.code == "GG040" and "is a symlink" in f.message for f in findings)


def _node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_gg029_removed_pool_names_its_stage_and_node_count(
    fleet: tuple[git.Repo, Path, str],
) -> None:
    _, root, v1 = fleet
    write_repo(root, {"a": H100}, stages=[{"name": "canary", "pools": ["a"]}])
    shutil.rmtree(root / "nodepools" / "b")
    nodes = {"default": [_node("b-0", {"p": "b"}), _node("b-1", {"p": "b"}), _node("x", {})]}
    result = run_preflight(root, base_rev=v1, live_nodes=nodes, today=datetime.date(2026, 11, 1))
    (f,) = [f for f in result.findings if f.code == "GG029"]
    assert f.severity == "warning" and f.pool == "b" and f.file == "fleet.yaml"
    # 'prod' held b and is gone with it: the cluster's last stage prunes it
    assert "pool 'b' (stage 'prod', cluster 'default') is removed" in f.message
    assert "2 nodes lose their GPU Operator labels" in f.message
    assert "stage 'canary' (the cluster's last; 'prod' no longer holds pools)" in f.message
    assert not [f for f in result.findings if f.code == "GG041"]  # one of two is not a majority


def test_gg041_removing_most_pools_needs_an_opt_in(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path)
    three = {p: {**H100, "nodeSelector": {"p": p}} for p in ("a", "b", "c")}
    stages = [{"name": "canary", "pools": ["a"]}, {"name": "prod", "pools": ["b", "c"]}]
    root = write_repo(tmp_path / "f", three, stages=stages)
    v1 = _commit(repo, "v1")
    for gone in ("b", "c"):
        shutil.rmtree(root / "nodepools" / gone)
    write_repo(root, {"a": three["a"]}, stages=[{"name": "canary", "pools": ["a"]}])
    result = _check(root, v1)
    removed = sorted(f.pool for f in result.findings if f.code == "GG029")
    assert removed == ["b", "c"]
    (err,) = [f for f in result.findings if f.code == "GG041"]
    assert (
        err.severity == "error" and "removes 2 of the 3 pools of cluster 'default'" in err.message
    )
    assert "(count them with --kubeconfig)" in next(
        f.message for f in result.findings if f.code == "GG029"
    )
    fleet_yaml = root / "fleet.yaml"
    fleet_yaml.write_text(
        fleet_yaml.read_text().replace("spec:\n", "spec:\n  allowMassPoolRemoval: true\n", 1)
    )
    assert not [f for f in _check(root, v1).findings if f.code == "GG041"]


def test_head_commit_says_dirty_only_for_changes_under_the_fleet(
    fleet: tuple[git.Repo, Path, str], tmp_path: Path
) -> None:
    repo, root, v1 = fleet
    assert head_commit(root) == v1
    (tmp_path / "elsewhere.txt").write_text("outside the fleet directory\n")
    assert head_commit(root) == v1  # the monorepo's other files are not the fleet's
    (root / "notes.txt").write_text("untracked\n")
    assert head_commit(root) == f"{v1}-dirty"
    (root / ".gitignore").write_text("notes.txt\n")
    _commit(repo, "ignore notes")
    assert head_commit(root) == str(repo.head.commit.hexsha)  # ignored files are not changes
    pool = root / "nodepools" / "a" / "pool.yaml"
    pool.write_text(pool.read_text() + "# staged\n")
    repo.git.add(str(pool))
    assert head_commit(root).endswith("-dirty")  # type: ignore[union-attr]


def test_head_commit_outside_git_or_before_the_first_commit(tmp_path: Path) -> None:
    assert head_commit(tmp_path) is None
    git.Repo.init(tmp_path)
    assert head_commit(tmp_path) is None
    assert head_commit(tmp_path / "missing") is None
