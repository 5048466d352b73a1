"""`gitops-gpu demo`: the whole product on an embedded default, live in the terminal.

A real local control plane with fake GPU nodes for fleet-repo-example's pools, the GPU Operator
(the real v26.7.0 as a process, or the simulator with ``operator_mode="sim"``), the simulated
hosts (NVML reports, MIG manager, faults), a local fleet repo (a bare remote plus a clone to
commit from), and the controller. The story: the fleet rolls out, a driver bump goes canary →
inference → training (the training gate's approval, asked before anything of the bump
reaches the training pools, is given as a person would, with `gitops-gpu approve`), a
time-slicing change reaches only the inference pool's nodes, when its stage adopts it
(demo_sharing.py), then a bump whose canary upgrade fails halts at canary and never reaches the
later stages.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
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
from gitops_gpu.rollout.status import CommitStatus, approval_context, stage_context
from gitops_gpu_dev import demo_sharing, paths
from gitops_gpu_dev.demo_trust import DemoTrust
from gitops_gpu_dev.testbed import operator, session, simulator
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.reports import snapshot_report

Say = Callable[[str], None]
DEMO_GATES = {"soak": "3s", "timeout": "2m"}


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


class DemoRepo:
    def __init__(self, root: Path, source: Path | None = None) -> None:
        self.bare, self.work = root / "fleet.git", root / "fleet"
        _git(root, "init", "-q", "--bare", "-b", "main", str(self.bare))
        shutil.copytree(source or paths.fleet_example(), self.work)
        _git(self.work, "init", "-q", "-b", "main")
        _git(self.work, "config", "user.email", "platform-team@example.com")
        _git(self.work, "config", "user.name", "platform team")
        _git(self.work, "remote", "add", "origin", str(self.bare))

    def commit(self, message: str) -> str:
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-q", "-m", message)
        _git(self.work, "push", "-q", "origin", "main")
        return _git(self.work, "rev-parse", "HEAD")

    def edit_yaml(self, rel: str, change: Callable[[dict[str, Any]], None]) -> None:
        yaml = YAML()
        path = self.work / rel
        doc = yaml.load(path.read_text())
        change(doc)
        with path.open("w") as fh:
            yaml.dump(doc, fh)


def _shorten_gates(doc: dict[str, Any]) -> None:
    for stage in doc["spec"]["stages"]:
        stage.setdefault("gate", {}).update(DEMO_GATES)


def _bump_driver(version: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["driver"]["version"] = version

    return change


class Show:
    """Prints the rollout's state whenever it changes."""

    def __init__(self, ctl: Controller, tb: session.Testbed, say: Say) -> None:
        self.ctl, self.tb, self.say = ctl, tb, say
        self.last = ""
        self.start = time.monotonic()

    def stage_state(self, sha: str, stage: str) -> CommitStatus | None:
        return self.ctl.backend.latest(sha, stage_context(stage))

    def render(self, sha: str) -> str:
        lines = []
        compiled = self.ctl.compiled_for(sha)
        nodes = self.tb.client.list("v1", "Node")["items"]
        for stage in compiled.stages if compiled else ():
            st = self.stage_state(sha, stage.name)
            state = f"{st.state:8} {st.description}" if st else "-"
            lines.append(f"  {stage.name:10} {sha[:7]} {state}")
            for pool in stage.pools:
                target = compiled.pool(pool) if compiled else None
                members = [
                    n
                    for n in nodes
                    if target
                    and all(
                        n["metadata"]["labels"].get(k) == v for k, v in target.node_selector.items()
                    )
                ]
                versions = sorted(
                    {
                        (n["metadata"].get("annotations") or {}).get(sim.DRIVER_ANN, "?")
                        + (
                            "/" + n["metadata"]["labels"].get(names.UPGRADE_STATE_LABEL, "")
                            if n["metadata"]["labels"].get(names.UPGRADE_STATE_LABEL, "")
                            not in ("", "upgrade-done")
                            else ""
                        )
                        for n in members
                    }
                )
                lines.append(f"      {pool:12} {len(members)} nodes: {', '.join(versions)}")
        return "\n".join(lines)

    def tick(self, sha: str) -> None:
        text = self.render(sha)
        if text != self.last:
            self.say(f"[{time.monotonic() - self.start:6.1f}s]\n{text}")
            self.last = text


