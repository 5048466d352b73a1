"""A stage as a person reads it: its commit, state, soak, window, last failure and pools.

One reading for `gitops-gpu status` (operations.py) and the web view (ui/model.py), so the
page and the command never disagree. Pure: the record, the observations and the health it is
given, nothing read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gitops_gpu.components.health import Health, PoolHealth
from gitops_gpu.components.holders import NodeWait
from gitops_gpu.fleet import windows
from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.rollout import line, span
from gitops_gpu.rollout.gate import applied_commit
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.rollout.phases import Phase, format_time, read_mark
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import FAILURE, CommitStatus, stage_context


def stage_entry(
    now: float,
    trusted: Record,
    stage: StageSpec,
    pools: Mapping[str, PoolObservation],
    health: Mapping[str, PoolHealth],
    pool_clusters: Mapping[str, str] | None,
    stop: line.LineStop | None = None,
    waits: Mapping[str, Sequence[NodeWait]] | None = None,
) -> dict[str, Any]:
    commit = applied_commit(stage, pools)
    window = "" if stage.windows.always_open else windows.state(stage.windows, now).reason
    verdict = trusted.latest(commit, stage_context(stage.name)) if commit else None
    entry: dict[str, Any] = {
        "stage": stage.name,
        "commit": commit,
        "state": verdict.state if verdict else None,
        "description": verdict.description if verdict else "",
        # What a person asks next: how long the soak still runs, and the stage's last failure.
        "soakLeft": soak_left(stage, verdict, now),
        "lastEvent": last_event(trusted, stage, commit),
        # "" when it may move at any time; else why not now, or until when it may.
        "window": window,
        # Why the stage starts nothing new now: the stopped line first, then its window.
        "hold": stop.describe() if stop is not None else window,
    }
    if pool_clusters is None:
        entry["pools"] = [
            pool_entry(p, health.get(p), (waits or {}).get(p, ()), now) for p in stage.pools
        ]
        return entry
    clusters = span.stage_clusters(stage, pool_clusters)
    parts = []
    if len(clusters) > 1:
        for cluster in clusters:
            part = span.local_part(stage, cluster, pool_clusters)
            at = applied_commit(part, pools) if part is not None else None
            st = trusted.latest(at, span.cluster_context(stage.name, cluster)) if at else None
            parts.append(
                {
                    "cluster": cluster,
                    "commit": at,
                    "state": st.state if st else None,
                    "description": st.description if st else "",
                }
            )
    entry |= {
        "clusters": list(clusters),
        "parts": parts,
        "pools": [
            {**pool_entry(p, health.get(p)), "cluster": pool_clusters[p]} for p in stage.pools
        ],
    }
    return entry


def soak_left(stage: StageSpec, verdict: CommitStatus | None, now: float) -> float | None:
    """Seconds the stage's soak still runs (None: not soaking)."""
    mark = read_mark(verdict) if verdict is not None else None
    if mark is None or mark.phase is not Phase.SOAKING:
        return None
    return max(0.0, stage.gate.soak_seconds - (now - mark.since))


def last_event(trusted: Record, stage: StageSpec, current: str | None) -> str:
    """The stage's newest failure of a commit other than the one it runs, as a person reads
    it: "rolled back from 0d7061c at 2026-12-03T14:07:00Z: canary: 1 node unhealthy ..."."""
    context = stage_context(stage.name)
    failures = [
        s
        for s in trusted.current()
        if s.context == context and s.state == FAILURE and s.sha != current
    ]
    if not failures:
        return ""
    last = max(failures, key=lambda s: s.created_at)
    verb = "rolled back from" if stage.on_failure == "rollback" and current else "failed"
    return f"{verb} {last.sha[:7]} at {format_time(last.created_at)}: {last.description}"


def pool_entry(
    pool: str, ph: PoolHealth | None, waits: Sequence[NodeWait] = (), now: float = 0.0
) -> dict[str, Any]:
    # A node judged not healthy first; one skipped as unavailable only when there is none.
    nodes = ph.nodes if ph else ()
    failing = next(
        (n for n in nodes if n.health not in (Health.HEALTHY, Health.SKIPPED)), None
    ) or next((n for n in nodes if n.health is Health.SKIPPED), None)
    return {
        "pool": pool,
        "healthy": ph.count(Health.HEALTHY) if ph else 0,
        "total": ph.total if ph else 0,
        "unavailable": ph.unavailable if ph else 0,  # skipped (unavailableNodes: skip)
        "health": str(ph.health) if ph else "Unknown",
        "firstFailure": f"{failing.node}: {failing.reason}" if failing else None,
        # Nodes the driver upgrade waits on, and who holds them (components/holders.py).
        "waiting": [
            {
                "node": w.node,
                "state": w.state,
                "seconds": round(w.waited(now)),
                "holders": [str(h) for h in w.holders],
                "text": f"{w.node} ({w.state}) {w.describe(now)}",
            }
            for w in waits
        ],
    }
