"""The rollout state machine over simulated passes: promotion, failure, supersession, gates."""

from __future__ import annotations

from datetime import UTC, datetime

from rollout_sim import PASS, T0, Fleet, sha, stages

from gitops_gpu.fleet.compiled import GateSpec
from gitops_gpu.rollout.actions import AdoptCommit, HoldUpgrades, Rollback, SetStatus, Wait
from gitops_gpu.rollout.inputs import Commit
from gitops_gpu.rollout.line import LINE_CONTEXT, LineStop
from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.record import approvals_from_record
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    PREFLIGHT_CONTEXT,
    SUCCESS,
    CommitStatus,
    MemoryBackend,
    approval_context,
    stage_context,
)

A, B, C = sha(1), sha(2), sha(3)


def rolled_out(fleet: Fleet, commit: str) -> Fleet:
    fleet.push(commit)
    fleet.run_until(lambda: fleet.state(commit, "production") == SUCCESS)
    return fleet


def test_happy_path_canary_then_production() -> None:
    fleet = Fleet()
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "production") == SUCCESS)

    canary = [(s.state, s.description) for s in fleet.history(A, "canary")]
    assert [state for state, _ in canary] == [PENDING, PENDING, SUCCESS]
    assert canary[0][1].startswith("canary: rolling out since ")
    assert canary[1][1].startswith("canary: soaking 10m since ")
    assert canary[2][1] == "canary: 2/2 nodes on 1111, soaked 10m"
    assert fleet.latest(A, "production").description == "production: 5/5 nodes on 1111"  # type: ignore[union-attr]
    # production adopted only after canary's success was in the record
    canary_success = next(s.created_at for s in fleet.written if s.state == SUCCESS)
    first_prod = next(
        t for t, a in fleet.actions if isinstance(a, AdoptCommit) and a.stage == "production"
    )
    assert first_prod > canary_success
    assert fleet.backend.latest(A, PREFLIGHT_CONTEXT).state == SUCCESS  # type: ignore[union-attr]
    # steady state: nothing more to do or write
    before = len(fleet.written)
    assert [a for a in fleet.run_pass() if not isinstance(a, Wait)] == []
    assert len(fleet.written) == before


def test_canary_failure_holds_and_production_never_adopts() -> None:
    fleet = rolled_out(Fleet(), A)
    fleet.push(B, bad=True)
    fleet.run_until(lambda: fleet.state(B, "canary") == FAILURE)
    failed = fleet.latest(B, "canary")
    assert failed is not None
    assert "2 nodes unhealthy (max 0): driver: upgrade-failed" in failed.description
    fleet.run(30)
    assert B not in fleet.adopted("production")
    assert fleet.pools["train"].commit == A and fleet.pools["canary"].commit == B
    assert fleet.state(B, "production") is None
    last = fleet.run_pass()
    assert last == [Wait(f"canary: holding, {B[:7]} failed; push a fix")]


def test_rollback_on_failure_reapplies_last_good_commit() -> None:
    fleet = rolled_out(Fleet(stage_specs=stages(canary_on_failure="rollback")), A)
    writes_on_a = len([s for s in fleet.written if s.sha == A])
    fleet.push(B, bad=True)
    fleet.run_until(lambda: fleet.state(B, "canary") == FAILURE)
    assert fleet.latest(B, "canary").description.endswith(f"; rolling back to {A[:7]}")  # type: ignore[union-attr]
    assert any(isinstance(a, Rollback) and a.to_commit == A for _, a in fleet.actions)
    fleet.run(5)
    assert fleet.pools["canary"].commit == A
    assert len([s for s in fleet.written if s.sha == A]) == writes_on_a  # no statuses rewritten
    assert fleet.run_pass() == [Wait(f"canary: rolled back to {A[:7]} after {B[:7]} failed")]
    # a fix moves forward again
    fleet.push(C)
    fleet.run_until(lambda: fleet.state(C, "production") == SUCCESS)
    assert B not in fleet.adopted("production")


