"""Stage windows on the testbed (issue 27): a commit that lands while the canary's window is
closed waits, visibly, with nothing applied; it is adopted within a pass of the opening, never
before. Real kube-apiserver, the GPU Operator, simulated hosts, a real fleet repo."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e_harness import Env, fast_gates, set_driver
from ruamel.yaml import YAML

from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.status import stage_context

pytestmark = pytest.mark.e2e


def _phase(env: Env, sha: str, stage: str) -> Phase | None:
    latest = env.record.latest(sha, stage_context(stage))
    mark = read_mark(latest) if latest else None
    return mark.phase if mark else None


def _canary_window(opens: datetime, minutes: int) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        yaml = YAML()
        doc = yaml.load((work / "fleet.yaml").read_text())
        canary = next(s for s in doc["spec"]["stages"] if s["name"] == "canary")
        schedule = f"{opens.minute} {opens.hour} * * *"
        canary["windows"] = {"allow": [{"schedule": schedule, "duration": f"{minutes}m"}]}
        with (work / "fleet.yaml").open("w") as fh:
            yaml.dump(doc, fh)

    return edit


def test_a_commit_waits_for_the_canary_window_and_is_adopted_as_it_opens(env: Env) -> None:
    first = env.remote.commit("fast gates", fast_gates())
    env.start_nodes(1)
    env.controller()
    env.wait("first rollout", lambda: env.state(first, "canary") == "success", 150)
    # The next whole minute at least 40 s away: the commit lands well before it opens.
    opens_at = math.ceil((time.time() + 40) / 60) * 60
    opens = datetime.fromtimestamp(opens_at, UTC)
    window = _canary_window(opens, 10)

    def change(work: Path) -> None:
        window(work)
        set_driver("580.142.01")(work)

    bump = env.remote.commit("driver bump, canary windowed", change)
    env.wait(
        "the canary waits for its window",
        lambda: _phase(env, bump, "canary") is Phase.AWAITING_WINDOW,
        60,
    )
    waiting = env.description(bump, "canary")
    assert f"opens {opens:%a %H:%M} UTC" in waiting, waiting
    while time.time() < opens_at - 1:  # up to the opening, nothing of the bump is applied
        assert env.pool_commit("canary") == first
        time.sleep(0.5)
    env.wait("adopted once open", lambda: env.pool_commit("canary") == bump, 60)
    adopted_at = time.time()
    assert opens_at <= adopted_at < opens_at + 10, adopted_at - opens_at
    env.wait("the canary passes", lambda: env.state(bump, "canary") == "success", 300)
    phases = [read_mark(s) for s in env.statuses(bump) if s.context == stage_context("canary")]
    assert [p.phase for p in phases if p][:2] == [Phase.AWAITING_WINDOW, Phase.ROLLING_OUT]
