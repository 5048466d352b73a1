"""The controller checks pull requests itself (--pull-requests) on a real Gitea, against the real
apiserver: no CI job, and yet each PR head gets gitops-gpu/preflight and ONE comment with what
it will do, edited in place when the head moves."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.controller import Controller
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout import pr_comment
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.status import PREFLIGHT_CONTEXT
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import gitea, nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def _ours(forge: gitea.Forge, number: int) -> list[dict[str, Any]]:
    found = forge.api("GET", f"/repos/{forge.repo}/issues/{number}/comments")
    assert isinstance(found, list)
    return [c for c in found if pr_comment.MARKER in str(c["body"])]


def _edit_driver(work: Path, old: str, new: str) -> None:
    policy = work / "base" / "clusterpolicy.yaml"
    text = policy.read_text()
    assert old in text
    policy.write_text(text.replace(old, new))


def test_open_pull_requests_get_preflight_and_one_comment_from_the_controller(
    clean_cluster: Testbed,
    gitea_repo_factory: Callable[..., gitea.Forge],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tb = clean_cluster
    forge = gitea_repo_factory("fleet", private=True)
    monkeypatch.setenv("GITOPS_GPU_STATUS_TOKEN", forge.token)
    monkeypatch.setenv("GITOPS_GPU_GIT_TOKEN", forge.token)
    work = tmp_path / "work"
    shutil.copytree(paths.fleet_example(), work)
    for args in (
        ("init", "-q", "-b", "main"),
        ("config", "user.email", "platform@example.com"),
        ("config", "user.name", "platform"),
        ("add", "-A"),
        ("commit", "-q", "-m", "fleet"),
    ):
        forge.git(work, *args)
    forge.push(work, "HEAD:main", force=True)
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(work), 1)
    nodes.wait_ready(tb.client, made)
    forge.git(work, "checkout", "-q", "-b", "bump")
    _edit_driver(work, '"580.126.20"', '"580.142.01"')
    forge.git(work, "commit", "-q", "-am", "driver 580.142.01")
    forge.push(work, "HEAD:bump")
    head = forge.git(work, "rev-parse", "HEAD")
    opened = time.monotonic()
    number = forge.open_pull("bump", "driver 580.142.01")

    cfg = Config(
        repo=forge.clone_url,
        cache_dir=tmp_path / "ctl",
        status_backend=forge.status_backend,
        pull_requests=True,
    )
    ctl = Controller(cfg, tb.client)
    assert ctl.pulls is not None
    ctl.pulls.poll_seconds = 0.0  # look at the pull requests on every pass
    ctl.start_informers()
    record = GiteaBackend(forge.url, forge.owner, forge.name, forge.token)
    try:
        deadline = time.monotonic() + 120
        while not _ours(forge, number):
            assert time.monotonic() < deadline, "no comment on the pull request"
            report = ctl.run_pass()
            assert report.result != "error", report.error
        print(f"\n[measure] pull request opened -> its comment: {time.monotonic() - opened:.1f}s")
        (comment,) = _ours(forge, number)
        body = str(comment["body"])
        assert body.startswith(f"{pr_comment.MARKER}\n**gitops-gpu** for `{head[:12]}`: ")
        assert "preflight passed" in body
        assert "driver upgrade 580.126.20 -> 580.142.01" in body
        assert "cordons 4 nodes" in body  # one node per pool, named from the node informer
        verdict = record.latest(head, PREFLIGHT_CONTEXT)
        assert verdict is not None and verdict.state == "success" and verdict.seal

        # The head moves: the same comment is edited; the new head gets its own verdict.
        _edit_driver(work, '"580.142.01"', '"580.159.03"')
        forge.git(work, "commit", "-q", "-am", "driver 580.159.03")
        forge.push(work, "HEAD:bump")
        moved = forge.git(work, "rev-parse", "HEAD")
        deadline = time.monotonic() + 120
        while "580.159.03" not in str(_ours(forge, number)[0]["body"]):
            assert time.monotonic() < deadline, "the comment was not edited for the new head"
            ctl.run_pass()
        assert [c["id"] for c in _ours(forge, number)] == [comment["id"]]
        moved_verdict = record.latest(moved, PREFLIGHT_CONTEXT)
        assert moved_verdict is not None and moved_verdict.state == "success"

        # Merged: the same comment follows the merge commit through the stages.
        code, merged = forge.merge_pull(number)
        assert code == 200, merged
        pull = forge.api("GET", f"/repos/{forge.repo}/pulls/{number}")
        merge = str(pull["merge_commit_sha"])
        want = f"**merged as `{merge[:12]}`: canary pending (rolling out"
        deadline = time.monotonic() + 120
        while want not in str(_ours(forge, number)[0]["body"]):
            assert time.monotonic() < deadline, _ours(forge, number)[0]["body"]
            ctl.run_pass()
        assert [c["id"] for c in _ours(forge, number)] == [comment["id"]]
    finally:
        ctl.stop_informers()
