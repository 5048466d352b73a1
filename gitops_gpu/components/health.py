"""Health values: the ordered enum, one rung's result, a node's and a pool's verdict.

Ordered like gitops-engine's health (Healthy < Progressing < Degraded < Unknown) so "worst of"
is ``max()``. Unknown ranks worst on purpose: a node we cannot see (no NodeGPUReport, stale
agent) must never let a stage pass.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime


class Health(enum.IntEnum):
    HEALTHY = 0
    PROGRESSING = 1
    DEGRADED = 2
    UNKNOWN = 3

    def __str__(self) -> str:
        return self.name.capitalize()


@dataclass(frozen=True)
class RungResult:
    """One component's verdict on one node; ``reason`` is one line, prefixed by the component."""

    component: str
    health: Health
    reason: str
    skipped: bool = False  # the pool switches this component off on its nodes

    @property
    def ok(self) -> bool:
        return self.health is Health.HEALTHY


@dataclass(frozen=True)
class Options:
    """Judging knobs shared by every rung.

    ``since``: when the stage adopted the commit; Xid events seen before it are history, not
    news. ``stale_after``: a NodeGPUReport older than this (or than 2.5 of its own heartbeats,
    whichever is longer, the heartbeat bounded: signals.stale_limit) no longer describes the
    node.
    """

    since: datetime | None = None
    stale_after: float = 300.0


DEFAULT_OPTIONS = Options()


def result(component: str, health: Health, detail: str, *, skipped: bool = False) -> RungResult:
    return RungResult(component, health, f"{component}: {detail}", skipped)


@dataclass(frozen=True)
class NodeHealth:
    """A node's verdict: the first rung that is not Healthy is the root cause."""

    node: str
    health: Health
    reason: str
    rungs: tuple[RungResult, ...]

    @property
    def failing(self) -> RungResult | None:
        return next((r for r in self.rungs if not r.ok), None)


@dataclass(frozen=True)
class PoolHealth:
    pool: str
    health: Health
    counts: Mapping[Health, int]
    nodes: tuple[NodeHealth, ...] = field(default=())
    reason: str = ""

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, health: Health) -> int:
        return self.counts.get(health, 0)

    @property
    def first_failure(self) -> str | None:
        """The cause to name for the pool: a degraded node's reason first, a node still
        progressing (or unknown) only when none is degraded."""
        if self.counts.get(Health.HEALTHY, 0) == len(self.nodes):
            return None  # read for every pool on every pass: do not walk a healthy pool
        return next((n.reason for n in self.nodes if n.health is Health.DEGRADED), None) or next(
            (n.reason for n in self.nodes if n.health is not Health.HEALTHY), None
        )


def aggregate(pool: str, nodes: Iterable[NodeHealth]) -> PoolHealth:
    """Worst-of over the pool's nodes, with counts; a pool with no nodes is Unknown."""
    members = tuple(sorted(nodes, key=lambda n: n.node))
    counts = Counter(n.health for n in members)
    if not members:
        return PoolHealth(
            pool, Health.UNKNOWN, {}, (), f"{pool}: no nodes match the pool's selector"
        )
    worst = max(counts)
    summary = ", ".join(f"{counts[h]} {h}" for h in Health if counts[h])
    first_bad = next((n for n in members if n.health is worst), None)
    reason = f"{pool}: {summary}"
    if worst is not Health.HEALTHY and first_bad is not None:
        reason += f" (e.g. {first_bad.node}: {first_bad.reason})"
    return PoolHealth(pool, worst, dict(counts), members, reason)
