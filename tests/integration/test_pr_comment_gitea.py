"""The pull-request comment on a real Gitea: `check --base --post-comment PR` keeps ONE comment,
found by its marker and edited in place; a reviewer's comment is left alone."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from gitops_gpu.cli import main
from gitops_gpu.rollout import pr_comment
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import gitea

pytestmark = pytest.mark.integration


def _comments(forge: gitea.Forge, number: int) -> list[dict[str, object]]:
    found = forge.api("GET", f"/repos/{forge.repo}/issues/{number}/comments")
    assert isinstance(found, list)
    return found


def test_one_comment_per_pull_request_edited_in_place(
    gitea_repo_factory: Callable[..., gitea.Forge],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    forge = gitea_repo_factory("fleet")
    work = tmp_path / "work"
    shutil.copytree(paths.fleet_example(), work)
    forge.git(work, "init", "-q", "-b", "main")
    forge.git(work, "config", "user.email", "platform@example.com")
    forge.git(work, "config", "user.name", "platform")
    forge.git(work, "add", "-A")
    forge.git(work, "commit", "-q", "-m", "fleet")
    forge.push(work, "HEAD:main", force=True)
    base = forge.git(work, "rev-parse", "HEAD")
    forge.git(work, "checkout", "-q", "-b", "bump")
    policy = work / "base" / "clusterpolicy.yaml"
    policy.write_text(policy.read_text().replace('"580.126.20"', '"580.142.01"'))
    forge.git(work, "commit", "-q", "-am", "driver 580.142.01")
    forge.push(work, "HEAD:bump")
    number = forge.open_pull("bump", "driver 580.142.01")
    forge.api("POST", f"/repos/{forge.repo}/issues/{number}/comments", {"body": "LGTM"})
    monkeypatch.setenv("GITOPS_GPU_STATUS_TOKEN", forge.token)
    argv = ["check", str(work), "--base", base, "--crds", str(paths.default_crds_dir())]
    argv += ["--status-backend", forge.status_backend, "--post-comment", str(number)]

    assert main(argv) == 0
    assert f"pull request {number}: comment created" in capsys.readouterr().err
    first = [c for c in _comments(forge, number) if pr_comment.MARKER in str(c["body"])]
    assert len(first) == 1
    body = str(first[0]["body"])
    assert "driver upgrade 580.126.20 -> 580.142.01" in body
    assert "- **cordons every node of 4 pools, stops GPU pods on every node" in body

    before = _comments(forge, number)
    assert main(argv) == 0  # same commit, same text: nothing written
    assert f"pull request {number}: comment unchanged" in capsys.readouterr().err
    assert _comments(forge, number) == before
    policy.write_text(policy.read_text().replace('"580.142.01"', '"580.159.03"'))
    forge.git(work, "commit", "-q", "-am", "driver 580.159.03")
    forge.push(work, "HEAD:bump")
    assert main(argv) == 0
    assert f"pull request {number}: comment edited" in capsys.readouterr().err
    comments = _comments(forge, number)
    ours = [c for c in comments if pr_comment.MARKER in str(c["body"])]
    assert [c["id"] for c in ours] == [first[0]["id"]]  # the same comment, edited
    assert "580.126.20 -> 580.159.03" in str(ours[0]["body"])
    assert [c["body"] for c in comments if c["id"] != first[0]["id"]] == ["LGTM"]
