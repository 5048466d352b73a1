"""What a pass's own status writes mean to a person: pure functions, no I/O.

A transition is a status this controller wrote whose state or phase differs from the one the
record held for that commit and context before the pass (a pending status re-written with a
new node count is not one). Only statuses this controller wrote are read, so a multi-cluster
fleet's controllers each announce their own parts, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.rollout.phases import read_mark
from gitops_gpu.rollout.status import (
    FAILURE,
    PREFLIGHT_CONTEXT,
    STAGE_CONTEXT_PREFIX,
    CommitStatus,
)
from gitops_gpu.ui import model
from gitops_gpu.ui.facts import PassFacts

MAX_NODES = 5  # failing nodes named in a message: the rest are counted


@dataclass(frozen=True)
class FailingNode:
    node: str
    pool: str
    rung: str
    reason: str


@dataclass(frozen=True)
class Transition:
    commit: str
    subject: str  # the commit's first line
    context: str
    stage: str  # the stage's name, or "preflight"
    cluster: str | None  # the stage part's cluster (multi-cluster fleets), else None
    state: str
    phase: str  # the pending phase ("rolling out", "awaiting approval"...), "" for verdicts
    previous_state: str  # "" when the record had nothing for the commit and context
    previous_phase: str
    description: str
    at: float
    pools: tuple[str, ...] = ()
    nodes: Mapping[str, int] = field(default_factory=dict)  # the pools' nodes by health
    failing: tuple[FailingNode, ...] = ()  # why a failed stage halted, worst first
    more_failing: int = 0  # failing nodes not named

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What a message is sent once for."""
        return (self.commit, self.context, self.state, self.phase)


def _phase(status: CommitStatus | None) -> str:
    mark = read_mark(status) if status is not None else None
    return str(mark.phase) if mark is not None else ""


def _stage_of(context: str, stages: Iterable[StageSpec]) -> tuple[StageSpec, str | None] | None:
    """The stage a context records, and the cluster of its part ("stage/<name>/<cluster>")."""
    if not context.startswith(STAGE_CONTEXT_PREFIX):
        return None
    name, _, cluster = context.removeprefix(STAGE_CONTEXT_PREFIX).partition("/")
    stage = next((s for s in stages if s.name == name), None)
    return None if stage is None else (stage, cluster or None)


def of_pass(facts: PassFacts) -> list[Transition]:
    """The transitions among ``facts.written``, in the order they were written."""
    rec = model.record(facts)
    stages = facts.compiled.stages if facts.compiled is not None else ()
    many = facts.compiled is not None and len(facts.compiled.clusters) > 1
    clusters = model.pool_clusters(facts) if many else {}
    out = []
    for status in facts.written:
        before = rec.latest(status.sha, status.context)
        phase, previous_phase = _phase(status), _phase(before)
        previous_state = str(before.state) if before is not None else ""
        if previous_state == str(status.state) and previous_phase == phase:
            continue
        base = Transition(
            commit=status.sha,
            subject=facts.subjects.get(status.sha, ""),
            context=status.context,
            stage="",
            cluster=None,
            state=str(status.state),
            phase=phase,
            previous_state=previous_state,
            previous_phase=previous_phase,
            description=status.description,
            at=status.created_at,
        )
        if status.context == PREFLIGHT_CONTEXT:
            out.append(replace(base, stage="preflight", cluster=facts.cluster if many else None))
            continue
        found = _stage_of(status.context, stages)
        if found is None:
            continue  # approvals and spanning contexts: not a stage this controller gates
        stage, part = found
        cluster = part or (facts.cluster if many else None)
        pools = tuple(p for p in stage.pools if cluster is None or clusters.get(p) == cluster)
        failing: list[FailingNode] = []
        more = 0
        if status.state == FAILURE:
            rows = model.not_done(facts, pools, {})
            failing = [FailingNode(r.node, r.pool, r.rung, r.reason) for r in rows[:MAX_NODES]]
            more = max(0, len(rows) - MAX_NODES)
        out.append(
            replace(
                base,
                stage=stage.name,
                cluster=cluster,
                pools=pools,
                nodes=model.counts(facts, pools),
                failing=tuple(failing),
                more_failing=more,
            )
        )
    return out


def headline(t: Transition) -> str:
    """One line: "canary: 0d70c2a1 failed" / "fleet: 0d70c2a1 awaiting approval"."""
    what = {
        "success": "succeeded",
        "failure": "failed",
        "error": "stopped",
    }.get(t.state, t.phase or t.state)
    where = f"{t.stage} ({t.cluster})" if t.cluster and t.stage != "preflight" else t.stage
    return f"{where}: {t.commit[:12]} {what}"
