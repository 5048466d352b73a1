"""`gitops-gpu demo --forge`: the pull-request story on a real Gitea, live in the terminal.

A local control plane with fake GPU nodes and the simulator, Gitea on 127.0.0.1 holding the
fleet repo, and the controller reading it over HTTP (its record: Gitea commit statuses; woken by
Gitea's signed push webhook). The story: a bad pull request is checked as a CI job would
(`check --post-status`), its gitops-gpu/preflight status fails and branch protection refuses to
merge it; a driver bump is checked by the controller itself (`--pull-requests`): it posts
gitops-gpu/preflight and one comment saying what the change will do to nodes; it merges, and the
webhook wakes the controller, which rolls the merged commit out canary first, writing each
stage's status on it in Gitea (and following it in the comment). It ends with the commands a
person can run to look.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.controller import Controller
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout import pr_comment
from gitops_gpu.rollout.status import PREFLIGHT_CONTEXT, stage_context
from gitops_gpu.server import ControllerServer, Probes
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import gitea, operator, session, simulator
from gitops_gpu_dev.testbed.reports import snapshot_report

Say = Callable[[str], None]
DEMO_GATES = {"soak": "2s", "timeout": "2m"}


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _edit_yaml(path: Path, change: Callable[[Any], None]) -> None:
    yaml = YAML()
    doc = yaml.load(path.read_text())
    change(doc)
    with path.open("w") as fh:
        yaml.dump(doc, fh)


def _fast_gates(doc: Any) -> None:
    for stage in doc["spec"]["stages"]:
        gate = stage.setdefault("gate", {})
        gate.update(DEMO_GATES)
        gate.pop("approval", None)  # the approval story is the main demo's


def _check(work: Path, forge: gitea.Forge) -> tuple[int, str]:
    """`gitops-gpu check --base origin/main --post-status`, as the PR pipeline runs it."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gitops_gpu",
            "check",
            str(work),
            "--base",
            "origin/main",
            "--post-status",
            "--status-backend",
            forge.status_backend,
            "--crds",
            str(paths.default_crds_dir()),
        ],
        env={**os.environ, "GITOPS_GPU_STATUS_TOKEN": forge.token},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = out.stderr.strip().splitlines()
    return out.returncode, lines[-1] if lines else ""


def _plan_comment(forge: gitea.Forge, number: int) -> str:
    """The controller's comment on the pull request ("" until it is there)."""
    found = forge.api("GET", f"/repos/{forge.repo}/issues/{number}/comments")
    bodies = [str(c["body"]) for c in found or [] if pr_comment.MARKER in str(c["body"])]
    return bodies[0] if bodies else ""


class _Story:
    def __init__(self, forge: gitea.Forge, ctl: Controller, work: Path, say: Say) -> None:
        self.forge, self.ctl, self.work, self.say = forge, ctl, work, say
        self.start = time.monotonic()
        self.shown: dict[tuple[str, str], str] = {}

    def state(self, sha: str, context: str) -> str | None:
        st = self.ctl.backend.latest(sha, context)
        return st.state if st else None

    def show(self, sha: str, stages: list[str]) -> None:
        """Print each stage status of ``sha`` in Gitea when it changes."""
        for stage in stages:
            st = self.ctl.backend.latest(sha, stage_context(stage))
            text = f"{st.state:8} {st.description}" if st else ""
            if text and self.shown.get((sha, stage)) != text:
                self.shown[(sha, stage)] = text
                self.say(f"   [{time.monotonic() - self.start:5.1f}s] {stage:10} {text}")

    def wait(
        self, sha: str, stages: list[str], done: Callable[[], bool], timeout: float, tick: bool
    ) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.show(sha, stages)
            if done():
                self.show(sha, stages)
                return True
            if tick:
                self.ctl.trigger()  # the demo does not wait for the poll interval
            time.sleep(0.4)
        return False

    def branch(self, name: str, rel: str, change: Callable[[Any], None], message: str) -> str:
        f = self.forge
        f.git(self.work, "checkout", "-q", "-B", name, "origin/main")
        _edit_yaml(self.work / rel, change)
        f.git(self.work, "commit", "-q", "-am", message)
        f.push(self.work, f"HEAD:{name}")
        return f.git(self.work, "rev-parse", "HEAD")


