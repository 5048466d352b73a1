"""The web view's rows, from one pass's facts: pure functions, no I/O.

Stages read as `gitops-gpu status` reads them (stage_view.stage_entry), so the page and the
command cannot disagree; the rest (what a stage is taking, why it waits, the nodes that are not
done, one node's rungs and evidence, one commit's record) are read off the same facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_gpu import stage_view
from gitops_gpu.components.health import Health, NodeHealth
from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.rollout import seal, span
from gitops_gpu.rollout.actions import Wait
from gitops_gpu.rollout.gate import applied_commit
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import PENDING, CommitStatus, approval_context, stage_context
from gitops_gpu.ui.facts import PassFacts

Obj = dict[str, Any]
PAGE_SIZE = 100  # node rows per page: a 5,000-node stage is paged, never one table


@dataclass(frozen=True)
class NodeRow:
    node: str
    pool: str
    health: str
    rung: str  # the first rung that is not healthy ("" when none is)
    reason: str
    since: float | None  # first seen in this state (epoch seconds), None: not known


def record(facts: PassFacts) -> Record:
    return Record(facts.judged.trusted if facts.judged is not None else [])


def _many(facts: PassFacts) -> bool:
    return facts.compiled is not None and len(facts.compiled.clusters) > 1


def pool_clusters(facts: PassFacts) -> dict[str, str]:
    if facts.compiled is None:
        return {}
    return {p: c.name for c in facts.compiled.clusters.values() for p in c.pools}


def stages(facts: PassFacts) -> list[dict[str, Any]]:
    """Per stage, left to right: the `status` entry, plus the commit it is taking (a newer one
    with a pending verdict), how long its verdict has stood and this pass's waits."""
    if facts.compiled is None:
        return []
    rec = record(facts)
    clusters = pool_clusters(facts) if _many(facts) else None
    out = []
    for stage in facts.compiled.stages:
        entry = stage_view.stage_entry(
            facts.at, rec, stage, facts.pools, facts.health, clusters, facts.stop, facts.waits
        )
        if facts.cluster is not None and clusters is not None:
            _local(facts, rec, stage, clusters, entry)
        commit = entry["commit"]
        verdict = rec.latest(commit, stage_context(stage.name)) if commit else None
        entry["state"] = verdict.state if verdict else None
        entry["description"] = verdict.description if verdict else ""
        entry["since"] = verdict.created_at if verdict is not None else None
        entry["taking"] = _taking(facts, rec, stage, commit)
        entry["waits"] = waits(facts.actions, stage.name)
        entry["approval"] = stage.gate.approval_required
        out.append(entry)
    return out


def _local(
    facts: PassFacts,
    rec: Record,
    stage: StageSpec,
    clusters: Mapping[str, str],
    entry: dict[str, Any],
) -> None:
    """One cluster's controller sees its own pools only: the stage runs what its part runs,
    and every cluster's part is read from the record at that commit."""
    assert facts.cluster is not None
    entry["pools"] = [p for p in entry["pools"] if p.get("cluster") == facts.cluster]
    part = span.local_part(stage, facts.cluster, clusters)
    if part is None:
        return
    commit = applied_commit(part, facts.pools)
    entry["commit"] = commit
    parts = span.stage_clusters(stage, clusters)
    if len(parts) > 1:
        entry["parts"] = [
            {"cluster": c, "commit": commit, "state": st.state if st else None}
            for c in parts
            for st in (rec.latest(commit, span.cluster_context(stage.name, c)) if commit else None,)
        ]


def _taking(
    facts: PassFacts, rec: Record, stage: StageSpec, running: str | None
) -> dict[str, Any] | None:
    """The newest commit, newer than what the stage runs, that the stage has a pending verdict
    for: what it is taking, and what it waits on (its description)."""
    context = stage_context(stage.name)
    for commit in facts.commits:
        if commit.sha == running:
            return None  # older commits are behind what it runs
        status = rec.latest(commit.sha, context)
        if status is not None and status.state == PENDING:
            return {
                "commit": commit.sha,
                "description": status.description,
                "since": status.created_at,
            }
    return None


def waits(actions: Iterable[object], stage: str) -> list[str]:
    """This pass's Wait reasons that name ``stage`` ("canary: 0d70 awaiting approval")."""
    prefix = f"{stage}: "
    return [a.reason for a in actions if isinstance(a, Wait) and a.reason.startswith(prefix)]


def first_rung(node: NodeHealth) -> tuple[str, str]:
    """The first rung of the ladder that is not healthy (component, reason); the node's own
    reason when every rung is (unavailable, skipped)."""
    for rung in node.rungs:
        if rung.health is not Health.HEALTHY and not rung.skipped:
            return rung.component, rung.reason
    return "", node.reason


