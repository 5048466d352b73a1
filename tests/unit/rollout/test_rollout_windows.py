"""Stage windows and fleet freezes in the rollout machine, driven pass by pass (rollout_sim).

T0 is Sunday 2025-06-15 15:06:40 UTC; a pass is a minute.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from rollout_sim import PASS, T0, Fleet, sha, stages

from gitops_gpu.fleet.compiled import GateSpec
from gitops_gpu.fleet.windows import Freeze, Recurrence, Windows
from gitops_gpu.rollout.actions import AdoptCommit, HoldUpgrades, Rollback, Wait
from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.status import FAILURE, PENDING, SUCCESS

A, B = sha(1), sha(2)


def at(hour: int, minute: int = 0, day: int = 15) -> float:
    return datetime(2025, 6, day, hour, minute, tzinfo=UTC).timestamp()


def windowed(canary: Windows, gate: GateSpec | None = None, **kw: str) -> Fleet:
    specs = stages(canary=gate, **kw)
    return Fleet(stage_specs=(replace(specs[0], windows=canary), *specs[1:]))


def daily(hour: int, minute: int, seconds: float) -> Windows:
    return Windows(allow=(Recurrence(f"{minute} {hour} * * *", seconds),))


def adopt_times(fleet: Fleet, stage: str = "canary") -> list[float]:
    return [t for t, a in fleet.actions if isinstance(a, AdoptCommit) and a.stage == stage]


def test_a_stage_adopts_only_inside_its_window() -> None:
    fleet = windowed(daily(16, 0, 3600))
    assert at(15) < T0 < at(16)
    fleet.push(A)
    fleet.run(3)
    assert adopt_times(fleet) == []
    waiting = fleet.latest(A, "canary")
    assert waiting is not None and waiting.state == PENDING
    mark = read_mark(waiting)
    assert mark is not None and mark.phase is Phase.AWAITING_WINDOW
    assert waiting.description.endswith("; opens Sun 16:00 UTC (in 53m)")
    # Written once, though every pass says it.
    assert len(fleet.history(A, "canary")) == 1
    said = [a.reason for _, a in fleet.actions if isinstance(a, Wait)]
    assert f"canary: {A[:7]} waiting for window: opens Sun 16:00 UTC (in 51m)" in said
    fleet.run_until(lambda: bool(adopt_times(fleet)), max_passes=120)
    first = adopt_times(fleet)[0]
    assert at(16) <= first < at(16) + PASS  # within one pass of the opening
    fleet.run_until(lambda: fleet.state(A, "production") == SUCCESS, max_passes=120)
    # The gate started afresh at adoption: rolling out, then soaking 10m, then success.
    phases = [read_mark(s) for s in fleet.history(A, "canary")]
    assert [p.phase for p in phases if p] == [
        Phase.AWAITING_WINDOW,
        Phase.ROLLING_OUT,
        Phase.SOAKING,
    ]


def test_a_window_closing_mid_rollout_starts_no_new_batch() -> None:
    fleet = windowed(daily(15, 0, 10 * 60))  # open 15:00-15:10, T0 is 15:06:40
    fleet.push(A)
    adopting: list[float] = []
    for _ in range(10):
        actions = fleet.run_pass()
        fleet.pools["canary"].in_sync = False  # label batches still to go
        adopting += [fleet.now - PASS for a in actions if isinstance(a, AdoptCommit)]
    assert adopting and all(t < at(15, 10) for t in adopting)
    assert adopting[-1] >= at(15, 9)  # batches went on while open
    said = [a.reason for t, a in fleet.actions if isinstance(a, Wait) and t >= at(15, 10)]
    assert "canary: no new node batch, waiting for window: opens Mon 15:00 UTC (in 23h49m)" in said
    # ... and the operator starts no node of the canary either, while closed only.
    held = [(t, a) for t, a in fleet.actions if isinstance(a, HoldUpgrades)]
    assert held and all(t >= at(15, 10) and a.stage == "canary" for t, a in held), held
    assert held[-1][1].reason.startswith("waiting for window: opens Mon 15:00 UTC")
    fleet.now = at(15, 0, day=16)
    opened = fleet.run_pass()
    assert any(isinstance(a, AdoptCommit) for a in opened)  # open again: next batch
    assert not any(isinstance(a, HoldUpgrades) for a in opened)  # and the hold lifts


def test_a_gate_timeout_counts_only_open_time() -> None:
    gate = GateSpec(soak_seconds=600, timeout_seconds=30 * 60)
    fleet = windowed(daily(15, 0, 20 * 60), gate)  # open 15:00-15:20 daily
    fleet.pools["canary"].stuck = True
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "canary") == FAILURE, max_passes=2000)
    failed = fleet.latest(A, "canary")
    assert failed is not None and failed.description.startswith("canary: not converged after 30m")
    started = next(
        m.since
        for m in map(read_mark, fleet.history(A, "canary"))
        if m is not None and m.phase is Phase.ROLLING_OUT
    )
    open_today = at(15, 20) - started
    # Failed the next day, once 30 open minutes had passed; not after 30 wall-clock minutes.
    expected = at(15, 0, day=16) + (30 * 60 - open_today)
    assert expected <= failed.created_at < expected + PASS


def test_a_freeze_holds_every_stage_and_says_why() -> None:
    freeze = Freeze(T0 - 3600, at(18), "launch freeze")
    fleet = windowed(Windows(freezes=(freeze,)))
    fleet.push(A)
    fleet.run(5)
    assert adopt_times(fleet) == []
    waiting = fleet.latest(A, "canary")
    assert waiting is not None
    assert waiting.description.endswith("; frozen until Sun 18:00 UTC: launch freeze")
    fleet.run_until(lambda: bool(adopt_times(fleet)), max_passes=400)
    assert at(18) <= adopt_times(fleet)[0] < at(18) + PASS


def test_a_rollback_is_not_held_by_a_closed_window() -> None:
    fleet = windowed(daily(15, 0, 30 * 60), canary_on_failure="rollback")
    fleet.now = at(15, 0)
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "canary") == SUCCESS, max_passes=60)
    fleet.now = at(15, 29)
    fleet.push(B, bad=True)
    fleet.run_until(lambda: fleet.state(B, "canary") == FAILURE, max_passes=10)
    rollbacks = [t for t, a in fleet.actions if isinstance(a, Rollback)]
    assert rollbacks and rollbacks[0] >= at(15, 30)  # the window had closed
    assert fleet.pools["canary"].commit == A
    # Once failed, the canary's nodes are not held: the operator takes them back to A.
    failed_at = fleet.latest(B, "canary").created_at  # type: ignore[union-attr]
    assert not [a for t, a in fleet.actions if t > failed_at and isinstance(a, HoldUpgrades)]


def test_an_always_open_stage_behaves_as_before() -> None:
    plain, open_ = Fleet(), windowed(Windows())
    for fleet in (plain, open_):
        fleet.push(A)
        fleet.run_until(lambda f=fleet: f.state(A, "production") == SUCCESS)  # type: ignore[misc]
    assert [s.description for s in plain.written] == [s.description for s in open_.written]


def test_a_stopped_line_holds_every_stages_node_upgrades() -> None:
    fleet = Fleet()
    fleet.push(A)
    fleet.run(2)
    fleet.paused = True
    actions = fleet.run_pass()
    held = {a.stage: a.reason for a in actions if isinstance(a, HoldUpgrades)}
    assert sorted(held) == sorted(s.name for s in fleet.stage_specs)
    assert set(held.values()) == {"line stopped"}
    fleet.paused = False
    assert not any(isinstance(a, HoldUpgrades) for a in fleet.run_pass())


def test_an_open_window_never_holds_node_upgrades() -> None:
    fleet = windowed(daily(15, 0, 3 * 3600))  # open through T0 and beyond
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "production") == SUCCESS, max_passes=120)
    assert not any(isinstance(a, HoldUpgrades) for _, a in fleet.actions)
