"""Every change reaches a pool only through its stage (issue 13), on the testbed: approval before
adoption, deletion through stages, and a toolkit bump whose operand pods move stage by stage
(the real GPU Operator's DaemonSets with OnDelete)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Env, fast_gates, set_driver
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.sync import operands

pytestmark = pytest.mark.e2e
STAGES = ("canary", "inference", "training")
TRAINING = ("train-h100", "train-b200")


def _all_success(env: Env, sha: str, stages: tuple[str, ...] = STAGES) -> bool:
    return all(env.state(sha, s) == "success" for s in stages)


def _phase(env: Env, sha: str, stage: str) -> Phase | None:
    latest = env.record.latest(sha, stage_context(stage))
    mark = read_mark(latest) if latest else None
    return mark.phase if mark else None


def _approve(env: Env, sha: str, stage: str = "training") -> None:
    args = ["approve", sha, "--stage", stage, "--repo", env.remote.url]
    assert main([*args, "--kubeconfig", env.tb.kubeconfig]) == 0


def _bootstrap(env: Env, per_pool: int = 1) -> str:
    """Fast gates, training keeps `approval: required`; the first commit approved."""
    first = env.remote.commit("fast gates, training needs approval", fast_gates(approval=True))
    env.start_nodes(per_pool)
    env.controller()
    env.wait("canary and inference", lambda: _all_success(env, first, STAGES[:2]), 150)
    _approve(env, first)
    env.wait("initial rollout", lambda: _all_success(env, first), 150)
    return first


def _driver_version(env: Env, pool: str) -> str:
    drv = env.tb.client.get(*names.NVIDIA_DRIVER_API, pool)
    assert drv is not None
    return str(drv["spec"]["version"])


def test_approval_comes_before_anything_is_applied(env: Env) -> None:
    first = _bootstrap(env)
    bump = env.remote.commit("bump driver", set_driver("580.142.01"))
    env.wait(
        "training awaits approval to roll out",
        lambda: _phase(env, bump, "training") is Phase.AWAITING_ROLLOUT_APPROVAL,
        150,
    )
    assert _all_success(env, bump, STAGES[:2])
    waiting = env.description(bump, "training")
    assert f"runs {first[:7]}" in waiting, waiting
    time.sleep(3)  # several passes: still nothing of the bump on the training pools
    for pool in TRAINING:
        assert env.pool_commit(pool) == first
        assert _driver_version(env, pool) == "580.126.20"
    approved_at = time.time()
    _approve(env, bump)
    env.wait("training rolls out after approval", lambda: _all_success(env, bump), 150)
    history = [
        read_mark(s)
        for s in env.statuses(bump)
        if s.context == stage_context("training") and s.state == "pending"
    ]
    phases = [m.phase for m in history if m is not None]
    assert phases[0] is Phase.AWAITING_ROLLOUT_APPROVAL and Phase.ROLLING_OUT in phases
    rolled = [s for s in env.statuses(bump) if s.context == stage_context("training")]
    assert all(s.created_at >= approved_at for s in rolled if "rolling out" in s.description)
    for pool in TRAINING:
        assert _driver_version(env, pool) == "580.142.01"


def _drop_pool(pool: str) -> Any:
    def edit(work: Path) -> None:
        shutil.rmtree(work / "nodepools" / pool)
        yaml = YAML()
        fleet = yaml.load((work / "fleet.yaml").read_text())
        for stage in fleet["spec"]["stages"]:
            if pool in stage["pools"]:
                stage["pools"].remove(pool)
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(fleet, fh)

    return edit


def _labelled(env: Env, pool: str) -> list[str]:
    return [
        n["metadata"]["name"]
        for n in env.tb.client.list("v1", "Node")["items"]
        if (n["metadata"].get("labels") or {}).get(names.POOL_LABEL) == pool
    ]


def test_a_removed_pool_is_pruned_only_when_its_stage_adopts(env: Env) -> None:
    _bootstrap(env)
    removal = env.remote.commit("remove train-b200", _drop_pool("train-b200"))
    env.wait("canary and inference pass it", lambda: _all_success(env, removal, STAGES[:2]), 150)
    env.wait(
        "training awaits approval",
        lambda: _phase(env, removal, "training") is Phase.AWAITING_ROLLOUT_APPROVAL,
        60,
    )
    time.sleep(3)
    # canary (the ClusterPolicy's stage) adopted the removal long ago: the pool is still there
    assert env.tb.client.get(*names.NVIDIA_DRIVER_API, "train-b200") is not None
    assert _labelled(env, "train-b200")
    _approve(env, removal)
    env.wait(
        "pruned by its stage",
        lambda: env.tb.client.get(*names.NVIDIA_DRIVER_API, "train-b200") is None,
        150,
    )
    env.wait("its labels removed", lambda: not _labelled(env, "train-b200"), 60)
    env.wait("training passes", lambda: env.state(removal, "training") == "success", 150)
    assert env.pool_commit("train-h100") == removal


def _set_toolkit(version: str) -> Any:
    def edit(work: Path) -> None:
        yaml = YAML()
        path = work / "base" / "clusterpolicy.yaml"
        doc = yaml.load(path.read_text())
        doc["spec"]["toolkit"]["version"] = version
        with path.open("w") as fh:
            yaml.dump(doc, fh)

    return edit


class RevisionWatch:
    """Samples, every 0.2 s, which toolkit revision each node's pod runs and which commit each
    pool's NVIDIADriver carries: the timestamps the measurement reports."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.moved: dict[str, float] = {}  # node -> first time seen on the target revision
        self.adopted: dict[str, float] = {}  # pool -> first time seen on the target commit
        self.target_revision: str | None = None
        self.target_commit: str | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _toolkit(self) -> tuple[str | None, list[dict[str, Any]]]:
        client = self.env.tb.client
        ns = "gpu-operator"
        dss = client.list(*operands.DAEMONSET_API, namespace=ns)["items"]
        revs = client.list(*operands.REVISION_API, namespace=ns)["items"]
        pods = client.list("v1", "Pod", namespace=ns)["items"]
        ops = operands.read(dss, revs, pods)
        toolkit = [v for v in ops.daemonsets.values() if "toolkit" in v.name]
        current = toolkit[0].revision if toolkit else None
        mine = [p for p in pods if "toolkit" in p["metadata"]["name"]]
        return current, mine

    def _run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            try:
                _, pods = self._toolkit()
                for pool in ("canary", "infer-l40s", *TRAINING):
                    if (
                        pool not in self.adopted
                        and self.env.pool_commit(pool) == self.target_commit
                    ):
                        self.adopted[pool] = now
                if self.target_revision is not None:
                    for pod in pods:
                        labels = pod["metadata"].get("labels") or {}
                        node = pod["spec"].get("nodeName")
                        if (
                            node
                            and node not in self.moved
                            and labels.get(operands.REVISION_LABEL) == self.target_revision
                            and (pod.get("status") or {}).get("phase") == "Running"
                        ):
                            self.moved[node] = now
            except Exception:  # a sample may race a deletion; the next one sees it
                pass
            time.sleep(0.2)