def not_done(
    facts: PassFacts,
    pools: Sequence[str],
    since: Mapping[str, float],
    *,
    health: str = "",
    query: str = "",
) -> list[NodeRow]:
    """The pools' nodes that are not healthy, worst first, then by name; ``health`` keeps one
    state, ``query`` the nodes whose name, rung or reason contains it."""
    q = query.strip().lower()
    rows = []
    for pool in pools:
        ph = facts.health.get(pool)
        for n in ph.nodes if ph is not None else ():
            if n.health is Health.HEALTHY or (health and str(n.health) != health):
                continue
            rung, reason = first_rung(n)
            if q and q not in n.node.lower() and q not in rung.lower() and q not in reason.lower():
                continue
            rows.append(NodeRow(n.node, pool, str(n.health), rung, reason, since.get(n.node)))
    rank = {str(h): -int(h) for h in Health}
    rows.sort(key=lambda r: (rank.get(r.health, 0), r.node))
    return rows


def counts(facts: PassFacts, pools: Sequence[str]) -> dict[str, int]:
    """Nodes by ladder state over ``pools``."""
    out: dict[str, int] = {}
    for pool in pools:
        ph = facts.health.get(pool)
        for h, n in ph.counts.items() if ph is not None else ():
            if n:
                out[str(h)] = out.get(str(h), 0) + n
    return out


def find_node(facts: PassFacts, name: str) -> tuple[str, NodeHealth] | None:
    for pool, ph in facts.health.items():
        for n in ph.nodes:
            if n.node == name:
                return pool, n
    return None


def evidence(facts: PassFacts, name: str) -> dict[str, Any]:
    """What the pass read about one node: its labels, its NodeGPUReport and operand pods."""
    informers = facts.snap.informers if facts.snap is not None else None
    if informers is None:
        return {"labels": {}, "report": None, "pods": []}
    node = next((n for n in informers.nodes if n["metadata"]["name"] == name), None)
    labels = dict((node or {}).get("metadata", {}).get("labels") or {})
    pods = [
        {
            "name": p["metadata"]["name"],
            "phase": (p.get("status") or {}).get("phase", ""),
            "app": ((p["metadata"].get("labels") or {}).get("app", "")),
        }
        for p in informers.pods_by_node.get(name, ())
    ]
    return {"labels": labels, "report": informers.reports.get(name), "pods": pods}


def commit_record(facts: PassFacts, sha: str) -> dict[str, Any]:
    """One commit's statuses per context (stages, approvals, clusters' parts), the record's
    ignored ones with why, its preflight and its plans where the pass made them."""
    trusted = [s for s in record(facts).current() if s.sha == sha]
    ignored = [i for i in (facts.judged.ignored if facts.judged else ()) if i.status.sha == sha]
    commit = next((c for c in facts.commits if c.sha == sha), None)
    plans = []
    if facts.snap is not None:
        for (pool, at), plan in sorted(facts.snap.plans.items()):
            if at == sha:
                drifted = [f"{o.kind}/{o.name} {o.action}" for o in plan.objects if o.drifted]
                plans.append({"pool": pool, "objects": drifted, "nodes": len(plan.nodes)})
    contexts = _context_names(facts)
    return {
        "commit": sha,
        "known": commit is not None or bool(trusted),
        "preflight": None if commit is None else commit.preflight,
        "summary": commit.preflight_summary if commit is not None else "",
        "statuses": sorted(
            (_status_row(s, contexts) for s in trusted), key=lambda r: (r["order"], r["context"])
        ),
        "ignored": [
            {
                "context": i.status.context,
                "state": str(i.status.state),
                "reason": i.reason,
                "creator": i.status.creator,
            }
            for i in ignored
        ],
        "plans": plans,
    }


def _context_names(facts: PassFacts) -> dict[str, int]:
    """Record contexts in pipeline order: preflight, then each stage's approval and verdict."""
    order: dict[str, int] = {}
    for i, stage in enumerate(facts.compiled.stages if facts.compiled else (), start=1):
        order[approval_context(stage.name)] = 2 * i
        order[stage_context(stage.name)] = 2 * i + 1
    return order


def _status_row(s: CommitStatus, order: Mapping[str, int]) -> dict[str, Any]:
    parts = seal.split(s.seal)
    key = parts[0] if parts is not None else ""
    return {
        "context": s.context,
        "order": order.get(s.context, 1 if s.context.endswith("/preflight") else 999),
        "state": str(s.state),
        "description": s.description,
        "at": s.created_at,
        "creator": s.creator,
        "sealed_by": key,
        "url": s.target_url,
    }
