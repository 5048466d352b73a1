"""A stage's health gate, read from the observations of its pools at one commit.

Converged means: every pool reports the commit on its objects and is in sync, no node is still
progressing, every node is accounted for (healthy, degraded, or not available and skipped by
its pool's ``unavailableNodes: skip``), and at most ``maxUnhealthyNodes`` are degraded. More
degraded nodes than that fail the stage at once; never converging fails it at the timeout (the
machine's job). A stage whose commit changes nothing for it still passes through here, so an
unhealthy stage never promotes (gitops-promoter#1319).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.rollout.inputs import PoolObservation


@dataclass(frozen=True)
class StageView:
    on_commit: bool  # every pool's objects carry the commit: statuses may be written for it
    in_sync: bool
    converged: bool
    too_many_unhealthy: bool
    summary: str  # "2/2 nodes on 580.126.20"
    first_failure: str | None
    nodes_unhealthy: int
    waiting_on: str = ""  # the first pool's node held by a workload (PoolObservation)


def applied_commit(stage: StageSpec, pools: Mapping[str, PoolObservation]) -> str | None:
    """The one commit all the stage's pools report, or None when they differ or lack objects."""
    commits = {pools[p].commit if p in pools else None for p in stage.pools}
    return commits.pop() if len(commits) == 1 else None


def observe(stage: StageSpec, pools: Mapping[str, PoolObservation], commit: str) -> StageView:
    seen = [pools[p] for p in stage.pools if p in pools]
    missing = [p for p in stage.pools if p not in pools]
    on_commit = not missing and all(o.commit == commit for o in seen)
    in_sync = all(o.objects_in_sync for o in seen)
    total = sum(o.nodes_total for o in seen)
    healthy = sum(o.nodes_healthy for o in seen)
    unhealthy = sum(o.nodes_unhealthy for o in seen)
    progressing = sum(o.nodes_progressing for o in seen)
    unavailable = sum(o.nodes_unavailable for o in seen)
    max_unhealthy = stage.gate.max_unhealthy_nodes
    converged = (
        on_commit
        and in_sync
        and progressing == 0
        and healthy + unhealthy + unavailable == total
        and unhealthy <= max_unhealthy
    )
    # Name the pool only when the stage has several: "canary: canary: driver..." helps nobody.
    named = len(stage.pools) > 1
    failures = [
        f"{o.pool}: {o.first_failure}" if named else o.first_failure
        for o in seen
        if o.first_failure
    ]
    waits = [f"{o.pool}: {o.waiting_on}" if named else o.waiting_on for o in seen if o.waiting_on]
    return StageView(
        on_commit=on_commit,
        in_sync=in_sync,
        converged=converged,
        too_many_unhealthy=unhealthy > max_unhealthy,
        summary=_summary(seen, missing, in_sync, unhealthy, progressing),
        first_failure=failures[0] if failures else None,
        nodes_unhealthy=unhealthy,
        waiting_on=waits[0] if waits else "",
    )


def _summary(
    seen: list[PoolObservation],
    missing: list[str],
    in_sync: bool,
    unhealthy: int,
    progressing: int,
) -> str:
    summaries = {o.summary for o in seen}
    if len(summaries) <= 1:
        healthy = sum(o.nodes_healthy for o in seen)
        total = sum(o.nodes_total for o in seen)
        what = summaries.pop() if summaries else ""
        parts = [f"{healthy}/{total} nodes {what or 'healthy'}"]
    else:
        parts = [f"{o.pool} {o.nodes_healthy}/{o.nodes_total} {o.summary}".rstrip() for o in seen]
    unavailable = sum(o.nodes_unavailable for o in seen)
    if unavailable:
        kinds = sorted({k for o in seen for k in o.unavailable_kinds})
        why = f" ({', '.join(kinds)})" if kinds else ""
        parts.append(f"{unavailable} unavailable{why}, skipped")
    if unhealthy:
        parts.append(f"{unhealthy} unhealthy")
    if progressing:
        parts.append(f"{progressing} progressing")
    if not in_sync:
        parts.append("objects out of sync")
    if missing:
        parts.append("no objects yet in " + ", ".join(missing))
    return ", ".join(parts)