def test_rollback_without_a_good_commit_holds() -> None:
    fleet = Fleet(stage_specs=stages(canary_on_failure="rollback"))
    fleet.push(B, bad=True)
    fleet.run_until(lambda: fleet.state(B, "canary") == FAILURE)
    assert not any(isinstance(a, Rollback) for _, a in fleet.actions)
    assert "no earlier commit passed" in fleet.run_pass()[0].reason  # type: ignore[union-attr]


def test_two_quick_commits_first_is_superseded() -> None:
    fleet = rolled_out(Fleet(), A)
    fleet.push(B)
    fleet.run(3)  # B adopted by canary and soaking
    assert fleet.state(B, "canary") == PENDING
    fleet.push(C)
    fleet.run_until(lambda: fleet.state(C, "production") == SUCCESS)
    latest_b = fleet.latest(B, "canary")
    assert latest_b is not None
    assert (latest_b.state, latest_b.description) == (ERROR, f"canary: superseded by {C[:7]}")
    assert B not in fleet.adopted("production")
    assert fleet.state(B, "production") is None
    fleet.run(10)
    assert fleet.latest(B, "canary") == latest_b  # no further statuses


def test_superseded_while_awaiting_approval_downstream() -> None:
    fleet = Fleet(stage_specs=stages(production=GateSpec(approval_required=True)))
    fleet.push(A)
    fleet.run_until(lambda: _phase(fleet, A, "production") is Phase.AWAITING_ROLLOUT_APPROVAL)
    fleet.push(B)
    fleet.run_until(lambda: fleet.state(B, "canary") == SUCCESS)
    fleet.run_until(lambda: _phase(fleet, B, "production") is Phase.AWAITING_ROLLOUT_APPROVAL)
    assert fleet.latest(A, "production").description == f"production: superseded by {B[:7]}"  # type: ignore[union-attr]
    assert fleet.state(A, "production") == ERROR
    assert fleet.adopted("production") == []  # neither was approved: nothing applied


def _phase(fleet: Fleet, commit: str, stage: str) -> Phase | None:
    latest = fleet.latest(commit, stage)
    mark = read_mark(latest) if latest else None
    return mark.phase if mark else None


def test_approval_comes_before_anything_is_applied() -> None:
    fleet = Fleet(stage_specs=stages(production=GateSpec(soak_seconds=300, approval_required=True)))
    fleet.push(A)
    fleet.run_until(lambda: _phase(fleet, A, "production") is Phase.AWAITING_ROLLOUT_APPROVAL)
    waiting = fleet.latest(A, "production")
    assert waiting is not None
    assert waiting.description.startswith("production: awaiting approval to roll out since ")
    assert waiting.description.endswith("; nothing applied yet")
    fleet.run(20)
    assert fleet.latest(A, "production") == waiting  # written once, not every pass
    assert fleet.adopted("production") == [] and fleet.pools["train"].commit is None
    fleet.approvals.add((A, "production"))
    approved_at = fleet.now
    fleet.run_until(lambda: fleet.state(A, "production") == SUCCESS)
    # then it rolls out, converges and soaks, like any stage
    marks = [read_mark(s) for s in fleet.history(A, "production")]
    seen = [m.phase for m in marks if m is not None]
    assert seen == [Phase.AWAITING_ROLLOUT_APPROVAL, Phase.ROLLING_OUT, Phase.SOAKING]
    first = next(
        t for t, a in fleet.actions if isinstance(a, AdoptCommit) and a.stage == "production"
    )
    assert first >= approved_at
    assert fleet.latest(A, "production").description == (  # type: ignore[union-attr]
        "production: 5/5 nodes on 1111, soaked 5m, approved"
    )


def test_an_approval_is_for_one_commit() -> None:
    fleet = Fleet(stage_specs=stages(production=GateSpec(approval_required=True)))
    fleet.approvals.add((A, "production"))
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "production") == SUCCESS)
    fleet.push(B)
    fleet.run_until(lambda: _phase(fleet, B, "production") is Phase.AWAITING_ROLLOUT_APPROVAL)
    fleet.run(10)
    assert fleet.pools["train"].commit == A  # B waits for its own approval
    assert fleet.latest(B, "production").description.endswith(f"; runs {A[:7]}")  # type: ignore[union-attr]
    fleet.approvals.add((B, "production"))
    fleet.run_until(lambda: fleet.state(B, "production") == SUCCESS)
    assert fleet.pools["train"].commit == B


