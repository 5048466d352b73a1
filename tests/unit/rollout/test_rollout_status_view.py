"""What `status` adds to a stage's verdict: the soak's time left and the stage's last failure
(a rollback said as one, with the commit it left and why)."""

from __future__ import annotations

from gitops_gpu import stage_view
from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout.phases import Phase, format_time, pending_description
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import FAILURE, PENDING, SUCCESS, CommitStatus, stage_context

GOOD, BAD, OTHER = "a" * 40, "b" * 40, "c" * 40
CANARY = stage_context("canary")
T0 = 1_800_000_000.0


def _stage(on_failure: str = "rollback") -> StageSpec:
    return StageSpec("canary", ("canary",), GateSpec(soak_seconds=1800), on_failure=on_failure)


def test_a_soaking_stage_says_how_long_is_left() -> None:
    text = pending_description("canary", Phase.SOAKING, T0, "1/1 nodes", soak_seconds=1800)
    soaking = CommitStatus(GOOD, CANARY, PENDING, text, created_at=T0)
    assert stage_view.soak_left(_stage(), soaking, T0 + 600) == 1200
    assert stage_view.soak_left(_stage(), soaking, T0 + 4000) == 0
    done = CommitStatus(GOOD, CANARY, SUCCESS, "canary: ok", created_at=T0)
    assert stage_view.soak_left(_stage(), done, T0) is None


def test_after_a_rollback_the_stage_says_from_which_commit_and_why() -> None:
    why = "canary: 1 node unhealthy (max 0): l40s-infer-001 gpu: Xid 79 on GPU 0"
    record = Record(
        [
            CommitStatus(GOOD, CANARY, SUCCESS, "canary: ok", created_at=T0),
            CommitStatus(OTHER, CANARY, FAILURE, "canary: older failure", created_at=T0 + 10),
            CommitStatus(BAD, CANARY, FAILURE, why, created_at=T0 + 60),
            CommitStatus(BAD, stage_context("training"), FAILURE, "elsewhere", created_at=T0 + 90),
        ]
    )
    said = stage_view.last_event(record, _stage(), GOOD)
    assert said == f"rolled back from {BAD[:7]} at {format_time(T0 + 60)}: {why}"
    assert stage_view.last_event(record, _stage("hold"), BAD).startswith(f"failed {OTHER[:7]}")
    assert stage_view.last_event(Record([]), _stage(), GOOD) == ""
