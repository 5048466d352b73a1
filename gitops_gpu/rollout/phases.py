"""Pending stage statuses carry their phase and its start time, readable by people and by us.

A stage's ``pending`` status says which phase it is in and since when, e.g.

    canary: rolling out since 2025-03-02T14:00:00Z; 1/2 nodes on 580.126.20
    canary: soaking 10m since 2025-03-02T14:03:22Z; 2/2 nodes on 580.126.20
    production: awaiting approval to roll out since 2025-03-02T14:20:00Z; runs 1a2b3c4
    training: waiting for window since 2025-03-02T14:20:00Z; opens Tue 02:00 Europe/Berlin (in 5h)

The timestamp is the controller's own clock (the ``now`` the pass was given), so soak and timeout
survive a restart without trusting the git server's clock, and every backend keeps it (the
description is the one free-text field all four store verbatim). It comes right after the phase
so truncation to 140 characters only ever cuts the human summary. A pending status whose
description does not parse (edited by hand) counts as "rolling out" since its ``created_at``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from gitops_gpu import timefmt
from gitops_gpu.rollout.status import PENDING, CommitStatus, fit_description

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class Phase(StrEnum):
    ROLLING_OUT = "rolling out"  # adopted, not yet converged; the stage timeout runs
    SMOKE_TESTING = "smoke testing"  # converged; gate.smokeTest pods run on the nodes
    SOAKING = "soaking"  # converged and holding; the soak timer runs
    AWAITING_APPROVAL = "awaiting approval"  # soaked; waiting for `gitops-gpu approve`
    # `approval: required`: nothing of the commit is applied to the stage until approved.
    AWAITING_ROLLOUT_APPROVAL = "awaiting approval to roll out"
    # `windows`/`freezes`: nothing of the commit is applied until the stage's window opens.
    AWAITING_WINDOW = "waiting for window"


_MARK = re.compile(
    r": (rolling out|smoke testing|soaking|awaiting approval to roll out|awaiting approval"
    r"|waiting for window)\b[^;]*?"
    r" since (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
)


@dataclass(frozen=True)
class Mark:
    phase: Phase
    since: float


def whole_seconds(now: float) -> float:
    """Phase starts are stored to the second; rounding up never shortens a soak."""
    return float(math.ceil(now))


def format_time(ts: float) -> str:
    return datetime.fromtimestamp(whole_seconds(ts), UTC).strftime(_TIME_FORMAT)


def format_duration(seconds: float) -> str:
    """``600`` -> ``10m``, ``5400`` -> ``1h30m``, ``45`` -> ``45s``."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h"] if hours else []
    if minutes:
        parts.append(f"{minutes}m")
    if secs or not parts:
        parts.append(f"{secs}s")
    return "".join(parts)


def pending_description(
    stage: str, phase: Phase, since: float, detail: str, soak_seconds: float = 0.0
) -> str:
    head = f"{stage}: {phase.value}"
    if phase is Phase.SOAKING:
        head += f" {format_duration(soak_seconds)}"
    head += f" since {format_time(since)}"
    return fit_description(f"{head}; {detail}" if detail else head)


def read_mark(status: CommitStatus) -> Mark | None:
    """The phase a pending status records; None for verdicts and errors."""
    if status.state != PENDING:
        return None
    found = _MARK.search(status.description)
    if found is None:
        return Mark(Phase.ROLLING_OUT, whole_seconds(status.created_at))
    return Mark(Phase(found.group(1)), timefmt.epoch(found.group(2)))