def test_revoked_approval_stops_further_applies() -> None:
    fleet = Fleet(stage_specs=stages(production=GateSpec(soak_seconds=300, approval_required=True)))
    fleet.approvals.add((A, "production"))
    fleet.push(A)
    fleet.run_until(lambda: fleet.pools["train"].commit == A)
    fleet.approvals.clear()
    fleet.pools["train"].in_sync = False  # e.g. label batches still to go
    before = len(fleet.adopted("production"))
    fleet.run(40)
    assert len(fleet.adopted("production")) == before
    assert fleet.state(A, "production") == PENDING


def test_approvals_are_read_from_the_record() -> None:
    statuses = [
        CommitStatus(A, approval_context("production"), SUCCESS, "approved by ana"),
        CommitStatus(B, approval_context("production"), SUCCESS, "approved by ana"),
        CommitStatus(B, approval_context("production"), FAILURE, "revoked by bo"),
        CommitStatus(C, stage_context("production"), SUCCESS),
    ]
    assert approvals_from_record(statuses) == {(A, "production")}


def test_timeout_fails_a_stage_that_never_converges() -> None:
    fleet = Fleet(stage_specs=stages(canary=GateSpec(soak_seconds=600, timeout_seconds=1800)))
    fleet.pools["canary"].stuck = True
    fleet.push(A)
    passes = fleet.run_until(lambda: fleet.state(A, "canary") == FAILURE)
    failed = fleet.latest(A, "canary")
    assert failed is not None
    assert failed.description == "canary: not converged after 30m: 0/2 nodes on 1111, 2 progressing"
    started = fleet.history(A, "canary")[0].created_at
    assert failed.created_at - started == 1800
    assert passes == 1800 / PASS + 2  # adopt pass, first pending pass, then 30 minutes
    assert A not in fleet.adopted("production")


def test_soak_must_elapse_before_success() -> None:
    fleet = Fleet()
    fleet.push(A)
    fleet.run_until(lambda: _phase(fleet, A, "canary") is Phase.SOAKING)
    soaking = fleet.latest(A, "canary")
    assert soaking is not None
    fleet.run_until(lambda: fleet.state(A, "canary") == SUCCESS)
    success = fleet.latest(A, "canary")
    assert success is not None and success.created_at - soaking.created_at == 600
    assert all(a.stage == "canary" for _, a in fleet.actions if isinstance(a, AdoptCommit))


def test_soak_restarts_when_convergence_is_lost() -> None:
    fleet = Fleet()
    fleet.push(A)
    fleet.run_until(lambda: _phase(fleet, A, "canary") is Phase.SOAKING)
    fleet.run(5)
    fleet.pools["canary"].passes_since_apply = 0  # a node reboots: progressing again
    fleet.run_pass()
    interrupted = fleet.latest(A, "canary")
    assert interrupted is not None and "soak interrupted" in interrupted.description
    fleet.run_until(lambda: fleet.state(A, "canary") == SUCCESS)
    soaks = [s for s in fleet.history(A, "canary") if "soaking" in s.description]
    assert len(soaks) == 2
    assert fleet.latest(A, "canary").created_at - soaks[1].created_at == 600  # type: ignore[union-attr]


def test_restart_resumes_from_the_record_only() -> None:
    fleet = rolled_out(Fleet(), A)
    fleet.push(B)
    fleet.run_until(lambda: _phase(fleet, B, "canary") is Phase.SOAKING)
    fleet.run(4)
    soak_started = fleet.latest(B, "canary").created_at  # type: ignore[union-attr]
    # A new process: a fresh backend holding only what was recorded; the cluster is unchanged.
    fleet.backend = MemoryBackend(fleet.backend.all_statuses())
    fleet.actions.clear()
    fleet.run_until(lambda: fleet.state(B, "production") == SUCCESS)
    assert fleet.latest(B, "canary").created_at - soak_started == 600  # type: ignore[union-attr]
    assert fleet.adopted("canary") == []  # canary was not re-adopted
    assert [s.state for s in fleet.history(B, "canary")] == [PENDING, PENDING, SUCCESS]
    assert [s.state for s in fleet.history(A, "canary")] == [PENDING, PENDING, SUCCESS]


