"""`nodes` judges each pool at the commit its live NVIDIADriver carries, reads `--repo .` and
relative paths, and says when the checkout is behind the cluster (real git repos)."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import pytest

from gitops_gpu.cli import build_parser
from gitops_gpu.cli import nodes as nodes_cli
from gitops_gpu.cli import sync as sync_cli
from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu.sync.source import absolute_local

H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
STAGES = [{"name": "canary", "pools": ["a"]}, {"name": "prod", "pools": ["b"]}]


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


def _commit(repo: Path, version: str) -> str:
    base = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"version": version, "upgradePolicy": {"autoUpgrade": True}}},
    }
    write_repo(
        repo, {"a": H100, "b": {**H100, "nodeSelector": {"p": "b"}}}, base=base, stages=STAGES
    )
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", version, "--no-gpg-sign")
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "fleet"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    return repo


def _args(repo: str, cache: Path, *extra: str) -> argparse.Namespace:
    argv = ["nodes", "--repo", repo, "--kubeconfig", "k", "--cache-dir", str(cache), *extra]
    return build_parser("nodes").parse_args(argv)


def test_a_local_path_is_made_absolute_and_urls_are_left_alone(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(checkout)
    assert absolute_local(".") == str(checkout)
    monkeypatch.chdir(checkout.parent)
    assert absolute_local("fleet") == str(checkout)
    for url in ("https://git.example/fleet.git", "git@github.com:org/fleet.git", "no-such-dir"):
        assert absolute_local(url) == url
    link = checkout.parent / "link"
    link.symlink_to(checkout)
    assert absolute_local("link") == str(link)  # the link, not its target: the same mirror
    link.unlink()


def test_repo_dot_reads_the_checkout_from_its_own_directory(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = _commit(checkout, "580.126.20")
    monkeypatch.chdir(checkout)
    _src, sha, _path, compiled = sync_cli.load_source(_args(".", tmp_path / "cache"))
    assert sha == head and compiled.pool("a").driver_version == "580.126.20"


def test_each_pool_is_judged_at_the_commit_the_cluster_runs(checkout: Path, tmp_path: Path) -> None:
    old = _commit(checkout, "580.126.20")
    new = _commit(checkout, "580.142.01")
    args = _args(str(checkout), tmp_path / "cache")
    src, sha, _path, compiled = sync_cli.load_source(args)
    assert sha == new
    selected = [(None, compiled.pool("a")), (None, compiled.pool("b"))]
    # canary adopted the new commit, prod still runs the old one
    judged, notes = nodes_cli.at_live_commits(args, src, sha, selected, {"a": new, "b": old})
    assert [t.driver_version for _, t in judged] == ["580.142.01", "580.126.20"]
    assert notes == [
        f"pool b: judged at {old[:12]}, the commit its NVIDIADriver carries (main is at {new[:12]})"
    ]


def test_a_checkout_behind_the_cluster_is_said(checkout: Path, tmp_path: Path) -> None:
    _commit(checkout, "580.126.20")
    args = _args(str(checkout), tmp_path / "cache")
    src, sha, _path, compiled = sync_cli.load_source(args)
    unknown = "f" * 40  # pushed elsewhere, not pulled into this checkout
    judged, notes = nodes_cli.at_live_commits(
        args, src, sha, [(None, compiled.pool("a"))], {"a": unknown}
    )
    assert judged == [(None, compiled.pool("a"))]
    assert notes == [
        f"pool a: the cluster runs commit {unknown[:12]}, which {checkout} does not have: "
        f"judged at {sha[:12]} instead (fetch or pull the checkout)"
    ]


def test_an_explicit_rev_is_judged_as_asked(checkout: Path, tmp_path: Path) -> None:
    old = _commit(checkout, "580.126.20")
    new = _commit(checkout, "580.142.01")
    args = _args(str(checkout), tmp_path / "cache", "--rev", new)
    src, sha, _path, compiled = sync_cli.load_source(args)
    judged, notes = nodes_cli.at_live_commits(
        args, src, sha, [(None, compiled.pool("a"))], {"a": old}
    )
    assert judged[0][1].driver_version == "580.142.01" and notes == []