@pytest.mark.timeout(900)  # a loaded CI machine: its waits add up past the default
def test_toolkit_bump_reaches_each_stage_s_pods_only_when_it_adopts(env: Env) -> None:
    if env.operator != "real":
        pytest.fail("operand DaemonSets exist only with the real GPU Operator", pytrace=False)
    first = _bootstrap(env, per_pool=2)  # two nodes a pool: maxUnavailable 1 is two batches
    watch = RevisionWatch(env)
    before, pods = watch._toolkit()
    assert before is not None, "the operator made no toolkit DaemonSet"
    nodes = sorted(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
    assert len(nodes) == 8, nodes
    ds = env.tb.client.list(*operands.DAEMONSET_API, namespace="gpu-operator")["items"]
    strategies = {d["metadata"]["name"]: d["spec"]["updateStrategy"]["type"] for d in ds}
    assert all(
        s == "OnDelete" for n, s in strategies.items() if "toolkit" in n or "device-plugin" in n
    ), strategies
    bumped_at = time.time()
    bump = env.remote.commit("bump toolkit", _set_toolkit("v1.19.2"))
    watch.target_commit = bump
    watch.thread.start()
    try:
        env.wait(
            "the operator rolls a new toolkit revision",
            lambda: watch._toolkit()[0] not in (None, before),
            120,
        )
        watch.target_revision = watch._toolkit()[0]
        env.wait("canary and inference pass", lambda: _all_success(env, bump, STAGES[:2]), 240)
        env.wait(
            "training awaits approval",
            lambda: _phase(env, bump, "training") is Phase.AWAITING_ROLLOUT_APPROVAL,
            60,
        )
        time.sleep(3)
        # With OnDelete the operator reads the ClusterPolicy notReady while training's pods
        # keep the old revision (isDaemonSetReady); the gate never reads it.
        live = env.tb.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME) or {}
        policy_state_while_training_waits = (live.get("status") or {}).get("state")
        training_nodes = [n for n in nodes if n.startswith("train-")]
        early = {n: watch.moved[n] for n in training_nodes if n in watch.moved}
        assert early == {}, f"training pods moved before their stage adopted: {early}"
        approved_at = time.time()
        _approve(env, bump)
        env.wait("training passes", lambda: _all_success(env, bump), 480)
        env.wait("every toolkit pod moved", lambda: set(watch.moved) >= set(nodes), 60)
    finally:
        watch.stop.set()
        watch.thread.join(timeout=5)
    # no node's pod moved before its pool's stage adopted the commit
    pool_of = {n: n.rsplit("-", 1)[0] for n in nodes}
    for node, moved in watch.moved.items():
        pool = pool_of[node]
        assert moved >= watch.adopted[pool], (node, moved, watch.adopted)
    for node in training_nodes:
        assert watch.moved[node] >= approved_at
    result = {
        "commit": bump,
        "bumped_at": bumped_at,
        "pool_adopted_s": {p: round(t - bumped_at, 1) for p, t in sorted(watch.adopted.items())},
        "node_moved_s": {n: round(t - bumped_at, 1) for n, t in sorted(watch.moved.items())},
        "training_approved_s": round(approved_at - bumped_at, 1),
        "cluster_policy_state_while_training_waits": policy_state_while_training_waits,
        "first_commit": first,
    }
    out = os.environ.get("GITOPS_GPU_MEASURE_OUT")
    if out:
        Path(out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


def test_a_failed_operand_change_rolls_canary_pods_back_and_later_pods_never_move(
    env: Env,
) -> None:
    if env.operator != "real":
        pytest.fail("operand DaemonSets exist only with the real GPU Operator", pytrace=False)
    first = _bootstrap(env)
    watch = RevisionWatch(env)
    before, pods = watch._toolkit()
    assert before is not None
    original = {
        p["spec"]["nodeName"]: p["metadata"]["labels"][operands.REVISION_LABEL]
        for p in pods
        if p["spec"].get("nodeName")
    }
    assert set(original.values()) == {before}
    later_pods = {
        p["metadata"]["uid"] for p in pods if not p["spec"].get("nodeName", "").startswith("canary")
    }
    # canary-000 loses a GPU (Xid 79) right after the bump: canary fails and rolls back
    bad = env.remote.commit("bump toolkit (canary will fail)", _set_toolkit("v1.19.3"))
    env.wait("new toolkit revision", lambda: watch._toolkit()[0] not in (None, before), 120)
    env.tb.client.patch(
        "v1",
        "Node",
        "canary-000",
        {"metadata": {"annotations": {"sim.gitops-gpu.io/fault": "xid79"}}},
    )
    env.wait("canary fails", lambda: env.state(bad, "canary") == "failure", 150)
    env.tb.client.patch(
        "v1", "Node", "canary-000", {"metadata": {"annotations": {"sim.gitops-gpu.io/fault": None}}}
    )
    env.wait("canary back on the first commit", lambda: env.pool_commit("canary") == first, 60)
    env.wait("the restored revision is current", lambda: watch._toolkit()[0] == before, 60)

    def canary_restored() -> bool:
        _, now = watch._toolkit()
        revs = {
            p["spec"].get("nodeName"): p["metadata"]["labels"].get(operands.REVISION_LABEL)
            for p in now
            if (p.get("status") or {}).get("phase") == "Running"
        }
        return revs.get("canary-000") == before

    env.wait("canary's pod re-evicted to the restored revision", canary_restored, 90)
    _, now = watch._toolkit()
    # later stages' pods never moved: the very pods that ran before the bump
    assert {
        p["metadata"]["uid"] for p in now if not p["spec"].get("nodeName", "").startswith("canary")
    } == later_pods
    for stage in STAGES[1:]:
        assert env.state(bad, stage) is None


def test_removing_most_pools_needs_the_opt_in(env: Env) -> None:
    first = _bootstrap(env)
    gone = ("infer-l40s", "train-h100", "train-b200")

    def drop_three(work: Path) -> None:
        for pool in gone:
            _drop_pool(pool)(work)
        yaml = YAML()
        fleet = yaml.load((work / "fleet.yaml").read_text())
        fleet["spec"]["stages"] = [s for s in fleet["spec"]["stages"] if s["pools"]]
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(fleet, fh)

    refused = env.remote.commit("remove three of four pools", drop_three)
    rc = env.running[0]
    env.wait(
        "the controller refuses it",
        lambda: "removes 3 of the 4 pools" in rc.ctl.last_report.error,
        90,
    )
    time.sleep(2)
    for pool in ("canary", *gone):
        assert env.tb.client.get(*names.NVIDIA_DRIVER_API, pool) is not None
        assert env.pool_commit(pool) == first  # nothing of the commit was applied

    def opt_in(work: Path) -> None:
        yaml = YAML()
        fleet = yaml.load((work / "fleet.yaml").read_text())
        fleet["spec"]["allowMassPoolRemoval"] = True
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(fleet, fh)

    meant = env.remote.commit("yes, remove them", opt_in)
    env.wait("canary passes it", lambda: env.state(meant, "canary") == "success", 150)
    for pool in gone:
        assert env.tb.client.get(*names.NVIDIA_DRIVER_API, pool) is None
    assert env.state(refused, "canary") in (None, "error")
