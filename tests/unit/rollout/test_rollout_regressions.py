"""Regressions other GitOps tools shipped, pinned for ours.

- argo-cd#16601: a status was written for a SHA other than the one deployed.
- gitops-promoter#1319: a commit that changed nothing for an environment was promoted while that
  environment was unhealthy.
- gitops-promoter#597: "pending" was written over a finished (success/failure) status.
- notification-controller#1009 / idempotence: the same status was written on every reconcile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rollout_sim import T0, Fleet, sha, stages

from gitops_gpu.fleet.compiled import GateSpec
from gitops_gpu.rollout.actions import AdoptCommit, SetStatus, Wait
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.phases import Phase, pending_description
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    PREFLIGHT_CONTEXT,
    SUCCESS,
    CommitStatus,
    MemoryBackend,
    read_record,
    stage_context,
)

A, B, C, D = sha(1), sha(2), sha(3), sha(4)
CANARY, PRODUCTION = stage_context("canary"), stage_context("production")


def pool(name: str, commit: str, nodes: int = 2, **health: int) -> PoolObservation:
    unhealthy = health.get("unhealthy", 0)
    progressing = health.get("progressing", 0)
    return PoolObservation(
        pool=name,
        commit=commit,
        objects_in_sync=True,
        nodes_total=nodes,
        nodes_healthy=nodes - unhealthy - progressing,
        nodes_unhealthy=unhealthy,
        nodes_progressing=progressing,
        first_failure="driver: upgrade-failed" if unhealthy else None,
        summary="on 580.126.20",
    )


def passed(*commits: str) -> list[CommitStatus]:
    return [CommitStatus(c, PREFLIGHT_CONTEXT, SUCCESS, "ok", created_at=T0) for c in commits]


def soaking_since(commit: str, context: str, since: float) -> CommitStatus:
    text = pending_description(context.rsplit("/", 1)[1], Phase.SOAKING, since, "", 600)
    return CommitStatus(commit, context, PENDING, text, created_at=since)


def make_input(
    statuses: list[CommitStatus], pools: list[PoolObservation], **kw: object
) -> RolloutInput:
    return RolloutInput(
        commits=(Commit(B), Commit(A)),
        statuses=statuses,
        pools={p.pool: p for p in pools},
        stages=stages(),
        now=T0 + 10_000,
        **kw,  # type: ignore[arg-type]
    )


def stage_statuses(actions: Sequence[object], context: str) -> list[SetStatus]:
    return [a for a in actions if isinstance(a, SetStatus) and a.context == context]


# --- argo-cd#16601: statuses only for the SHA the stage has applied -------------------------------
def test_no_status_for_a_sha_the_stage_does_not_run() -> None:
    # Canary was adopting B and had soaked long enough, but its pools still report A (the apply
    # did not land, or someone reverted it). Healthy nodes on A say nothing about B.
    record = [
        *passed(A, B),
        CommitStatus(A, CANARY, SUCCESS, created_at=T0),
        CommitStatus(A, PRODUCTION, SUCCESS, created_at=T0),
        soaking_since(B, CANARY, T0),
    ]
    pools = [pool("canary", A), pool("train", A, 3), pool("infer", A)]
    actions = step(make_input(record, pools))
    assert AdoptCommit("canary", B) in actions
    assert stage_statuses(actions, CANARY) == []
    assert stage_statuses(actions, PRODUCTION) == []


def test_no_status_while_a_stage_runs_mixed_commits() -> None:
    record = [
        *passed(A, B),
        CommitStatus(A, PRODUCTION, SUCCESS, created_at=T0),
        CommitStatus(B, CANARY, SUCCESS, created_at=T0),
    ]
    pools = [pool("canary", B), pool("train", B, 3), pool("infer", A)]
    actions = step(make_input(record, pools))
    assert AdoptCommit("production", B) in actions
    assert stage_statuses(actions, PRODUCTION) == []


def test_verdicts_name_the_commit_the_pools_report() -> None:
    record = [*passed(A, B), CommitStatus(B, CANARY, SUCCESS, created_at=T0)]
    pools = [pool("canary", B), pool("train", B, 3), pool("infer", B)]
    actions = step(make_input(record, pools))
    assert [(a.commit, a.state) for a in stage_statuses(actions, PRODUCTION)] == [(B, SUCCESS)]


# --- gitops-promoter#1319: a no-op commit still passes the health gate ----------------------------
def test_commit_that_changes_nothing_is_not_promoted_from_an_unhealthy_stage() -> None:
    fleet = Fleet(converge_passes=0)  # commits change nothing: pools converge at once
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "production") == SUCCESS)
    fleet.pools["canary"].broken_nodes = 1  # unrelated to the commit
    fleet.push(B)
    fleet.run_until(lambda: fleet.state(B, "canary") == FAILURE)
    fleet.run(20)
    assert B not in fleet.adopted("production")


def test_commit_that_changes_nothing_waits_while_nodes_progress() -> None:
    record = [*passed(A, B), CommitStatus(A, CANARY, SUCCESS, created_at=T0)]
    pools = [pool("canary", B, progressing=1), pool("train", A, 3), pool("infer", A)]
    actions = step(make_input(record, pools))
    canary = stage_statuses(actions, CANARY)
    assert [a.state for a in canary] == [PENDING]
    assert canary[0].description.startswith("canary: rolling out since")
    assert not any(isinstance(a, AdoptCommit) and a.stage == "production" for a in actions)


def test_tolerated_unhealthy_nodes_do_not_fail_but_progressing_ones_still_wait() -> None:
    specs = stages(canary=GateSpec(max_unhealthy_nodes=1))
    record = [*passed(A, B)]
    pools = [pool("canary", B, 3, unhealthy=1, progressing=1)]
    actions = step(replace(make_input(record, pools), stages=specs))
    assert [a.state for a in stage_statuses(actions, CANARY)] == [PENDING]
    pools = [pool("canary", B, 3, unhealthy=1)]
    actions = step(replace(make_input(record, pools), stages=specs))
    assert [a.state for a in stage_statuses(actions, CANARY)] == [SUCCESS]


# --- gitops-promoter#597: never pending over success/failure -------------------------------------
def test_no_pending_over_success_when_a_finished_stage_degrades() -> None:
    record = [*passed(A, B), CommitStatus(B, CANARY, SUCCESS, created_at=T0)]
    pools = [pool("canary", B, progressing=2), pool("train", A, 3), pool("infer", A)]
    actions = step(make_input(record, pools))
    assert stage_statuses(actions, CANARY) == []


def test_no_pending_over_failure_when_a_held_stage_recovers() -> None:
    record = [*passed(A, B), CommitStatus(B, CANARY, FAILURE, created_at=T0)]
    for health in ({"progressing": 2}, {}):
        actions = step(make_input(record, [pool("canary", B, **health)]))
        assert stage_statuses(actions, CANARY) == []
        assert not any(isinstance(a, AdoptCommit) for a in actions)


def test_backend_refuses_pending_over_a_verdict_but_not_over_error() -> None:
    backend = MemoryBackend()
    assert backend.set_status(CommitStatus(A, CANARY, SUCCESS, "done"))
    assert not backend.set_status(CommitStatus(A, CANARY, PENDING, "rolling out"))
    assert backend.latest(A, CANARY).state == SUCCESS  # type: ignore[union-attr]
    assert backend.set_status(CommitStatus(B, CANARY, ERROR, "superseded"))
    assert backend.set_status(CommitStatus(B, CANARY, PENDING, "rolling out again"))
    assert backend.set_status(
        CommitStatus(A, CANARY, FAILURE, "re-verified")
    )  # verdict over verdict


def test_superseded_commit_can_be_adopted_again() -> None:
    # C superseded B at canary, then C's preflight re-check failed: B is the target again, and
    # pending may go over "error" (it was no verdict).
    fleet = Fleet()
    fleet.push(B)
    fleet.run(2)
    fleet.push(C)
    fleet.run(1)
    assert fleet.state(B, "canary") == ERROR
    fleet.commits[0] = Commit(C, False)
    fleet.run_until(lambda: fleet.state(B, "production") == SUCCESS)
    assert C not in fleet.adopted("production")


# --- idempotence: at most a handful of statuses per commit and context ----------------------------
def test_same_pass_twice_writes_nothing_new() -> None:
    fleet = Fleet()
    fleet.push(A)
    for _ in range(40):
        inp = fleet.input()
        fleet.run_pass()
        again = replace(inp, statuses=read_record(fleet.backend, [c.sha for c in fleet.commits]))
        assert [a for a in step(again) if isinstance(a, SetStatus)] == []
    assert fleet.state(A, "production") == SUCCESS


def test_identical_status_write_is_a_no_op() -> None:
    backend = MemoryBackend()
    status = CommitStatus(A, CANARY, PENDING, "canary: rolling out", created_at=1.0)
    assert backend.set_status(status)
    assert not backend.set_status(replace(status, created_at=2.0))
    assert backend.writes == 1


def test_full_rollout_writes_at_most_five_statuses_per_commit_and_context() -> None:
    fleet = Fleet(stage_specs=stages(production=GateSpec(soak_seconds=300, approval_required=True)))
    fleet.push(A)
    fleet.run(6)
    fleet.pools["canary"].passes_since_apply = 0  # soak interrupted once
    fleet.run(5)
    fleet.push(B)  # supersedes A where A has not passed yet
    fleet.run(3)
    fleet.push(C, bad=True)
    fleet.run(30)
    fleet.push(D)
    fleet.run(20)
    fleet.approvals.update({(B, "production"), (D, "production")})
    fleet.run(200)
    assert fleet.state(D, "production") == SUCCESS
    counts = fleet.writes_per_context()
    assert max(counts.values()) <= 5, counts
    assert len(fleet.written) == len(fleet.backend.all_statuses())
    assert not any(isinstance(a, Wait) and "paused" in a.reason for _, a in fleet.actions)
