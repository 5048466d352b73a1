"""A NodeGPUReport cannot declare itself fresh: an observedAt ahead of the controller's clock
(beyond the allowed skew) is untrusted, heartbeatSeconds widens the stale limit only within a
bound, and a report ages from when the controller last saw it change, whatever it claims."""

from __future__ import annotations

import math
from typing import Any

import pytest
from components_builders import NOW, healthy, pool, status_for, with_seen, with_status

from gitops_gpu.components import ladder, signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options

DEFAULT_POOL = pool()
YEAR = 365 * 24 * 3600.0


def _report_rungs(ev: NodeEvidence) -> dict[str, tuple[Health, str]]:
    """The verdicts of the rungs that read the report (driver, gpu)."""
    verdict = ladder.walk(ev, DEFAULT_POOL)
    return {
        r.component: (r.health, r.reason) for r in verdict.rungs if r.component in ("driver", "gpu")
    }


def test_a_report_dated_a_year_ahead_is_untrusted() -> None:
    ev = with_status(healthy(), status_for("gpu-1", age=-YEAR))
    assert ev.status is not None and ev.status["observedAt"] == "2027-11-29T12:00:00Z"
    why = (
        "NodeGPUReport observedAt 2027-11-29T12:00:00Z is 31536000s ahead of the controller's "
        "clock (max skew 30s): untrusted"
    )
    assert _report_rungs(ev) == {
        "driver": (Health.UNKNOWN, f"driver: {why}"),
        "gpu": (Health.UNKNOWN, f"gpu: {why}"),
    }
    assert ladder.walk(ev, DEFAULT_POOL).health is Health.UNKNOWN


def test_an_observed_at_within_the_skew_is_trusted() -> None:
    within = with_status(healthy(), status_for("gpu-1", age=-signals.MAX_CLOCK_SKEW_SECONDS))
    assert ladder.walk(within, DEFAULT_POOL).health is Health.HEALTHY
    beyond = with_status(healthy(), status_for("gpu-1", age=-signals.MAX_CLOCK_SKEW_SECONDS - 1))
    health, reason = _report_rungs(beyond)["driver"]
    assert health is Health.UNKNOWN
    assert reason.endswith("is 31s ahead of the controller's clock (max skew 30s): untrusted")


@pytest.mark.parametrize(
    ("beat", "limit"),
    [
        (300, 750.0),  # 2.5 heartbeats
        (1e9, 2.5 * signals.MAX_HEARTBEAT_SECONDS),  # clamped to the bound
        (math.inf, 1.0),
        (math.nan, 1.0),
        (-5, 1.0),
        (0, 1.0),
        (True, 1.0),  # a bool is not a number (else 2.5)
        ("x", 1.0),
        (None, 1.0),
    ],
)
def test_heartbeat_seconds_widens_the_stale_limit_only_within_a_bound(
    beat: Any, limit: float
) -> None:
    short = Options(stale_after=1.0)  # so that any widening at all shows
    assert signals.stale_limit({"heartbeatSeconds": beat}, short) == limit
    assert signals.stale_limit({"heartbeatSeconds": 60}, DEFAULT_OPTIONS) == 300.0


def test_a_huge_heartbeat_does_not_keep_an_hour_old_report_fresh() -> None:
    status = status_for("gpu-1", age=3600)
    status["heartbeatSeconds"] = 1e9
    health, reason = _report_rungs(with_status(healthy(), status))["driver"]
    assert (health, reason) == (
        Health.UNKNOWN,
        "driver: NodeGPUReport is stale: 3600s old (limit 1500s)",
    )


def test_a_report_unchanged_since_the_controller_saw_it_goes_stale() -> None:
    """observedAt says 10 s ago (or 20 s ahead, within the skew), but the controller's cache has
    seen no change for 400 s: the agent stopped, the report is stale."""
    for claimed in (10.0, -20.0):
        ev = with_seen(with_status(healthy(), status_for("gpu-1", age=claimed)), 400)
        assert ev.report_age == 400.0
        assert _report_rungs(ev)["driver"] == (
            Health.UNKNOWN,
            "driver: NodeGPUReport is stale: 400s old (limit 300s)",
        )
    seen_lately = with_seen(with_status(healthy(), status_for("gpu-1", age=-20)), 100)
    assert ladder.walk(seen_lately, DEFAULT_POOL).health is Health.HEALTHY
    # Seen lately does not make an old observedAt young: the older of the two counts.
    old = with_seen(with_status(healthy(), status_for("gpu-1", age=3600)), 5)
    assert old.report_age == 3600.0
    assert _report_rungs(old)["driver"][0] is Health.UNKNOWN


def test_the_window_the_memo_and_the_ladder_share() -> None:
    ev = with_seen(with_status(healthy(), status_for("gpu-1", age=-20)), 100)
    window = signals.report_window(ev.report, DEFAULT_OPTIONS)
    assert window is not None
    trusted_from, stale_at = window
    assert (trusted_from - NOW).total_seconds() == 20 - signals.MAX_CLOCK_SKEW_SECONDS
    assert (stale_at - NOW).total_seconds() == -100 + 300  # from the seen time, the earlier
    assert signals.report_window(None, DEFAULT_OPTIONS) is None
    assert signals.report_window({"status": {"heartbeatSeconds": 60}}, DEFAULT_OPTIONS) is None