def _wait(
    show: Show,
    sha: str,
    done: Callable[[], bool],
    timeout: float,
    on_tick: Callable[[], None] | None = None,
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        show.tick(sha)
        if on_tick:
            on_tick()
        if done():
            show.tick(sha)
            return True
        time.sleep(0.5)
    return False


def run(
    workdir: Path,
    *,
    keep: bool = False,
    nodes_per_pool: int = 2,
    say: Say = print,
    operator_mode: str = operator.DEFAULT_MODE,
    verify_signatures: bool = False,
) -> int:
    workdir = workdir.resolve()
    # Connection retries while the control plane stops are expected; keep the story readable.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    say(
        f"== starting a local control plane in {workdir} (kube-apiserver, etcd, kcm, "
        f"kube-scheduler, kwok; GPU Operator: {operator_mode})"
    )
    tb = session.start(
        workdir / "testbed",
        fleet=paths.fleet_example(),
        nodes_per_pool=nodes_per_pool,
        progress=lambda m: say(f"   {m}"),
        operator_mode=operator_mode,
    )
    stop = threading.Event()
    controllers: list[Controller] = []
    threads: list[threading.Thread] = []
    sim_ = simulator.Simulator(
        tb.client, tick=0.2, report_fn=snapshot_report, plays_operator=operator_mode == "sim"
    ).start()
    try:
        _nodes_table(tb, say)
        repo = DemoRepo(workdir)
        trust = DemoTrust(workdir, say) if verify_signatures else None
        if trust is not None:
            trust.sign_commits(repo)
        repo.edit_yaml("fleet.yaml", _shorten_gates)
        first = repo.commit("fleet-repo-example (demo: gates shortened to seconds)")
        ctl = Controller(
            Config(
                repo=str(repo.bare),
                cache_dir=workdir / "cache",
                interval=1.0,
                verifier=trust.verifier if trust is not None else None,
            ),
            tb.client,
        )
        controllers.append(ctl)
        thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
        threads.append(thread)
        thread.start()
        show = Show(ctl, tb, say)
        stages = [s.name for s in compile_fleet(load_repo(repo.work), first).stages]
        approve = _approver(ctl, say)
        say(f"\n== rolling out {first[:7]} to an empty cluster")
        ok = _wait(
            show,
            first,
            lambda: _all_success(show, first, stages),
            180,
            lambda: approve(first, stages),
        )
        if trust is not None:
            ok = trust.unsigned_held_back(repo, ctl, stages, say) and ok
        say("\n== bumping the driver 580.126.20 -> 580.142.01")
        repo.edit_yaml("base/clusterpolicy.yaml", _bump_driver("580.142.01"))
        bump = repo.commit("driver: bump to 580.142.01")
        ctl.trigger()
        ok = ok and _wait(
            show, bump, lambda: _all_success(show, bump, stages), 240, lambda: approve(bump, stages)
        )
        ok = _sharing_change(repo, ctl, show, tb, stages, approve, say) and ok
        say("\n== a bump whose upgrade fails on the canary nodes (fault injected)")
        for node in tb.client.list("v1", "Node")["items"]:
            if node["metadata"]["name"].startswith("canary-"):
                tb.client.patch(
                    "v1",
                    "Node",
                    node["metadata"]["name"],
                    {"metadata": {"annotations": {sim.FAULT_ANN: "upgrade-failed"}}},
                )
        repo.edit_yaml("base/clusterpolicy.yaml", _bump_driver("580.159.03"))
        bad = repo.commit("driver: bump to 580.159.03")
        ctl.trigger()
        failed = _wait(show, bad, lambda: _state(show, bad, stages[0]) == "failure", 180)
        untouched = all(_state(show, bad, s) is None for s in stages[1:])
        say(
            f"\n== canary {'failed' if failed else 'did not fail'}; later stages "
            f"{'never saw' if untouched else 'SAW'} {bad[:7]}"
        )
        ok = ok and failed and untouched
        say(f"\nresult: {'OK' if ok else 'FAILED'}")
        if keep:
            say(
                f"\nleft running: export KUBECONFIG={tb.kubeconfig}; "
                f"stop with gitops-gpu testbed down --dir {workdir / 'testbed'}"
            )
        return 0 if ok else 1
    finally:
        stop.set()
        for ctl_ in controllers:
            ctl_.trigger()
        for th in threads:
            th.join(timeout=30)
        sim_.stop()
        if not keep:
            session.stop(workdir / "testbed")


