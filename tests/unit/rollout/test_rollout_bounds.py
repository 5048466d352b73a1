"""Gates end: a stage's timeout runs from adoption (relapses included), a stage that keeps
falling back fails by itself, and no observation sequence writes more than MAX_STATUSES per
commit and context."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollout_sim import T0, sha

from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout.actions import AdoptCommit, Rollback, SetStatus
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.machine import MAX_RELAPSES, MAX_STATUSES, step
from gitops_gpu.rollout.status import FAILURE, MemoryBackend, read_record, stage_context

CANARY = StageSpec("canary", ("c1",), GateSpec(soak_seconds=300, timeout_seconds=3600), "hold")
FLEET = StageSpec("fleet", ("f1",), GateSpec(soak_seconds=60, approval_required=True))


class Run:
    """One commit, two stages, pools that do whatever each pass says."""

    def __init__(self) -> None:
        self.backend = MemoryBackend()
        self.commit = sha(1)
        self.now = T0
        self.desired: dict[str, str] = {}

    def step(self, converged: dict[str, bool], unhealthy: int = 0) -> list[object]:
        pools = {
            name: PoolObservation(
                name,
                self.desired[name],
                True,
                4,
                4 - unhealthy if converged[name] else 2,
                unhealthy,
                0 if converged[name] else 2 - unhealthy,
                "n-3: driver: upgrade-failed"
                if unhealthy
                else ("n-3: gpu: fell off" if not converged[name] else None),
            )
            for name in ("c1", "f1")
            if name in self.desired
        }
        inp = RolloutInput(
            commits=(Commit(self.commit, True),),
            statuses=read_record(self.backend, [self.commit]),
            pools=pools,
            stages=(CANARY, FLEET),
            now=self.now,
            approvals=frozenset({(self.commit, "fleet")}),
        )
        actions = step(inp)
        for action in actions:
            if isinstance(action, SetStatus):
                self.backend.set_status(action.to_status(self.now))
            elif isinstance(action, AdoptCommit | Rollback):
                stage = CANARY if action.stage == "canary" else FLEET
                target = action.commit if isinstance(action, AdoptCommit) else action.to_commit
                for pool in stage.pools:
                    self.desired[pool] = target
        return list(actions)

    def state(self, stage: str) -> str | None:
        found = [
            s for s in self.backend.list_statuses(self.commit) if s.context == stage_context(stage)
        ]
        return found[-1].state if found else None

    def last(self, stage: str) -> str:
        found = [
            s for s in self.backend.list_statuses(self.commit) if s.context == stage_context(stage)
        ]
        return found[-1].description

    def counts(self) -> Counter[str]:
        return Counter(s.context for s in self.backend.list_statuses(self.commit))


def test_a_flapping_node_fails_the_stage_after_max_relapses() -> None:
    run = Run()
    run.step({"c1": False})  # adopt
    for _ in range(40):
        run.now += 400.0  # past the soak each time it converges
        up = run.state("canary") != "pending" or "rolling out" in run.last("canary")
        run.step({"c1": up})
        if run.state("canary") == FAILURE:
            break
    assert run.state("canary") == FAILURE
    assert f"relapsed {MAX_RELAPSES} times" in run.last("canary")
    assert "n-3" in run.last("canary")  # the node that keeps falling back is named
    assert run.counts()[stage_context("canary")] <= MAX_STATUSES


def test_timeout_counts_from_adoption_across_relapses() -> None:
    run = Run()
    run.step({"c1": False})  # adopt at T0
    run.step({"c1": False})  # the pool reports the commit: rolling out since T0
    run.now += 1000.0
    run.step({"c1": True})  # converged: soaking
    run.now += 100.0
    run.step({"c1": False})  # relapse: a fresh "rolling out" stretch starts here
    run.now += 2600.0  # 3700 s after adoption, 2600 s into the new stretch
    run.step({"c1": False})
    assert run.state("canary") == FAILURE
    assert "not converged after 1h (1 relapses)" in run.last("canary")


def test_a_slow_but_steady_stage_still_succeeds() -> None:
    run = Run()
    run.step({"c1": False})
    run.now += 3000.0
    run.step({"c1": True})
    run.now += 301.0
    run.step({"c1": True})
    assert run.state("canary") == "success"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.booleans(),  # canary pool converged
            st.booleans(),  # fleet pool converged
            st.integers(0, 2),  # unhealthy nodes
            st.sampled_from([0.0, 1.0, 30.0, 61.0, 301.0, 1800.0]),  # time to the next pass
        ),
        min_size=1,
        max_size=120,
    )
)
def test_no_sequence_writes_more_than_the_cap(
    passes: list[tuple[bool, bool, int, float]],
) -> None:
    run = Run()
    for canary, fleet, unhealthy, dt in passes:
        run.step({"c1": canary, "f1": fleet}, unhealthy)
        assert all(n <= MAX_STATUSES for n in run.counts().values()), run.counts()
        run.now += dt
