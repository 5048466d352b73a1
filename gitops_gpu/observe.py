"""What a pass observes per pool: the commit its objects carry, whether they are in sync with
that commit, and the verification ladder's verdict on its nodes. Reads come from informer
caches (nodes, NodeGPUReports, operator pods), so an idle pass LISTs nothing but drivers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import names
from gitops_gpu.components import evidence, ladder
from gitops_gpu.components.health import Health, PoolHealth
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.sync import engine
from gitops_gpu.sync.live import Informer, selector_matches

Obj = dict[str, Any]
CompiledFor = Callable[[str], CompiledFleet | None]


@dataclass(frozen=True)
class Snapshot:
    """One pass's view of the informer caches, indexed once."""

    nodes: list[Obj]
    reports: Mapping[str, Obj]
    pods: list[Obj]
    now: datetime


class Observer:
    def __init__(self, nodes: Informer, reports: Informer, pods: Informer) -> None:
        self.nodes, self.reports, self.pods = nodes, reports, pods

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.nodes.items(),
            {r["metadata"]["name"]: r for r in self.reports.items()},
            self.pods.items(),
            datetime.now(UTC),
        )

    def pool_health(
        self, compiled: CompiledFleet, pool: str, snap: Snapshot | None = None
    ) -> PoolHealth:
        snap = snap or self.snapshot()
        target = compiled.pool(pool)
        members = [
            n
            for n in snap.nodes
            if selector_matches(target.node_selector, n["metadata"].get("labels") or {})
        ]
        names_ = {n["metadata"]["name"] for n in members}
        reports = [snap.reports[n] for n in names_ if n in snap.reports]
        pods = [p for p in snap.pods if (p.get("spec") or {}).get("nodeName") in names_]
        return ladder.judge_pool(target, evidence.assemble(members, reports, pods, snap.now))

    def observe(
        self,
        eng: engine.Engine,
        drivers: Mapping[str, Obj],
        newest: CompiledFleet,
        compiled_for: CompiledFor,
    ) -> tuple[dict[str, PoolObservation], dict[str, PoolHealth]]:
        """Per pool of the newest good commit: its applied commit, sync and health."""
        out: dict[str, PoolObservation] = {}
        health: dict[str, PoolHealth] = {}
        snap = self.snapshot()
        for cluster in newest.clusters.values():
            for pool in sorted(cluster.pools):
                live = drivers.get(str(cluster.pools[pool].driver["metadata"]["name"]))
                if live is None:
                    continue  # no objects yet: the machine adopts
                ann = live["metadata"].get("annotations") or {}
                commit = ann.get(names.COMMIT_ANNOTATION)
                compiled = compiled_for(commit) if commit else None
                if compiled is None or pool not in _pools(compiled):
                    out[pool] = PoolObservation(pool, commit, False, 0, 0)
                    continue
                target_cluster = compiled.clusters[compiled.pool(pool).cluster]
                plan = eng.plan(
                    target_cluster,
                    engine.Selection(frozenset({pool}), False),
                    compiled.commit,
                    drivers=drivers,
                    nodes=snap.nodes,
                )
                ph = self.pool_health(compiled, pool, snap)
                health[pool] = ph
                version = compiled.pool(pool).driver_version
                failing = next((n.reason for n in ph.nodes if n.health is not Health.HEALTHY), None)
                out[pool] = PoolObservation(
                    pool=pool,
                    commit=commit,
                    objects_in_sync=plan.in_sync,
                    nodes_total=ph.total,
                    nodes_healthy=ph.count(Health.HEALTHY),
                    nodes_unhealthy=ph.count(Health.DEGRADED),
                    nodes_progressing=ph.count(Health.PROGRESSING),
                    first_failure=failing,
                    summary=f"on {version}" if version else "",
                )
        return out, health


def _pools(compiled: CompiledFleet) -> set[str]:
    return {p for c in compiled.clusters.values() for p in c.pools}
