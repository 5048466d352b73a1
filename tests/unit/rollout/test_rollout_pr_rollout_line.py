"""How far a merged pull request's commit has come, as its comment says it."""

from __future__ import annotations

from gitops_gpu.pull_requests import finished, rollout_line
from gitops_gpu.rollout.phases import format_time
from gitops_gpu.rollout.status import FAILURE, PENDING, SUCCESS, CommitStatus, stage_context

MERGED, OTHER = "a" * 40, "b" * 40
T = 1_800_000_000.0
STAGES = ["canary", "inference", "training"]


def _s(sha: str, stage: str, state: str, text: str = "", at: float = T) -> CommitStatus:
    return CommitStatus(sha, stage_context(stage), state, text, created_at=at)


def test_each_stage_says_its_state_and_when() -> None:
    statuses = [
        _s(MERGED, "canary", PENDING, "canary: rolling out since X"),
        _s(MERGED, "canary", SUCCESS, "canary: ok", T + 60),
        _s(MERGED, "inference", PENDING, "inference: soaking 30m since X; 2/2 nodes"),
        _s(OTHER, "training", FAILURE, "not this commit"),
    ]
    hhmm = format_time(T + 60)[11:16]
    assert rollout_line(MERGED, STAGES, statuses) == (
        f"merged as `{MERGED[:12]}`: canary success {hhmm}, "
        "inference pending (soaking 30m since X), training -"
    )
    assert not finished(MERGED, STAGES, statuses)
    done = [*statuses, _s(MERGED, "inference", SUCCESS), _s(MERGED, "training", FAILURE)]
    assert finished(MERGED, STAGES, done)
