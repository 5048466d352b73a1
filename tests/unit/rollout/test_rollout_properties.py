"""Properties of the rollout state machine over random sequences of observations.

Pools mostly do what the machine says, but hypothesis also makes them lag, drift to other
commits, lose sync, and report any mix of healthy, degraded and progressing nodes; commits
arrive with random preflight results; approvals and pauses come and go.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollout_sim import T0, sha

from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout.actions import AdoptCommit, HoldUpgrades, Rollback, SetStatus, Wait
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.line import LINE_CONTEXT
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import (
    PENDING,
    PREFLIGHT_CONTEXT,
    SUCCESS,
    VERDICTS,
    MemoryBackend,
    read_record,
    stage_context,
)

STAGES = (
    StageSpec("canary", ("c1",), GateSpec(soak_seconds=300, timeout_seconds=1200), "rollback"),
    StageSpec("staging", ("s1", "s2"), GateSpec(max_unhealthy_nodes=1)),
    StageSpec("production", ("p1",), GateSpec(soak_seconds=60, approval_required=True)),
)
POOLS = [p for stage in STAGES for p in stage.pools]


def passed_preflight(commit: Commit, record: Record) -> bool:
    if commit.preflight is not None:
        return commit.preflight
    return record.state(commit.sha, PREFLIGHT_CONTEXT) == SUCCESS


def check(inp: RolloutInput, actions: list[object]) -> None:
    record = Record(inp.statuses)
    by_sha = {c.sha: c for c in inp.commits}
    index = {s.name: i for i, s in enumerate(inp.stages)}
    if inp.paused:  # only the line's own status is written, and every stage is held
        assert all(
            isinstance(a, Wait | HoldUpgrades)
            or (isinstance(a, SetStatus) and a.context == LINE_CONTEXT)
            for a in actions
        )
        held = {a.stage for a in actions if isinstance(a, HoldUpgrades)}
        assert held == {s.name for s in inp.stages}
    for action in actions:
        if isinstance(action, AdoptCommit | Rollback):
            commit = action.commit if isinstance(action, AdoptCommit) else action.to_commit
            assert passed_preflight(by_sha[commit], record), "preflight-failed commit adopted"
            i = index[action.stage]
            if i > 0:
                before = stage_context(inp.stages[i - 1].name)
                assert record.state(commit, before) == SUCCESS, f"{action} without {before}"
            if isinstance(action, Rollback):
                assert record.state(commit, stage_context(action.stage)) == SUCCESS
            gate = inp.stages[i].gate
            if isinstance(action, AdoptCommit) and gate.approval_required:
                approved = (commit, action.stage) in inp.approvals
                done = record.state(commit, stage_context(action.stage)) == SUCCESS
                assert approved or done, f"{action} before its approval"
        if isinstance(action, SetStatus) and action.context.startswith("gitops-gpu/stage/"):
            latest = record.state(action.commit, action.context)
            if action.state == PENDING:
                assert latest not in VERDICTS, "pending over a verdict"
            mark = read_mark(action.to_status(inp.now))
            if mark is not None and mark.phase is Phase.AWAITING_ROLLOUT_APPROVAL:
                stage = inp.stages[index[action.context.rsplit("/", 1)[1]]]
                assert stage.gate.approval_required
                assert (action.commit, stage.name) not in inp.approvals
            elif action.state in (PENDING, SUCCESS):
                stage = inp.stages[index[action.context.rsplit("/", 1)[1]]]
                shown = {inp.pools[p].commit if p in inp.pools else None for p in stage.pools}
                assert shown == {action.commit}, "status for a SHA the stage does not run"


# (how the pool follows the machine, objects in sync, nodes total, degraded, progressing)
observation = st.tuples(
    st.sampled_from(["follow", "follow", "follow", "lag", "other", "none"]),
    st.booleans() | st.just(True),
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(0, 3),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_promotion_and_preflight_invariants(data: st.DataObject) -> None:
    backend = MemoryBackend()
    commits: list[Commit] = []
    desired: dict[str, str] = {}  # what the machine last told each pool to run
    shown: dict[str, str | None] = {}
    now = T0
    approvals: set[tuple[str, str]] = set()
    for n in range(data.draw(st.integers(5, 40), label="passes")):
        if not commits or data.draw(st.integers(0, 4)) == 0:
            preflight = data.draw(st.sampled_from([True, True, False, None]), label="preflight")
            commits.insert(0, Commit(sha(f"{n + 1:x}"), preflight))
        pools = {}
        for name in POOLS:
            follow, in_sync, total, unhealthy, progressing = data.draw(observation, label=name)
            if follow == "follow":
                shown[name] = desired.get(name)
            elif follow == "other":
                shown[name] = data.draw(st.sampled_from([c.sha for c in commits]))
            elif follow == "none":
                shown[name] = None
            if shown.get(name) is None:
                continue
            unhealthy = min(unhealthy, total)
            progressing = min(progressing, total - unhealthy)
            pools[name] = PoolObservation(
                name,
                shown[name],
                in_sync,
                total,
                total - unhealthy - progressing,
                unhealthy,
                progressing,
                "driver: upgrade-failed" if unhealthy else None,
            )
        if data.draw(st.integers(0, 6), label="approve") == 0:
            approvals.add((data.draw(st.sampled_from([c.sha for c in commits])), "production"))
        inp = RolloutInput(
            commits=tuple(commits),
            statuses=read_record(backend, [c.sha for c in commits]),
            pools=pools,
            stages=STAGES,
            now=now,
            approvals=frozenset(approvals),
            paused=data.draw(st.integers(0, 9), label="pause") == 0,
        )
        actions = step(inp)
        check(inp, list(actions))
        for action in actions:
            if isinstance(action, SetStatus):
                backend.set_status(action.to_status(now))
            elif isinstance(action, AdoptCommit | Rollback):
                target = action.commit if isinstance(action, AdoptCommit) else action.to_commit
                for name in next(s for s in STAGES if s.name == action.stage).pools:
                    desired[name] = target
        now += data.draw(st.sampled_from([0.0, 30.0, 60.0, 400.0, 1500.0]), label="dt")
