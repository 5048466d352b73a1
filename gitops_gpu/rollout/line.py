"""Stop the line: one switch that holds every stage now, and says so wherever a stage's hold
shows (a closed window, a freeze).

The switch is ConfigMap ``gitops-gpu-control`` in the controller's namespace: ``data.paused``
(``"true"``: stopped) with who stopped it, when and why (``pausedBy``, ``pausedAt``,
``reason``), set by ``gitops-gpu pause --reason ...`` and cleared by ``gitops-gpu resume``.
While it is on, passes adopt, promote, roll back and record nothing; what the operator already
started on nodes finishes. It shows in ``gitops-gpu status`` (a STOPPED line and each stage's
``hold``), in the metric ``gitops_gpu_line_stopped``, and as commit status ``gitops-gpu/line``
on the newest commit: ``error`` while stopped (red where people look, and never a verdict, so
a later stop may write it again over the ``success`` a resume leaves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gitops_gpu import timefmt
from gitops_gpu.rollout.actions import Action, SetStatus
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import CONTEXT_PREFIX, ERROR, SUCCESS, fit_description

LINE_CONTEXT = f"{CONTEXT_PREFIX}/line"
RESUMED = "line running: resumed"


@dataclass(frozen=True)
class LineStop:
    """Who stopped the line, when (epoch seconds; None: not said) and why."""

    by: str = ""
    at: float | None = None
    reason: str = ""

    def describe(self) -> str:
        """ "line stopped by alice at 2026-12-03 04:50Z: incident 42"."""
        text = "line stopped"
        if self.by:
            text += f" by {self.by}"
        if self.at is not None:
            text += f" at {datetime.fromtimestamp(self.at, UTC):%Y-%m-%d %H:%MZ}"
        return f"{text}: {self.reason}" if self.reason else text


def from_data(data: Mapping[str, str] | None) -> LineStop | None:
    """The stop the ConfigMap's data holds, or None when the line runs."""
    if not data or data.get("paused") != "true":
        return None
    when = timefmt.parse(data.get("pausedAt"))
    return LineStop(
        by=data.get("pausedBy", ""),
        at=when.timestamp() if when is not None else None,
        reason=data.get("reason", ""),
    )


def to_data(stop: LineStop | None) -> dict[str, str]:
    """The ConfigMap data for ``stop`` (None: the line runs; the stop's fields are cleared)."""
    if stop is None:
        return {"paused": "false", "pausedBy": "", "pausedAt": "", "reason": ""}
    at = datetime.fromtimestamp(stop.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if stop.at else ""
    return {"paused": "true", "pausedBy": stop.by, "pausedAt": at, "reason": stop.reason}


def statuses(stop: LineStop | None, commits: Sequence[str], record: Record) -> list[Action]:
    """While stopped: ``error`` with the stop's text on the newest commit, written once. Once
    running: ``success`` over every ``error`` a stop left on the commits in view."""
    if stop is not None:
        if not commits:
            return []
        text = fit_description(stop.describe())
        latest = record.latest(commits[0], LINE_CONTEXT)
        if latest is not None and latest.state == ERROR and latest.description == text:
            return []
        return [SetStatus(commits[0], LINE_CONTEXT, ERROR, text)]
    return [
        SetStatus(sha, LINE_CONTEXT, SUCCESS, RESUMED)
        for sha in commits
        if record.state(sha, LINE_CONTEXT) == ERROR
    ]
