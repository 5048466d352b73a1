"""Status descriptions: readable, within 140 characters, and carrying the phase start time."""

from __future__ import annotations

from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout.actions import SetStatus
from gitops_gpu.rollout.gate import observe
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.phases import (
    Mark,
    Phase,
    format_duration,
    format_time,
    pending_description,
    read_mark,
)
from gitops_gpu.rollout.status import (
    FAILURE,
    MAX_DESCRIPTION,
    PENDING,
    PREFLIGHT_CONTEXT,
    SUCCESS,
    CommitStatus,
    fit_description,
)

SHA = "ab" * 20


def test_durations_read_like_the_fleet_file() -> None:
    assert [format_duration(s) for s in (0, 45, 600, 5400, 7200, 3661)] == [
        "0s",
        "45s",
        "10m",
        "1h30m",
        "2h",
        "1h1m1s",
    ]


def test_phase_round_trips_through_a_description() -> None:
    text = pending_description("canary", Phase.SOAKING, 1_750_000_000.0, "2/2 nodes on 580", 600)
    assert text == "canary: soaking 10m since 2025-06-15T15:06:40Z; 2/2 nodes on 580"
    mark = read_mark(CommitStatus(SHA, "c", PENDING, text, created_at=5.0))
    assert mark == Mark(Phase.SOAKING, 1_750_000_000.0)


def test_phase_start_rounds_up_to_the_second() -> None:
    assert format_time(1_750_000_000.2) == "2025-06-15T15:06:41Z"


def test_unparsable_pending_counts_as_rolling_out_since_created() -> None:
    mark = read_mark(CommitStatus(SHA, "c", PENDING, "edited by hand", created_at=99.5))
    assert mark == Mark(Phase.ROLLING_OUT, 100.0)
    assert read_mark(CommitStatus(SHA, "c", SUCCESS, "canary: soaking 10m since x")) is None


def test_truncation_keeps_the_phase_and_time() -> None:
    detail = "; ".join(f"pool-{n} 3/4 on 580.126.20" for n in range(20))
    text = pending_description("canary", Phase.ROLLING_OUT, 1_750_000_000.0, detail)
    assert len(text) == MAX_DESCRIPTION and text.endswith("...")
    assert read_mark(CommitStatus(SHA, "c", PENDING, text)) == Mark(
        Phase.ROLLING_OUT, 1_750_000_000.0
    )
    assert fit_description("short") == "short"


def long_pools(n: int) -> dict[str, PoolObservation]:
    return {
        f"pool-with-a-long-name-{i}": PoolObservation(
            pool=f"pool-with-a-long-name-{i}",
            commit=SHA,
            objects_in_sync=True,
            nodes_total=4,
            nodes_healthy=3,
            nodes_unhealthy=1,
            first_failure="driver: NVML reports 570.86.10, desired 580.126.20, upgrade-failed " * 3,
            summary=f"on 580.126.{i}",
        )
        for i in range(n)
    }


def test_every_machine_description_fits() -> None:
    pools = long_pools(6)
    for gate in (GateSpec(max_unhealthy_nodes=0), GateSpec(max_unhealthy_nodes=6)):
        stage = StageSpec("production-eu-west-with-a-long-name", tuple(pools), gate, "rollback")
        statuses = [CommitStatus(SHA, PREFLIGHT_CONTEXT, SUCCESS)]
        actions = step(
            RolloutInput(
                commits=(Commit(SHA, True, "x" * 400),),
                statuses=statuses,
                pools=pools,
                stages=(stage,),
                now=1_750_000_000.0,
            )
        )
        texts = [a.description for a in actions if isinstance(a, SetStatus)]
        assert texts and all(len(t) <= MAX_DESCRIPTION for t in texts)
        states = [a.state for a in actions if isinstance(a, SetStatus)]
        assert states == ([FAILURE] if gate.max_unhealthy_nodes == 0 else [SUCCESS])


def test_summary_of_one_pool_and_of_mixed_pools() -> None:
    one = PoolObservation("canary", SHA, True, 2, 1, 0, 1, None, "on 580.126.20")
    stage = StageSpec("canary", ("canary",))
    view = observe(stage, {"canary": one}, SHA)
    assert view.summary == "1/2 nodes on 580.126.20, 1 progressing"
    assert not view.converged and view.on_commit
    two = PoolObservation("train", SHA, False, 3, 3, 0, 0, None, "on 570.86.10")
    stage = StageSpec("prod", ("canary", "train", "infer"))
    view = observe(stage, {"canary": one, "train": two}, SHA)
    assert view.summary == (
        "canary 1/2 on 580.126.20, train 3/3 on 570.86.10, 1 progressing, objects out of sync, "
        "no objects yet in infer"
    )
    assert not view.on_commit


def test_stage_failure_names_the_pool_only_when_there_are_several() -> None:
    bad = PoolObservation("a", SHA, True, 1, 0, 1, 0, "driver: upgrade-failed")
    assert (
        observe(StageSpec("s", ("a",)), {"a": bad}, SHA).first_failure == "driver: upgrade-failed"
    )
    two = StageSpec("s", ("a", "b"))
    ok = PoolObservation("b", SHA, True, 1, 1)
    assert observe(two, {"a": bad, "b": ok}, SHA).first_failure == "a: driver: upgrade-failed"


def test_status_values_are_cut_once_so_idempotence_compares_what_is_stored() -> None:
    long = CommitStatus(SHA, "c", PENDING, "x" * 300)
    assert len(long.description) == MAX_DESCRIPTION
    assert long.same_as(CommitStatus(SHA, "c", PENDING, long.description))