def test_a_stopped_line_moves_nothing_and_says_so_on_the_newest_commit() -> None:
    fleet = Fleet()
    fleet.push(A)
    fleet.run(2)
    fleet.paused = True
    fleet.stop = LineStop("alice", T0, "incident 42")
    fleet.push(B)
    for _ in range(5):
        actions = fleet.run_pass()
        moves = [a for a in actions if not isinstance(a, Wait | HoldUpgrades)]
        assert all(isinstance(a, SetStatus) and a.context == LINE_CONTEXT for a in moves)
        holds = [a for a in actions if isinstance(a, HoldUpgrades)]
        assert {a.stage for a in holds} == {"canary", "production"}
        assert all(a.reason.endswith(": incident 42") for a in holds)
    line_says = [(s.state, s.description) for s in fleet.line(B)]
    stopped = f"line stopped by alice at {datetime.fromtimestamp(T0, UTC):%Y-%m-%d %H:%MZ}"
    assert line_says == [(ERROR, f"{stopped}: incident 42")]  # written once
    assert fleet.line(A) == []  # the newest commit only
    assert fleet.state(B, "canary") is None
    fleet.paused, fleet.stop = False, None
    fleet.run_until(lambda: fleet.state(B, "production") == SUCCESS)
    assert [s.state for s in fleet.line(B)] == [ERROR, SUCCESS]
    # Stopped again on the same commit: error goes over the resume's success.
    fleet.paused, fleet.stop = True, LineStop(reason="again")
    fleet.run(2)
    assert [s.description for s in fleet.line(B)][-1] == ("line stopped: again")


def test_preflight_failed_commit_is_never_adopted() -> None:
    fleet = rolled_out(Fleet(), A)
    fleet.push(B, preflight=False)
    fleet.run(20)
    assert B not in fleet.adopted("canary") + fleet.adopted("production")
    assert fleet.backend.latest(B, PREFLIGHT_CONTEXT).state == FAILURE  # type: ignore[union-attr]
    assert fleet.state(B, "canary") is None


def test_preflight_verdict_comes_from_the_record_when_not_checked() -> None:
    record = [
        CommitStatus(B, PREFLIGHT_CONTEXT, SUCCESS),
        CommitStatus(C, PREFLIGHT_CONTEXT, FAILURE),
    ]
    fleet = Fleet(backend=MemoryBackend(record))
    fleet.commits = [Commit(C), Commit(B), Commit(A)]  # A never checked
    actions = fleet.run_pass()
    assert AdoptCommit("canary", B) in actions
    assert not any(isinstance(a, SetStatus) and a.context == PREFLIGHT_CONTEXT for a in actions)


def test_preflight_status_written_once() -> None:
    fleet = Fleet()
    fleet.commits = [Commit(A, True, "fleet compiles, 0 findings")]
    fleet.run(5)
    pre = [s for s in fleet.written if s.context == PREFLIGHT_CONTEXT]
    assert [(s.state, s.description) for s in pre] == [(SUCCESS, "fleet compiles, 0 findings")]


def test_the_rolling_out_status_names_who_holds_a_node_once_per_holder() -> None:
    fleet = Fleet(converge_passes=12)
    held = "canary-1 waits on pod research/train-7 (Job, PDB train-pdb allows 0)"
    fleet.push(A)
    fleet.run(2)
    fleet.waiting_on["canary"] = held
    fleet.run(4)
    texts = [s.description for s in fleet.history(A, "canary")]
    assert len(texts) == 2, texts  # rolling out, then once more with the holder
    assert texts[1].startswith(texts[0].split(";")[0] + "; " + held), texts
    assert (
        read_mark(fleet.history(A, "canary")[1]).since
        == read_mark(fleet.history(A, "canary")[0]).since
    )
    fleet.waiting_on["canary"] = "canary-1 waits on pod research/eval-2 (Job)"
    fleet.run(2)
    assert "research/eval-2" in fleet.history(A, "canary")[-1].description
    assert len(fleet.history(A, "canary")) == 3
    fleet.run_until(lambda: fleet.state(A, "canary") == SUCCESS)
