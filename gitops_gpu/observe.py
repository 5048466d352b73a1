"""What a pass observes per pool: the commit its objects carry, whether they are in sync with
that commit, and the verification ladder's verdict on its nodes. Reads come from informer
caches (nodes, NodeGPUReports, operator pods), so an idle pass LISTs nothing but drivers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gitops_gpu import names, timefmt
from gitops_gpu.components import evidence, ladder, signals
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, NodeHealth, PoolHealth, aggregate
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.sync import engine, operands
from gitops_gpu.sync.live import Informer, selector_matches

Obj = dict[str, Any]
CompiledFor = Callable[[str], CompiledFleet | None]


MEMO_MAX_AGE = 60.0  # a verdict is recomputed at least this often, whatever changed


@dataclass(frozen=True)
class Snapshot:
    """One pass's view of the informer caches, indexed once."""

    nodes: list[Obj]
    nodes_version: int  # the node informer's change counter when this was taken
    reports: Mapping[str, Obj]
    pods_by_node: Mapping[str, list[Obj]]
    now: datetime


@dataclass(frozen=True)
class _Verdict:
    key: tuple[object, ...]
    valid_until: datetime
    health: NodeHealth


def _rv(obj: Obj | None) -> str | None:
    return None if obj is None else str(obj["metadata"].get("resourceVersion"))


class Observer:
    """Per-pool observations; a node's ladder verdict is reused while its node, report and pods
    are unchanged and the report cannot have gone stale (idle passes at 2,000 nodes)."""

    def __init__(self, nodes: Informer, reports: Informer, pods: Informer) -> None:
        self.nodes, self.reports, self.pods = nodes, reports, pods
        self._verdicts: dict[str, _Verdict] = {}
        self._members: dict[str, tuple[int, tuple[tuple[str, str], ...], list[Obj]]] = {}
        # label key -> value -> nodes, for one nodes version: pools find their members by
        # lookup, so a change costs one pass over the nodes, not one per pool.
        self._index: tuple[int, dict[str, dict[str, list[Obj]]]] = (-1, {})

    def snapshot(self) -> Snapshot:
        pods: dict[str, list[Obj]] = {}
        for pod in self.pods.items():
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                pods.setdefault(node, []).append(pod)
        version = self.nodes.version  # read first: a change racing the copy forces a recompute
        return Snapshot(
            self.nodes.items(),
            version,
            {r["metadata"]["name"]: r for r in self.reports.items()},
            pods,
            datetime.now(UTC),
        )

    def members(self, compiled: CompiledFleet, pool: str, snap: Snapshot) -> list[Obj]:
        """The pool's nodes; recomputed only when some node changed since the last pass."""
        selector = tuple(sorted(compiled.pool(pool).node_selector.items()))
        cached = self._members.get(pool)
        if cached is not None and cached[0] == snap.nodes_version and cached[1] == selector:
            return cached[2]
        sel = dict(selector)
        candidates = self._by_label(snap, selector[0][0]).get(selector[0][1], []) if sel else []
        found = [
            n
            for n in (candidates if sel else snap.nodes)
            if selector_matches(sel, n["metadata"].get("labels") or {})
        ]
        self._members[pool] = (snap.nodes_version, selector, found)
        return found

    def _by_label(self, snap: Snapshot, key: str) -> dict[str, list[Obj]]:
        version, index = self._index
        if version != snap.nodes_version:
            index = {}
            self._index = (snap.nodes_version, index)
        if key not in index:
            by_value: dict[str, list[Obj]] = {}
            for node in snap.nodes:
                value = (node["metadata"].get("labels") or {}).get(key)
                if value is not None:
                    by_value.setdefault(value, []).append(node)
            index[key] = by_value
        return index[key]

    def pool_health(
        self,
        compiled: CompiledFleet,
        pool: str,
        snap: Snapshot | None = None,
        members: list[Obj] | None = None,
    ) -> PoolHealth:
        snap = snap or self.snapshot()
        target = compiled.pool(pool)
        members = self.members(compiled, pool, snap) if members is None else members
        verdicts: list[NodeHealth] = []
        for node in members:
            name = node["metadata"]["name"]
            report = snap.reports.get(name)
            pods = snap.pods_by_node.get(name, [])
            key = (compiled.commit, pool, _rv(node), _rv(report), tuple(_rv(p) for p in pods))
            memo = self._verdicts.get(name)
            if memo is None or memo.key != key or snap.now >= memo.valid_until:
                ev = evidence.assemble([node], [report] if report else [], pods, snap.now)[0]
                memo = _Verdict(key, _valid_until(report, snap.now), ladder.walk(ev, target))
                self._verdicts[name] = memo
            verdicts.append(memo.health)
        return aggregate(pool, verdicts)

    def observe(
        self,
        eng: engine.Engine,
        drivers: Mapping[str, Obj],
        newest: CompiledFleet,
        compiled_for: CompiledFor,
        ops: OperandContext | None = None,
    ) -> tuple[dict[str, PoolObservation], dict[str, PoolHealth]]:
        """Per pool of the newest good commit: its applied commit, sync and health (operand
        pods on their DaemonSet's current revision included, when ``ops`` is given)."""
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
                members = self.members(compiled, pool, snap)
                plan = eng.plan(
                    target_cluster,
                    engine.Selection(frozenset({pool}), False),
                    compiled.commit,
                    drivers=drivers,
                    nodes=members,
                )
                ph = self.pool_health(compiled, pool, snap, members)
                health[pool] = ph
                version = compiled.pool(pool).driver_version
                out[pool] = PoolObservation(
                    pool=pool,
                    commit=commit,
                    objects_in_sync=plan.in_sync,
                    nodes_total=ph.total,
                    nodes_healthy=ph.count(Health.HEALTHY),
                    nodes_unhealthy=ph.count(Health.DEGRADED),
                    nodes_progressing=ph.count(Health.PROGRESSING),
                    first_failure=ph.first_failure,
                    summary=f"on {version}" if version else "",
                )
                if ops is not None and ops.operands.daemonsets:
                    live_spec = ops.live_policy_specs.get(target_cluster.name)
                    expects = live_spec == target_cluster.cluster_policy["spec"]
                    state, _ = operands.pool_state(ops.operands, members, expects, ops.refused)
                    just_applied = ops.settling and commit == ops.live_commit
                    if expects and just_applied and not state.behind:
                        waiting = "operands: the operator is reconciling the ClusterPolicy"
                        state = operands.PoolOperands(len(members), 0, 0, waiting)
                    out[pool] = fold_operands(out[pool], state)
        return out, health


