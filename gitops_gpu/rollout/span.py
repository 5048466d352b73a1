"""Stages that span clusters: one controller per cluster, coordinating through the record.

Each cluster's controller runs only its own part of a stage (the stage's pools in that cluster).
When the stage's pools sit in several clusters, a part is recorded under its own context,
``gitops-gpu/stage/<stage>/<cluster>``, and the stage's verdict ``gitops-gpu/stage/<stage>``
(what later stages and people read) is derived from the parts by any controller that sees them:

- ``failure`` as soon as one part failed, naming the cluster; also when a part has said nothing
  for the gate's timeout since the first part spoke (its controller is gone);
- ``success`` when every part succeeded;
- ``error`` when every part finished and one was superseded (nothing was found wrong);
- ``pending`` once, while parts are under way, so a pull request shows the stage started.

The derivation is pure and its descriptions depend only on the parts, so two controllers that
derive at once write the same status and the backend's idempotence keeps one. A stage whose
pools sit in one cluster is recorded exactly as in a single-cluster fleet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.rollout.actions import SetStatus
from gitops_gpu.rollout.phases import format_duration
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    SUCCESS,
    fit_description,
    stage_context,
)


def part_context(stage: StageSpec) -> str:
    """Where a stage (or its part in one cluster) records its gate."""
    context = stage_context(stage.name)
    return context if stage.cluster is None else f"{context}/{stage.cluster}"


def cluster_context(stage: str, cluster: str) -> str:
    return f"{stage_context(stage)}/{cluster}"


def stage_clusters(stage: StageSpec, pool_clusters: Mapping[str, str]) -> tuple[str, ...]:
    """The clusters that hold a pool of ``stage``, sorted."""
    return tuple(sorted({pool_clusters[p] for p in stage.pools if p in pool_clusters}))


def local_part(
    stage: StageSpec, cluster: str, pool_clusters: Mapping[str, str]
) -> StageSpec | None:
    """``stage`` narrowed to ``cluster``'s pools; None when the cluster holds none of them.

    A stage entirely in ``cluster`` comes back unchanged (recorded under its own context)."""
    pools = tuple(p for p in stage.pools if pool_clusters.get(p) == cluster)
    if not pools:
        return None
    if len(stage_clusters(stage, pool_clusters)) <= 1:
        return stage
    return replace(stage, pools=pools, cluster=cluster)


def derive(
    stage: StageSpec,
    clusters: Sequence[str],
    commits: Sequence[str],
    record: Record,
    now: float,
) -> list[SetStatus]:
    """The stage verdicts the parts' statuses imply and the record does not hold yet."""
    out: list[SetStatus] = []
    context = stage_context(stage.name)
    for sha in commits:
        current = record.state(sha, context)
        if current in (SUCCESS, FAILURE, ERROR):
            continue  # a verdict is final; whoever wrote it first decided
        derived = _derive_one(stage, clusters, sha, record, now)
        if derived is None:
            continue
        state, text = derived
        if state == PENDING and current == PENDING:
            continue  # pending is said once; the parts carry the detail
        out.append(SetStatus(sha, context, state, fit_description(text)))
    return out


def _derive_one(
    stage: StageSpec, clusters: Sequence[str], sha: str, record: Record, now: float
) -> tuple[str, str] | None:
    name = stage.name
    parts = {c: record.latest(sha, cluster_context(name, c)) for c in clusters}
    if all(p is None for p in parts.values()):
        return None
    for cluster in clusters:
        part = parts[cluster]
        if part is not None and part.state == FAILURE:
            cause = part.description.removeprefix(f"{name}: ")
            return FAILURE, f"{name}: failed in cluster {cluster}: {cause}"
    silent = [c for c in clusters if parts[c] is None]
    timeout = stage.gate.timeout_seconds
    if silent and timeout is not None:
        first = min(
            s.created_at
            for c in clusters
            if parts[c] is not None
            for s in record.history(sha, cluster_context(name, c))[:1]
        )
        if now - first >= timeout:
            who = ", ".join(silent)
            return (
                FAILURE,
                f"{name}: no word from cluster {who} within {format_duration(timeout)} "
                "(its controller is down or cut off)",
            )
    if silent or any(p is not None and p.state == PENDING for p in parts.values()):
        return PENDING, f"{name}: rolling out in clusters {', '.join(clusters)}"
    if all(p is not None and p.state == SUCCESS for p in parts.values()):
        return SUCCESS, f"{name}: passed in clusters {', '.join(clusters)}"
    cluster, stopped = next((c, p) for c, p in parts.items() if p is not None and p.state == ERROR)
    return ERROR, f"{name}: cluster {cluster}: {stopped.description.removeprefix(f'{name}: ')}"


def own_contexts(
    stages: Sequence[StageSpec], cluster: str | None, pool_clusters: Mapping[str, str]
) -> Callable[[str], bool]:
    """Whether a context is one this controller's gate writes (its stages, or its parts of
    spanning ones): the verdicts its ledger vouches for. A spanning stage's own context is
    derived from the parts, by any controller: not one of them."""
    if cluster is None:
        mine = {stage_context(s.name) for s in stages}
    else:
        parts = (local_part(s, cluster, pool_clusters) for s in stages)
        mine = {part_context(p) for p in parts if p is not None}
    return mine.__contains__
