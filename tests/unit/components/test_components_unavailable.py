"""Nodes that are not available (NotReady, or cordoned by someone other than the GPU Operator's
driver upgrade) under each ``unavailableNodes`` policy, from the ladder's verdict through the
pass's observation (observe.py) to the stage's gate and status (rollout/gate.py, machine)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from components_builders import DRIVER, NOW, edit, healthy, pool, status_for

from gitops_gpu import names, stage_view
from gitops_gpu.components import ladder, node
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import Health, Unavailability
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet, PoolTarget, StageSpec
from gitops_gpu.observe import Observer
from gitops_gpu.rollout import gate
from gitops_gpu.rollout.actions import SetStatus
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.status import FAILURE, PREFLIGHT_CONTEXT, SUCCESS, CommitStatus
from gitops_gpu.snapshot import PassSnapshot, Snapshot
from gitops_gpu.sync import diff, engine

Obj = dict[str, Any]
SHA = "b" * 40
NODES = ("gpu-1", "gpu-2", "gpu-3", "gpu-4")
DOWN_SINCE = NOW - timedelta(minutes=12)
STATE = names.UPGRADE_STATE_LABEL
INITIAL_STATE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
SKIP, PROG, DEG = Health.SKIPPED, Health.PROGRESSING, Health.DEGRADED


def not_ready(name: str, since: datetime | None = DOWN_SINCE) -> NodeEvidence:
    return edit(healthy(name), ready="Unknown", ready_since=since)


def cordoned(name: str, state: str = "upgrade-done", **labels: str | None) -> NodeEvidence:
    return edit(healthy(name), labels={STATE: state, **labels}, cordoned=True)


# -- a pass over a pool of 4 ----------------------------------------------------------------------
def _obj(ev: NodeEvidence, rv: str) -> Obj:
    return {**ev.node, "metadata": {**ev.node["metadata"], "resourceVersion": rv}}


def _report(name: str) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "status": status_for(name)}


def fleet(target: PoolTarget) -> CompiledFleet:
    cluster = ClusterTarget("lab", None, {"spec": {}}, {target.name: target})
    return CompiledFleet(SHA, "fleet", (StageSpec("canary", (target.name,)),), {"lab": cluster})


def pass_over(
    evidence: Sequence[NodeEvidence], *, rv: str = "1", at: datetime = NOW
) -> tuple[Snapshot, Sequence[Obj]]:
    nodes = [_obj(ev, rv) for ev in evidence]
    reports = {ev.name: _report(ev.name) for ev in evidence}
    return Snapshot(nodes, 1, reports, {}, at), nodes


def judge(
    target: PoolTarget,
    evidence: Sequence[NodeEvidence],
    *,
    observer: Observer | None = None,
    rv: str = "1",
    at: datetime = NOW,
) -> PoolObservation:
    informers, nodes = pass_over(evidence, rv=rv, at=at)
    compiled = fleet(target)
    obj = diff.ObjectDiff("NVIDIADriver", target.name, target.name, diff.Action.UNCHANGED)
    snap = PassSnapshot(
        informers,
        {
            target.name: {
                "metadata": {"name": target.name, "annotations": {names.COMMIT_ANNOTATION: SHA}}
            }
        },
        {SHA: compiled},
        {target.name: nodes},
        {(target.name, SHA): engine.PoolPlan(target.name, (obj,), (), len(nodes))},
    )
    return (observer or Observer()).judge(snap, compiled)[0][target.name]


def four_with(*down: NodeEvidence) -> list[NodeEvidence]:
    gone = {ev.name for ev in down}
    return [healthy(n) for n in NODES if n not in gone] + list(down)


def gate_of(obs: PoolObservation) -> gate.StageView:
    return gate.observe(StageSpec("canary", (obs.pool,)), {obs.pool: obs}, SHA)


def statuses_of(obs: PoolObservation) -> list[SetStatus]:
    """One machine step for a stage whose pool carries SHA (soak 0): what it writes."""
    actions = step(
        RolloutInput(
            commits=(Commit(SHA, True),),
            statuses=[CommitStatus(SHA, PREFLIGHT_CONTEXT, SUCCESS)],
            pools={obs.pool: obs},
            stages=(StageSpec("canary", (obs.pool,)),),
            now=NOW.timestamp(),
        )
    )
    return [a for a in actions if isinstance(a, SetStatus) and a.context != PREFLIGHT_CONTEXT]


# -- one NotReady node of 4, under each policy ----------------------------------------------------
def test_skip_counts_the_node_converges_without_it_and_says_so() -> None:
    obs = judge(pool(), four_with(not_ready("gpu-4")))
    assert (obs.nodes_total, obs.nodes_healthy, obs.nodes_unhealthy, obs.nodes_progressing) == (
        4,
        3,
        0,
        0,
    )
    assert (obs.nodes_unavailable, obs.unavailable_kinds) == (1, ("NotReady",))
    view = gate_of(obs)
    assert view.converged and not view.too_many_unhealthy
    assert view.summary == f"3/4 nodes on {DRIVER}, 1 unavailable (NotReady), skipped"
    (status,) = statuses_of(obs)
    assert status.state == SUCCESS
    assert status.description.endswith("1 unavailable (NotReady), skipped")


def test_skip_is_the_default_and_the_verdict_carries_the_reason() -> None:
    verdict = ladder.walk(not_ready("gpu-4"), pool())
    assert verdict.health is SKIP
    assert verdict.unavailable == Unavailability(
        "NotReady", "NotReady since 12m (NodeStatusUnknown)"
    )
    assert verdict.reason == "NotReady since 12m (NodeStatusUnknown), skipped"
    assert verdict.cause == "gpu-4 NotReady since 12m (NodeStatusUnknown), skipped"
    # the rungs are still judged (gitops-gpu nodes shows them)
    assert verdict.failing is not None and verdict.failing.component == "node"
    pool_health = ladder.judge_pool(pool(), four_with(not_ready("gpu-4")))
    assert pool_health.health is Health.HEALTHY
    assert pool_health.reason == "train: 3 Healthy, 1 Skipped"
    assert pool_health.first_failure == "gpu-4 NotReady since 12m (NodeStatusUnknown), skipped"
    # what `gitops-gpu status` lists for the pool
    assert stage_view.pool_entry("train", pool_health) == {
        "pool": "train",
        "healthy": 3,
        "total": 4,
        "unavailable": 1,
        "health": "Healthy",
        "firstFailure": "gpu-4: NotReady since 12m (NodeStatusUnknown), skipped",
        "waiting": [],
    }


def test_wait_keeps_the_stage_progressing_with_the_reason() -> None:
    obs = judge(pool(unavailable_nodes="wait"), four_with(not_ready("gpu-4")))
    assert (obs.nodes_healthy, obs.nodes_progressing, obs.nodes_unavailable) == (3, 1, 0)
    assert obs.first_failure == (
        "gpu-4 NotReady since 12m (NodeStatusUnknown), waiting for it (unavailableNodes: wait)"
    )
    view = gate_of(obs)
    assert not view.converged and not view.too_many_unhealthy
    assert view.summary == f"3/4 nodes on {DRIVER}, 1 progressing"
    (status,) = statuses_of(obs)
    assert status.state != FAILURE and "rolling out" in status.description


def test_fail_fails_the_stage_naming_the_node() -> None:
    obs = judge(pool(unavailable_nodes="fail"), four_with(not_ready("gpu-4")))
    assert (obs.nodes_healthy, obs.nodes_unhealthy, obs.nodes_unavailable) == (3, 1, 0)
    assert obs.first_failure == "gpu-4 NotReady since 12m (NodeStatusUnknown)"
    assert gate_of(obs).too_many_unhealthy
    (status,) = statuses_of(obs)
    assert (status.state, status.description) == (
        FAILURE,
        "canary: 1 node unhealthy (max 0): gpu-4 NotReady since 12m (NodeStatusUnknown)",
    )


def test_a_node_without_a_ready_condition_or_its_time_is_not_ready() -> None:
    bare = NodeEvidence("gpu-9", {"metadata": {"name": "gpu-9"}, "status": {}}, None, (), NOW)
    assert node.unavailable(bare, pool()) == Unavailability(
        "NotReady", "NotReady (no Ready condition: the kubelet never reported)"
    )
    assert node.unavailable(not_ready("gpu-4", since=None), pool()) == Unavailability(
        "NotReady", "NotReady (NodeStatusUnknown)"
    )
    long_ago = not_ready("gpu-4", since=NOW - timedelta(hours=50, minutes=5))
    assert node.unavailable(long_ago, pool()) == Unavailability(
        "NotReady", "NotReady since 2d2h (NodeStatusUnknown)"
    )


# -- whose cordon ---------------------------------------------------------------------------------
def test_a_cordon_by_an_admin_makes_an_unhealthy_node_unavailable() -> None:
    # Not verified on the commit (the validator has not run there): a rung fails.
    down = edit(cordoned("gpu-4"), annotations={"gitops-gpu.io/validator": "running"})
    verdict = ladder.walk(down, pool())
    assert verdict.health is SKIP
    assert verdict.reason == "cordoned (not by the driver upgrade), skipped"
    obs = judge(pool(), four_with(down))
    assert gate_of(obs).summary == f"3/4 nodes on {DRIVER}, 1 unavailable (cordoned), skipped"
    failed = judge(pool(unavailable_nodes="fail"), four_with(down))
    assert failed.first_failure == "gpu-4 cordoned (not by the driver upgrade)"


def test_a_cordoned_node_healthy_on_every_rung_counts_healthy() -> None:
    # E.g. a cordon the operator keeps at upgrade-done (there when its upgrade began): the
    # node runs the commit; skipping it would stall a pool of one for good.
    kept = edit(cordoned("gpu-4"), annotations={INITIAL_STATE: "true"})
    verdict = ladder.walk(kept, pool())
    assert verdict.health is Health.HEALTHY and verdict.unavailable is None
    assert judge(pool(), four_with(kept)).nodes_healthy == 4


@pytest.mark.parametrize(
    "state",
    [
        "upgrade-required",
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "node-maintenance-required",
        "post-maintenance-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
    ],
)
def test_a_cordon_by_the_driver_upgrade_is_the_upgrade_in_progress(state: str) -> None:
    ev = cordoned("gpu-4", state)
    assert node.unavailable(ev, pool()) is None
    verdict = ladder.walk(ev, pool())
    assert (verdict.health, verdict.unavailable) == (PROG, None)
    assert verdict.reason.startswith("driver: ") and f"upgrade-state {state}" in verdict.reason
    # a pool that would fail unavailable nodes waits for it like any upgrading node
    obs = judge(pool(unavailable_nodes="fail"), four_with(ev))
    assert (obs.nodes_progressing, obs.nodes_unhealthy, obs.nodes_unavailable) == (1, 0, 0)


def test_a_failed_upgrade_holding_its_cordon_is_judged_not_skipped() -> None:
    verdict = ladder.walk(cordoned("gpu-4", "upgrade-failed"), pool())
    assert (verdict.health, verdict.unavailable) == (DEG, None)
    assert "upgrade-state upgrade-failed" in verdict.reason


def test_cordons_the_upgrade_leaves_or_does_not_own_are_unavailable() -> None:
    # The operator's annotation marks a cordon that was there BEFORE its upgrade: it leaves
    # the node cordoned at upgrade-done, and that cordon is the admin's.
    kept = edit(cordoned("gpu-4", "upgrade-done"), annotations={INITIAL_STATE: "true"})
    # mid-upgrade it is still the upgrade in progress
    mid = edit(cordoned("gpu-4", "drain-required"), annotations={INITIAL_STATE: "true"})
    # a node the operator is told to leave be, and a pool whose driver is not the operator's
    skipped = cordoned("gpu-4", "upgrade-required", **{names.UPGRADE_SKIP_LABEL: "true"})
    no_state = cordoned("gpu-4", "upgrade-done", **{STATE: None})
    own_driver = pool(extra_labels={names.DEPLOY_LABEL_PREFIX + "driver": "false"})
    assert node.unavailable(kept, pool()) is not None
    assert node.unavailable(mid, pool()) is None
    assert node.unavailable(skipped, pool()) is not None
    assert node.unavailable(no_state, pool()) is not None
    assert node.unavailable(cordoned("gpu-4", "drain-required"), own_driver) is not None


# -- skipping is bounded by the disruption budget -------------------------------------------------
def test_skip_never_leaves_out_more_than_max_unavailable() -> None:
    down = four_with(not_ready("gpu-3"), not_ready("gpu-4"))
    obs = judge(pool(max_unavailable=1), down)
    assert (obs.nodes_healthy, obs.nodes_unavailable, obs.nodes_unhealthy) == (2, 1, 1)
    assert obs.first_failure == (
        "gpu-4 NotReady since 12m (NodeStatusUnknown), not skipped: 2 unavailable, more than "
        "maxUnavailable (1)"
    )
    view = gate_of(obs)
    assert view.too_many_unhealthy and not view.converged
    assert view.summary == f"2/4 nodes on {DRIVER}, 1 unavailable (NotReady), skipped, 1 unhealthy"
    # a percent of the pool's nodes, rounded up as the GPU Operator does: 50% of 4 is 2
    both = judge(pool(max_unavailable="50%"), down)
    assert (both.nodes_unavailable, both.nodes_unhealthy) == (2, 0)
    assert gate_of(both).converged


def test_a_pool_with_every_node_unavailable_has_nothing_to_judge() -> None:
    obs = judge(pool(max_unavailable="100%"), [not_ready(n) for n in NODES])
    assert (obs.nodes_unavailable, obs.nodes_progressing) == (0, 4)
    assert obs.first_failure == (
        "gpu-1 NotReady since 12m (NodeStatusUnknown), not skipped: no available node to judge "
        "the pool on"
    )
    assert not gate_of(obs).converged


def test_kinds_of_several_pools_are_said_once() -> None:
    a = PoolObservation("a", SHA, True, 4, 3, summary="on x", nodes_unavailable=1)
    a = PoolObservation(**{**a.__dict__, "unavailable_kinds": ("NotReady",)})
    b = PoolObservation("b", SHA, True, 4, 2, summary="on x", nodes_unavailable=2)
    b = PoolObservation(**{**b.__dict__, "unavailable_kinds": ("NotReady", "cordoned")})
    view = gate.observe(StageSpec("s", ("a", "b")), {"a": a, "b": b}, SHA)
    assert view.converged
    assert view.summary == "5/8 nodes on x, 3 unavailable (NotReady, cordoned), skipped"


# -- caught up when it returns --------------------------------------------------------------------
def test_a_node_that_becomes_ready_again_is_judged_again() -> None:
    observer = Observer()
    down = judge(pool(), four_with(not_ready("gpu-4")), observer=observer)
    assert down.nodes_unavailable == 1
    # Back, on an old driver: judged by the ladder again (progressing: the upgrade catches up)
    behind = edit(healthy("gpu-4"), labels={names.UPGRADE_STATE_LABEL: "upgrade-required"})
    back = judge(pool(), four_with(behind), observer=observer, rv="2")
    assert (back.nodes_unavailable, back.nodes_progressing, back.nodes_healthy) == (0, 1, 3)
    assert back.first_failure is not None and back.first_failure.startswith("gpu-4 driver: ")
    assert not gate_of(back).converged  # a stage that had converged relapses until it caught up
    done = judge(pool(), four_with(), observer=observer, rv="3")
    assert (done.nodes_healthy, done.nodes_unavailable) == (4, 0)


def test_how_long_a_node_has_been_down_is_said_afresh() -> None:
    """The verdict is memoised by the node's inputs, but one naming a time is judged again
    within a minute, though the node object did not change."""
    observer = Observer()
    evidence = four_with(not_ready("gpu-4"))
    target = pool(unavailable_nodes="fail")
    assert judge(target, evidence, observer=observer).first_failure == (
        "gpu-4 NotReady since 12m (NodeStatusUnknown)"
    )
    later = NOW + timedelta(minutes=3)
    assert judge(target, evidence, observer=observer, at=later).first_failure == (
        "gpu-4 NotReady since 15m (NodeStatusUnknown)"
    )
