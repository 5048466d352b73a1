"""The pull-request story on a real Gitea, end to end.

A branch with a driver bump becomes a pull request; `gitops-gpu check --base origin/main
--post-status` posts gitops-gpu/preflight on it; branch protection requiring that context refuses
to merge a bad pull request (405) and merges the good one; Gitea's signed push webhook wakes the
controller (its poll interval is far longer than the test waits); the stage statuses appear on
the merged commit in Gitea's API, canary first.
"""

from __future__ import annotations

import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from e2e_harness import Env, RunningController, fast_gates, set_driver

from gitops_gpu.cli import main
from gitops_gpu.controller import Controller
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.status import PREFLIGHT_CONTEXT, stage_context
from gitops_gpu.server import ControllerServer, Probes
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import gitea
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.e2e
STAGES = ("canary", "inference", "training")


class Ticker:
    """Extra passes while a rollout moves (the controller itself polls only every minute)."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl, self.on = ctl, threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            if self.on.is_set():
                self.ctl.trigger()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def story(
    clean_cluster: Testbed,
    gitea_repo_factory: Callable[..., gitea.Forge],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[SimpleNamespace]:
    forge = gitea_repo_factory("fleet", private=True)  # the controller needs the token
    work = tmp_path / "work"
    shutil.copytree(paths.fleet_example(), work)
    forge.git(work, "init", "-q", "-b", "main")
    forge.git(work, "config", "user.email", "platform@example.com")
    forge.git(work, "config", "user.name", "platform")
    fast_gates()(work)
    forge.git(work, "add", "-A")
    forge.git(work, "commit", "-q", "-m", "fleet with fast gates")
    forge.push(work, "HEAD:main", force=True)
    forge.git(work, "remote", "add", "origin", forge.clone_url)
    forge.git(work, "fetch", "-q", "origin")
    # The tokens come from the environment, as in a deployment.
    monkeypatch.setenv("GITOPS_GPU_STATUS_TOKEN", forge.token)
    monkeypatch.setenv("GITOPS_GPU_GIT_TOKEN", forge.token)
    env = Env(clean_cluster, SimpleNamespace(bare=work, work=work, url=forge.clone_url), tmp_path)
    cfg = Config(
        repo=forge.clone_url,
        cache_dir=tmp_path / "ctl",
        interval=120.0,
        status_backend=forge.status_backend,
    )
    ctl = Controller(cfg, clean_cluster.client)
    secret = secrets.token_hex(16)
    server = ControllerServer(
        "127.0.0.1:0", ctl.metrics, Probes(), ctl.trigger, secret.encode()
    ).start()
    forge.add_push_webhook(f"http://127.0.0.1:{server.port}/webhook", secret)
    ticker = Ticker(ctl)
    try:
        yield SimpleNamespace(
            forge=forge,
            work=work,
            env=env,
            ctl=ctl,
            server=server,
            ticker=ticker,
            record=GiteaBackend(forge.url, forge.owner, forge.name, forge.token),
        )
    finally:
        ticker.close()
        env.close()
        server.stop()


def _state(story: SimpleNamespace, sha: str, context: str) -> str | None:
    latest = story.record.latest(sha, context)
    return latest.state if latest else None


def _all_success(story: SimpleNamespace, sha: str) -> bool:
    return all(_state(story, sha, stage_context(s)) == "success" for s in STAGES)


def _branch(story: SimpleNamespace, name: str, edit: Callable[[Path], None], msg: str) -> str:
    forge: gitea.Forge = story.forge
    forge.git(story.work, "checkout", "-q", "-B", name, "origin/main")
    edit(story.work)
    forge.git(story.work, "commit", "-q", "-am", msg)
    forge.push(story.work, f"HEAD:{name}")
    return forge.git(story.work, "rev-parse", "HEAD")


def _check(story: SimpleNamespace) -> int:
    return main(
        [
            "check",
            str(story.work),
            "--base",
            "origin/main",
            "--post-status",
            "--status-backend",
            story.forge.status_backend,
        ]
    )


def test_pull_request_checked_protected_merged_and_rolled_out(story: SimpleNamespace) -> None:
    forge: gitea.Forge = story.forge
    env: Env = story.env
    base = forge.git(story.work, "rev-parse", "HEAD")
    env.start_nodes()
    story.ticker.on.set()
    env.running.append(RunningController(story.ctl, None))
    env.wait("the first commit rolls out", lambda: _all_success(story, base), timeout=120)
    story.ticker.on.clear()
    forge.protect_branch("main", [PREFLIGHT_CONTEXT])

    def bogus(work: Path) -> None:
        path = work / "base" / "clusterpolicy.yaml"
        path.write_text(
            path.read_text().replace("kernelModuleType: auto", "kernelModuleType: bogus")
        )

    bad = _branch(story, "bogus-module-type", bogus, "driver: bogus kernelModuleType")
    bad_pr = forge.open_pull("bogus-module-type", "bogus kernelModuleType")
    assert _check(story) == 1
    assert _state(story, bad, PREFLIGHT_CONTEXT) == "failure"
    code, data = forge.merge_pull(bad_pr)
    assert code == 405 and "status checks" in str(data), (code, data)

    good = _branch(story, "driver-580.142.01", set_driver("580.142.01"), "driver 580.142.01")
    good_pr = forge.open_pull("driver-580.142.01", "driver 580.142.01")
    assert _check(story) == 0
    preflight = story.record.latest(good, PREFLIGHT_CONTEXT)
    assert preflight is not None and preflight.state == "success"
    assert "changes" in preflight.description
    hooks_before = story.server.webhooks
    code, data = forge.merge_pull(good_pr)
    assert code == 200, (code, data)
    merged = forge.api("GET", f"/repos/{forge.repo}/pulls/{good_pr}")["merge_commit_sha"]
    assert merged and merged != good

    # Only the webhook can start a pass now: the controller polls every 120 s. That pass checks
    # the merged commit (its preflight status is the controller's: `check` ran on the branch)
    # and starts the canary, and only the canary.
    def woken() -> bool:
        return (
            story.server.webhooks > hooks_before
            and _state(story, merged, PREFLIGHT_CONTEXT) == "success"
            and env.pool_commit("canary") == merged
        )

    try:
        env.wait("the webhook wakes the controller onto the merged commit", woken, timeout=30)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; webhooks received {story.server.webhooks - hooks_before}, "
            f"Gitea's deliveries: {forge.webhook_deliveries()}"
        ) from None
    assert all(env.pool_commit(p) != merged for p in ("infer-l40s", "train-h100", "train-b200"))
    story.ticker.on.set()
    env.wait("the merged commit rolls out", lambda: _all_success(story, merged), timeout=120)

    listed = forge.api("GET", f"/repos/{forge.repo}/commits/{merged}/statuses?limit=50")
    stages = sorted(
        (s for s in listed if s["context"].startswith("gitops-gpu/stage/")), key=lambda s: s["id"]
    )
    assert stages[0]["context"] == stage_context("canary")
    first = {
        c: min(s["id"] for s in stages if s["context"] == c) for c in {s["context"] for s in stages}
    }
    canary_done = min(
        s["id"]
        for s in stages
        if s["context"] == stage_context("canary") and s["status"] == "success"
    )
    assert canary_done < first[stage_context("inference")] < first[stage_context("training")]
    combined = forge.api("GET", f"/repos/{forge.repo}/commits/{merged}/status")
    assert combined["state"] == "success", combined
    assert _state(story, bad, PREFLIGHT_CONTEXT) == "failure"
    assert forge.api("GET", f"/repos/{forge.repo}/pulls/{bad_pr}")["merged"] is False
