"""Health values: the ordered enum, one rung's result, a node's and a pool's verdict.

Ordered like gitops-engine's health (Healthy < Progressing < Degraded < Unknown) so "worst of"
is ``max()``. Unknown ranks worst on purpose: a node we cannot see (no NodeGPUReport, stale
agent) must never let a stage pass. Skipped ranks below Healthy: a node that is not available
(NotReady, cordoned by someone else) in a pool with ``unavailableNodes: skip`` is counted and
shown but judged neither way, so it never makes a pool worse; :func:`aggregate` bounds how many
a pool may skip.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from gitops_gpu.kept import Kept


class Health(enum.IntEnum):
    HEALTHY = 0
    PROGRESSING = 1
    DEGRADED = 2
    UNKNOWN = 3
    # Last, so listings say it after the judged states; -1, so it never wins "worst of".
    SKIPPED = -1

    def __str__(self) -> str:
        return self.name.capitalize()


@dataclass(frozen=True, slots=True)
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


# Results are values, and nearly every node's rungs read the same ("gpu: 8 GPUs healthy"):
# equal ones are one object, not ten per node (1.4 KiB a node at 10,000 nodes).
_RESULTS: Kept[tuple[str, Health, str, bool], RungResult] = Kept(8192)


def result(component: str, health: Health, detail: str, *, skipped: bool = False) -> RungResult:
    key = (component, health, detail, skipped)
    hit = _RESULTS.get(key)
    if hit is None:
        hit = _RESULTS.one(key, RungResult(component, health, f"{component}: {detail}", skipped))
    return hit


@dataclass(frozen=True, slots=True)
class Unavailability:
    """Why a node is not available (components/node.py): ``kind`` for counts ("NotReady",
    "cordoned"), ``reason`` for people ("NotReady since 12m (NodeStatusUnknown)")."""

    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """A node's verdict: the first rung that is not Healthy is the root cause, unless the node
    is not available: then the pool's ``unavailableNodes`` decides and ``unavailable`` says
    why (the rungs are still judged, for ``gitops-gpu nodes``)."""

    node: str
    health: Health
    reason: str
    rungs: tuple[RungResult, ...]
    unavailable: Unavailability | None = None

    @property
    def cause(self) -> str:
        """The reason as a stage names it, the node first: "gpu-7 NotReady since 12m
        (NodeStatusUnknown)", "l40s-infer-001 gpu: Xid 79 on GPU 0 at ..."."""
        return f"{self.node} {self.reason}"

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
    def unavailable(self) -> int:
        """Nodes skipped as not available: counted in ``total``, in no judged state."""
        return self.counts.get(Health.SKIPPED, 0)

    @property
    def unavailable_kinds(self) -> tuple[str, ...]:
        """What made the skipped nodes unavailable, each kind once ("NotReady", "cordoned")."""
        if not self.unavailable:
            return ()
        kinds = {
            n.unavailable.kind
            for n in self.nodes
            if n.unavailable is not None and n.health is Health.SKIPPED
        }
        return tuple(sorted(kinds))

    @property
    def first_failure(self) -> str | None:
        """The cause to name for the pool: a degraded node's reason first, a node still
        progressing (or unknown) only when none is degraded, a skipped node last."""
        if self.counts.get(Health.HEALTHY, 0) == len(self.nodes):
            return None  # read for every pool on every pass: do not walk a healthy pool
        judged = (n for n in self.nodes if n.health is not Health.SKIPPED)
        return (
            next((n.cause for n in self.nodes if n.health is Health.DEGRADED), None)
            or next((n.cause for n in judged if n.health is not Health.HEALTHY), None)
            or next((n.cause for n in self.nodes if n.health is Health.SKIPPED), None)
        )


def aggregate(pool: str, nodes: Iterable[NodeHealth], skip_budget: int = 0) -> PoolHealth:
    """Worst-of over the pool's nodes, with counts; a pool with no nodes is Unknown.

    ``skip_budget``: how many Skipped nodes the pool may leave out (its maxUnavailable, as a
    number of nodes): those past it, by name, count as Degraded, so skipping never lets a stage
    run with more nodes missing than its disruption budget. A pool whose nodes are all skipped
    has nothing to judge the commit on: they count as Progressing (the gate's timeout bounds it).
    """
    members = tuple(sorted(nodes, key=lambda n: n.node))
    skipped = [n for n in members if n.health is Health.SKIPPED]
    if len(skipped) > skip_budget:
        over = f"{len(skipped)} unavailable, more than maxUnavailable ({skip_budget})"
        excess = {n.node for n in skipped[max(0, skip_budget) :]}
        members = tuple(
            _unskip(n, Health.DEGRADED, over) if n.node in excess else n for n in members
        )
    elif skipped and len(skipped) == len(members):
        none_left = "no available node to judge the pool on"
        members = tuple(_unskip(n, Health.PROGRESSING, none_left) for n in members)
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


def _unskip(node: NodeHealth, health: Health, why: str) -> NodeHealth:
    assert node.unavailable is not None  # only Skipped verdicts come here
    return replace(node, health=health, reason=f"{node.unavailable.reason}, not skipped: {why}")