@dataclass(frozen=True)
class OperandContext:
    """What a pass knows about operand revisions (sync/operands.py)."""

    operands: operands.Operands
    # cluster -> the ClusterPolicy spec live there, as compiled from the commit it carries
    live_policy_specs: Mapping[str, Any]
    refused: Mapping[str, str] = field(default_factory=dict)  # node -> refused eviction
    # The ClusterPolicy changed moments ago: the operator may not have updated its DaemonSets.
    settling: bool = False
    live_commit: str | None = None  # the commit the live ClusterPolicy carries


def fold_operands(obs: PoolObservation, pool: operands.PoolOperands) -> PoolObservation:
    """Fold the pool's operand revisions into its observation: nodes behind are progressing
    (not yet on the commit), stale pods leave the pool out of sync so its stage re-adopts and
    the next batch is evicted; nodes ahead of stage are said in the summary."""
    if pool.behind:
        moved = min(pool.behind, obs.nodes_healthy)
        obs = replace(
            obs,
            nodes_healthy=obs.nodes_healthy - moved,
            nodes_progressing=obs.nodes_progressing + moved,
            objects_in_sync=obs.objects_in_sync and pool.stale_pods == 0,
            first_failure=obs.first_failure or pool.first,
        )
    if pool.ahead:
        nodes = "node" if pool.ahead == 1 else "nodes"
        note = f"{pool.ahead} {nodes} ahead of stage"
        obs = replace(obs, summary=f"{obs.summary}, {note}" if obs.summary else note)
    return obs


def _pools(compiled: CompiledFleet) -> set[str]:
    return {p for c in compiled.clusters.values() for p in c.pools}


def _valid_until(report: Obj | None, now: datetime) -> datetime:
    """When a verdict may change with no object changing: the report going stale."""
    cap = now + timedelta(seconds=MEMO_MAX_AGE)
    status = (report or {}).get("status") or {}
    observed = timefmt.parse(status.get("observedAt"))
    if observed is None:
        return cap
    stale_at = observed + timedelta(seconds=signals.stale_limit(status, DEFAULT_OPTIONS))
    return min(cap, stale_at) if stale_at > now else cap