def _sharing_change(
    repo: DemoRepo,
    ctl: Controller,
    show: Show,
    tb: session.Testbed,
    stages: list[str],
    approve: Callable[[str, list[str]], None],
    say: Say,
) -> bool:
    say(
        f"\n== {demo_sharing.POOL}: time-slicing 4 -> {demo_sharing.REPLICAS} replicas per GPU "
        f"(configs/device-plugin/{demo_sharing.NEW_CONFIG}.yaml)"
    )
    watch = demo_sharing.Watch(tb.client)
    watch.begin()
    repo.edit_yaml(f"nodepools/{demo_sharing.POOL}/pool.yaml", demo_sharing.switch_config)
    sha = repo.commit(f"{demo_sharing.POOL}: {demo_sharing.NEW_CONFIG}")
    ctl.trigger()

    def tick() -> None:
        approve(sha, stages)
        watch.sample({s: _state(show, sha, s) for s in stages})

    done = _wait(show, sha, lambda: _all_success(show, sha, stages), 240, tick)
    compiled = compile_fleet(load_repo(repo.work), sha)
    stage_of = {p: s.name for s in compiled.stages for p in s.pools}
    return watch.report(stages, stage_of, say) and done


def _state(show: Show, sha: str, stage: str) -> str | None:
    st = show.stage_state(sha, stage)
    return st.state if st else None


def _all_success(show: Show, sha: str, stages: list[str]) -> bool:
    return all(_state(show, sha, s) == "success" for s in stages)


def _approver(ctl: Controller, say: Say) -> Callable[[str, list[str]], None]:
    done: set[tuple[str, str]] = set()

    def approve(sha: str, stages: list[str]) -> None:
        for stage in stages:
            st = ctl.backend.latest(sha, stage_context(stage))
            if st and "approval" in st.description and (sha, stage) not in done:
                say(
                    f"   {stage} has applied nothing of {sha[:7]} yet; a person approves: "
                    f"gitops-gpu approve {sha[:7]} --stage {stage}"
                )
                # What `gitops-gpu approve` does: sealed with the controller's key.
                ctl.record.write(
                    CommitStatus(
                        sha,
                        approval_context(stage),
                        "success",
                        "approved by the platform lead",
                        created_at=time.time(),
                    )
                )
                done.add((sha, stage))
                ctl.trigger()

    return approve


def _nodes_table(tb: session.Testbed, say: Say) -> None:
    say("== fake GPU nodes per pool")
    for node in sorted(tb.client.list("v1", "Node")["items"], key=lambda n: n["metadata"]["name"]):
        lab = node["metadata"]["labels"]
        say(
            f"   {node['metadata']['name']:16} {lab.get('nvidia.com/gpu.product', '-'):24} "
            f"x{lab.get('nvidia.com/gpu.count', '?')}  {lab.get('nvidia.com/gpu.family', '')}"
        )
