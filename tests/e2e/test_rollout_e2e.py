"""Full staged rollouts: controller + simulator on the real testbed and a real fleet repo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_harness import Env, fast_gates, set_driver

from gitops_gpu import names
from gitops_gpu.cli import main
from gitops_gpu_dev.testbed import operator_sim as sim

pytestmark = pytest.mark.e2e
STAGES = ("canary", "inference", "training")


def _all_success(env: Env, sha: str) -> bool:
    return all(env.state(sha, s) == "success" for s in STAGES)


def _bootstrap(env: Env, *, approval: bool = False) -> str:
    first = env.remote.commit("fast gates", fast_gates(approval))
    env.start_nodes()
    env.controller()
    env.wait("initial rollout", lambda: _all_success(env, first))
    return first


def test_driver_bump_goes_canary_then_later_stages(env: Env) -> None:
    first = _bootstrap(env)
    bump = env.remote.commit("bump driver", set_driver("580.142.01"))
    env.wait("bump succeeds everywhere", lambda: _all_success(env, bump))
    # The order is the point: canary succeeded before inference adopted the commit.
    canary = [
        s for s in env.statuses(bump) if s.context.endswith("/canary") and s.state == "success"
    ]
    infer = [s for s in env.statuses(bump) if s.context.endswith("/inference")]
    assert canary and infer and canary[0].created_at <= infer[0].created_at
    for node in env.tb.client.list("v1", "Node")["items"]:
        assert node["metadata"]["annotations"][sim.DRIVER_ANN] == "580.142.01"
    report = env.tb.client.get(*names.NODE_GPU_REPORT_API, "canary-000")
    assert report is not None and report["status"]["driverVersion"] == "580.142.01"
    # At most a handful of status writes per commit and context.
    per_context: dict[str, int] = {}
    for s in env.statuses(bump):
        per_context[s.context] = per_context.get(s.context, 0) + 1
    assert max(per_context.values()) <= 5, per_context
    assert env.state(first, "canary") == "success"


def test_canary_failure_holds_and_later_stages_never_see_it(env: Env) -> None:
    first = _bootstrap(env)
    env.tb.client.patch(
        "v1", "Node", "canary-000", {"metadata": {"annotations": {sim.FAULT_ANN: "upgrade-failed"}}}
    )
    bad = env.remote.commit("bump driver (fails on canary)", set_driver("580.159.03"))
    env.wait("canary fails", lambda: env.state(bad, "canary") == "failure")
    # canary's onFailure is rollback: it returns to its last good commit; others stay put.
    env.wait("canary rolled back", lambda: env.pool_commit("canary") == first)
    for stage in STAGES[1:]:
        assert env.state(bad, stage) is None
    for pool in ("infer-l40s", "train-h100", "train-b200"):
        assert env.pool_commit(pool) == first
        drv = env.tb.client.get(*names.NVIDIA_DRIVER_API, pool)
        assert drv is not None and drv["spec"]["version"] == "580.126.20"


def test_two_quick_commits_the_first_is_superseded(env: Env) -> None:
    _bootstrap(env)
    a = env.remote.commit("bump A", set_driver("580.142.01"))
    b = env.remote.commit("bump B", set_driver("580.159.03"))
    env.wait("B everywhere", lambda: _all_success(env, b))
    assert env.state(a, "inference") is None or env.state(a, "inference") == "error"
    assert env.state(a, "training") in (None, "error")


def test_approval_gate_waits_for_a_person(env: Env) -> None:

    first = env.remote.commit("gates with approval", fast_gates(approval=True))
    env.start_nodes()
    env.controller()
    env.wait("inference succeeds", lambda: env.state(first, "inference") == "success")
    env.wait("training waits", lambda: "approval" in env.description(first, "training"))
    assert env.state(first, "training") == "pending"
    assert (
        main(
            [
                "approve",
                first,
                "--stage",
                "training",
                "--repo",
                env.remote.url,
                "--kubeconfig",
                env.tb.kubeconfig,
            ]
        )
        == 0
    )
    env.wait("training succeeds after approval", lambda: env.state(first, "training") == "success")


def test_preflight_failure_gets_status_and_nothing_is_applied(env: Env) -> None:
    first = _bootstrap(env)
    before = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"]
        for d in env.tb.client.list(*names.NVIDIA_DRIVER_API)["items"]
    }

    def bogus(work: Path) -> None:
        path = work / "base" / "clusterpolicy.yaml"
        path.write_text(
            path.read_text().replace("kernelModuleType: auto", "kernelModuleType: bogus")
        )

    bad = env.remote.commit("bogus kernelModuleType", bogus)
    env.wait(
        "preflight failure recorded",
        lambda: env.context_state(bad, "gitops-gpu/preflight") == "failure",
    )
    after = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"]
        for d in env.tb.client.list(*names.NVIDIA_DRIVER_API)["items"]
    }
    assert after == before
    assert all(env.state(bad, s) is None for s in STAGES)
    assert env.pool_commit("canary") == first


def test_killed_controller_resumes_without_redoing_finished_stages(env: Env) -> None:
    first = _bootstrap(env)
    ctl = env.running[0]
    bump = env.remote.commit("bump driver", set_driver("580.142.01"))
    env.wait("canary succeeded", lambda: env.state(bump, "canary") == "success")
    ctl.kill()
    canary_writes = len([s for s in env.statuses(bump) if s.context.endswith("/canary")])
    env.controller("b")
    env.wait("bump everywhere after restart", lambda: _all_success(env, bump))
    assert len([s for s in env.statuses(bump) if s.context.endswith("/canary")]) == canary_writes
    assert env.state(first, "training") == "success"


def test_two_replicas_one_leader(env: Env) -> None:
    first = env.remote.commit("fast gates", fast_gates())
    env.start_nodes()
    a = env.controller("a", leader_election=True)
    b = env.controller("b", leader_election=True)
    env.wait("rollout", lambda: _all_success(env, first))
    leaders = [rc for rc in (a, b) if rc.lease is not None and rc.lease.is_leader]
    assert len(leaders) == 1
    standby = b if leaders[0] is a else a
    assert standby.passes == 0
    leaders[0].kill()  # releases the lease
    bump = env.remote.commit("bump driver", set_driver("580.142.01"))
    env.wait("the other replica takes over", lambda: _all_success(env, bump), timeout=120)
    assert standby.passes > 0


def test_plan_reports_nvml_drift_of_a_gpu_off_the_bus(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    _bootstrap(env)

    def drift() -> list[dict[str, str]]:
        capsys.readouterr()
        rc = main(
            [
                "plan",
                "--repo",
                env.remote.url,
                "--kubeconfig",
                env.tb.kubeconfig,
                "--format",
                "json",
            ]
        )
        assert rc == 0  # objects and labels are in sync either way
        found: list[dict[str, str]] = json.loads(capsys.readouterr().out)["nvmlDrift"]
        return found

    assert drift() == []
    env.tb.client.patch(
        "v1", "Node", "canary-000", {"metadata": {"annotations": {sim.FAULT_ANN: "xid79"}}}
    )
    env.wait(
        "the report shows the lost GPU",
        lambda: any(d["node"] == "canary-000" and d["field"] == "gpuCount" for d in drift()),
    )
    assert {d["node"] for d in drift()} == {"canary-000"}


def test_a_cluster_wide_change_is_carried_by_the_first_stage_and_flagged(env: Env) -> None:
    _bootstrap(env)

    def runtime_class(work: Path) -> None:
        path = work / "base" / "clusterpolicy.yaml"
        path.write_text(
            path.read_text().replace("runtimeClass: nvidia", "runtimeClass: nvidia-cdi")
        )

    change = env.remote.commit("operator runtime class", runtime_class)
    env.wait("canary carries it", lambda: env.state(change, "canary") == "success")
    cp = env.tb.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
    assert cp is not None and cp["spec"]["operator"]["runtimeClass"] == "nvidia-cdi"
    flagged = [
        e
        for e in env.tb.client.list("v1", "Event", namespace="default")["items"]
        if e["reason"] == "ClusterWideChange" and change[:12] in e["message"]
    ]
    assert len(flagged) == 1
    assert "stage canary" in flagged[0]["message"] and "infer-l40s" in flagged[0]["message"]
    assert flagged[0]["involvedObject"]["kind"] == "ClusterPolicy"
    env.wait("later stages follow", lambda: _all_success(env, change))
