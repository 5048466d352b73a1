"""The stop-the-line switch as the ConfigMap holds it (rollout/line.py)."""

from __future__ import annotations

from gitops_gpu.rollout import line
from gitops_gpu.rollout.actions import SetStatus
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import ERROR, SUCCESS, CommitStatus

AT = 1_764_737_400.0  # 2025-12-03 04:50:00Z


def test_the_configmap_round_trips_who_when_and_why() -> None:
    stop = line.LineStop("alice", AT, "incident 42")
    data = line.to_data(stop)
    assert data == {
        "paused": "true",
        "pausedBy": "alice",
        "pausedAt": "2025-12-03T04:50:00Z",
        "reason": "incident 42",
    }
    assert line.from_data(data) == stop
    assert stop.describe() == "line stopped by alice at 2025-12-03 04:50Z: incident 42"


def test_resume_clears_the_stop_and_an_old_flag_still_stops() -> None:
    assert line.from_data(line.to_data(None)) is None
    assert line.from_data(None) is None
    # A ConfigMap written before who/when/why existed: stopped, said plainly.
    old = line.from_data({"paused": "true"})
    assert old == line.LineStop() and old.describe() == "line stopped"
    # A garbled time is left out rather than guessed.
    assert line.from_data({"paused": "true", "pausedAt": "yesterday"}) == line.LineStop()


def test_a_resume_closes_every_stop_left_in_view() -> None:
    a, b = "a" * 40, "b" * 40
    record = Record(
        [
            CommitStatus(a, line.LINE_CONTEXT, ERROR, "line stopped", created_at=1),
            CommitStatus(b, line.LINE_CONTEXT, ERROR, "line stopped", created_at=2),
            CommitStatus(b, line.LINE_CONTEXT, SUCCESS, line.RESUMED, created_at=3),
        ]
    )
    assert line.statuses(None, [b, a], record) == [
        SetStatus(a, line.LINE_CONTEXT, SUCCESS, line.RESUMED)
    ]
    # Stopped with a new reason: the newest commit says the new one.
    stop = line.LineStop(reason="again")
    assert line.statuses(stop, [b, a], record) == [
        SetStatus(b, line.LINE_CONTEXT, ERROR, "line stopped: again")
    ]
    assert line.statuses(stop, [], record) == []