def _pool_commit(tb: session.Testbed, pool: str) -> str | None:
    drv = tb.client.get(*names.NVIDIA_DRIVER_API, pool)
    if drv is None:
        return None
    return (drv["metadata"].get("annotations") or {}).get(names.COMMIT_ANNOTATION)


def run(
    workdir: Path,
    *,
    keep: bool = False,
    nodes_per_pool: int = 1,
    say: Say = print,
    operator_mode: str = operator.DEFAULT_MODE,
) -> int:
    workdir = workdir.resolve()
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    say(
        f"== a local control plane (GPU Operator: {operator_mode}) and a real forge "
        f"(Gitea {gitea.GITEA_VERSION}) in {workdir}"
    )
    tb = session.start(
        workdir / "testbed",
        fleet=paths.fleet_example(),
        nodes_per_pool=nodes_per_pool,
        progress=lambda m: say(f"   {m}"),
        operator_mode=operator_mode,
    )
    stop = threading.Event()
    threads: list[threading.Thread] = []
    controllers: list[Controller] = []
    server: ControllerServer | None = None
    sim_ = simulator.Simulator(
        tb.client, tick=0.2, report_fn=snapshot_report, plays_operator=operator_mode == "sim"
    ).start()
    try:
        work = workdir / "fleet"
        shutil.copytree(paths.fleet_example(), work)
        _git(work, "init", "-q", "-b", "main")
        _git(work, "config", "user.email", "platform-team@example.com")
        _git(work, "config", "user.name", "platform team")
        _edit_yaml(work / "fleet.yaml", _fast_gates)
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", "fleet-repo-example (demo: gates shortened to seconds)")
        forge = gitea.up(tb.state, work, webhook_url=None, progress=lambda m: say(f"   {m}"))
        _git(work, "remote", "add", "origin", forge.clone_url)
        forge.git(work, "fetch", "-q", "origin")
        first = _git(work, "rev-parse", "HEAD")
        # The repo is private: the controller reads it with the token from the environment.
        os.environ["GITOPS_GPU_GIT_TOKEN"] = forge.token
        ctl = Controller(
            Config(
                repo=forge.clone_url,
                cache_dir=workdir / "cache",
                interval=30.0,
                status_backend=forge.status_backend,
                status_token_file=forge.token_file,
                pull_requests=True,  # it checks pull requests itself: PR 2 below
            ),
            tb.client,
        )
        controllers.append(ctl)
        if ctl.pulls is not None:
            ctl.pulls.poll_seconds = 2.0  # the demo does not wait 30s for the next look
        secret = secrets.token_hex(24)
        (forge.work / "webhook-secret").write_text(secret + "\n")
        server = ControllerServer(
            "127.0.0.1:0", ctl.metrics, Probes(), ctl.trigger, secret.encode()
        ).start()
        webhook = f"http://127.0.0.1:{server.port}/webhook"
        forge.add_push_webhook(webhook, secret)
        say(f"   controller: --repo {forge.clone_url} --status-backend {forge.status_backend}")
        say(f"   Gitea's push webhook (signed) -> {webhook}; the controller polls every 30s")
        thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
        threads.append(thread)
        thread.start()
        story = _Story(forge, ctl, work, say)
        compiled_stages = compile_fleet(load_repo(work), first).stages
        stages = [s.name for s in compiled_stages]
        say(f"\n== rolling out {first[:7]} from {forge.repo} on Gitea")
        ok = story.wait(
            first,
            stages,
            lambda: all(story.state(first, stage_context(s)) == "success" for s in stages),
            180,
            tick=True,
        )
        forge.protect_branch("main", [PREFLIGHT_CONTEXT])
        say(f"\n== branch protection on main requires {PREFLIGHT_CONTEXT}")

        def bogus(doc: Any) -> None:
            doc["spec"]["driver"]["kernelModuleType"] = "bogus"

        say("\n== pull request 1: kernelModuleType: bogus")
        bad = story.branch("bogus-module", "base/clusterpolicy.yaml", bogus, "driver: bogus")
        bad_pr = forge.open_pull("bogus-module", "driver: kernelModuleType bogus")
        code, posted = _check(work, forge)
        say(f"   gitops-gpu check --base origin/main --post-status -> exit {code}; {posted}")
        merge_code, answer = forge.merge_pull(bad_pr)
        message = answer.get("message", answer) if isinstance(answer, dict) else answer
        say(f"   merge #{bad_pr}: HTTP {merge_code} {message}")
        ok = ok and code == 1 and story.state(bad, PREFLIGHT_CONTEXT) == "failure"
        ok = ok and merge_code == 405

        def bump(doc: Any) -> None:
            doc["spec"]["driver"]["version"] = "580.142.01"

        say("\n== pull request 2: driver 580.126.20 -> 580.142.01, checked by the controller")
        good = story.branch("driver-580.142.01", "base/clusterpolicy.yaml", bump, "driver bump")
        good_pr = forge.open_pull("driver-580.142.01", "driver: 580.142.01")
        commented = story.wait(good, [], lambda: bool(_plan_comment(forge, good_pr)), 60, tick=True)
        verdict = story.state(good, PREFLIGHT_CONTEXT)
        say(f"   controller --pull-requests: {PREFLIGHT_CONTEXT} {verdict}, and its comment:")
        for line in _plan_comment(forge, good_pr).splitlines()[1:6]:
            say(f"   | {line}")
        code = 0 if commented else 1
        hooks_before = server.webhooks
        merge_code, answer = forge.merge_pull(good_pr)
        merged = str(forge.api("GET", f"/repos/{forge.repo}/pulls/{good_pr}")["merge_commit_sha"])
        say(f"   merge #{good_pr}: HTTP {merge_code}; main is now {merged[:7]}")
        ok = (
            ok
            and code == 0
            and merge_code == 200
            and story.state(good, PREFLIGHT_CONTEXT) == ("success")
        )
        say("\n== the push webhook wakes the controller: it checks the merge, starts the canary")
        t0 = time.monotonic()
        canary_pools = compiled_stages[0].pools

        def woken() -> bool:
            return (
                server is not None
                and server.webhooks > hooks_before
                and story.state(merged, PREFLIGHT_CONTEXT) == "success"
                and all(_pool_commit(tb, p) == merged for p in canary_pools)
            )

        woke = story.wait(merged, stages, woken, 30, tick=False)
        say(
            f"   woken by the webhook after {time.monotonic() - t0:.1f}s: {PREFLIGHT_CONTEXT} "
            f"success on {merged[:7]}, {', '.join(canary_pools)} now on {merged[:7]}"
            if woke
            else "   the webhook did NOT wake the controller; Gitea's deliveries: "
            f"{forge.webhook_deliveries(3)}"
        )
        rolled = story.wait(
            merged,
            stages,
            lambda: all(story.state(merged, stage_context(s)) == "success" for s in stages),
            240,
            tick=True,
        )
        listed = forge.api("GET", f"/repos/{forge.repo}/commits/{merged}/statuses?limit=50")
        order = [
            s["context"].rsplit("/", 1)[-1]
            for s in sorted(listed, key=lambda s: s["id"])
            if s["context"].startswith("gitops-gpu/stage/")
        ]
        canary_first = bool(order) and order[0] == stages[0]
        say(f"   stage statuses on {merged[:7]} in Gitea, oldest first: {', '.join(order)}")
        ok = ok and woke and rolled and canary_first
        say(f"\nresult: {'OK' if ok else 'FAILED'}")
        token = f"$(cat {forge.token_file})"
        say(
            "\n== look yourself"
            + ("" if keep else " (run with --keep to leave everything up)")
            + f':\n   curl -s -H "Authorization: token {token}" '
            f"{forge.api_url}/repos/{forge.repo}/commits/{merged}/status"
            f"\n   GITOPS_GPU_GIT_TOKEN={token} GITOPS_GPU_STATUS_TOKEN={token} gitops-gpu status"
            f" --repo {forge.clone_url}"
            f" --status-backend {forge.status_backend} --kubeconfig {tb.kubeconfig}"
            f"\n   the pull requests: {forge.url}/{forge.repo}/pulls?state=all"
        )
        if keep:
            say(f"\nleft running; stop with gitops-gpu testbed down --dir {workdir / 'testbed'}")
        return 0 if ok else 1
    finally:
        stop.set()
        for ctl_ in controllers:
            ctl_.trigger()  # out of its 30s wait now: it must stop before the control plane
        for th in threads:
            th.join(timeout=30)
        if server is not None:
            server.stop()
        sim_.stop()
        if not keep:
            session.stop(workdir / "testbed")
