"""One pass's reads as one value. ``Reader.read`` gathers everything a pass judges: the informer
copies (nodes, NodeGPUReports, operator pods), the managed NVIDIADrivers, the compiled fleets
of the commits those objects carry, each such pool's plan at that commit (server-side dry runs,
through the sync Engine and its in-sync memo) and the operand revisions. What it returns is a
frozen ``PassSnapshot``; observe.py judges it with no client and no engine, and the executor
applies the plans it holds instead of planning those pools again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet.compiled import CompiledFleet, PoolTarget
from gitops_gpu.sync import engine, operands
from gitops_gpu.sync.live import ChangeLog, Informer, pod_node, selector_matches
from gitops_gpu.sync.marks import NodeMarks, mark

Obj = dict[str, Any]
CompiledFor = Callable[[str], CompiledFleet | None]


@dataclass(frozen=True)
class Snapshot:
    """One pass's view of the informer caches, indexed once."""

    nodes: list[Obj]
    nodes_version: int  # the node informer's change counter when this was taken
    reports: Mapping[str, Obj]
    pods_by_node: Mapping[str, list[Obj]]
    now: datetime
    # The nodes', reports' and pods' (by node) change logs as of this read; None: not known,
    # and a judge of this snapshot looks at every node.
    logs: tuple[ChangeLog, ChangeLog, ChangeLog] | None = None
    # The nodes the node-level steps act on (sync/marks.py); None: not known, walk them all.
    marks: NodeMarks | None = None

    def changed_since(self, earlier: Snapshot | None) -> frozenset[str] | None:
        """Nodes whose node, report or pods changed after ``earlier`` was read; None when
        that is not known."""
        if earlier is None or self.logs is None or earlier.logs is None:
            return None
        changed: set[str] = set()
        for log, before in zip(self.logs, earlier.logs, strict=True):
            names_ = log.since(before)
            if names_ is None:
                return None
            changed |= names_
        return frozenset(changed)


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
    # The operator's refusal of the live ClusterPolicy (components/operator_state.py), if any.
    policy_refusal: str | None = None


@dataclass(frozen=True)
class PassSnapshot:
    """Everything one pass observes, read once. Pools of the newest commit whose objects carry
    a commit that compiles (and still holds the pool) have members and a plan here; the rest
    are judged from ``drivers`` alone."""

    informers: Snapshot
    drivers: Mapping[str, Obj]  # managed NVIDIADrivers by name
    # commit -> its compiled fleet, for the commits the live objects carry that compile
    compiled: Mapping[str, CompiledFleet]
    # pool -> its nodes, by the node selector of the commit its objects carry
    members: Mapping[str, Sequence[Obj]]
    # (pool, commit) -> the pool's plan at the commit its objects carry (its sync verdict)
    plans: Mapping[tuple[str, str], engine.PoolPlan]
    operands: OperandContext | None = None

    def live_targets(self, commits: Mapping[str, str | None]) -> dict[str, PoolTarget]:
        """Each pool's target at the commit its objects carry (``commits``: pool -> commit),
        for the pools whose commit compiles and still holds them."""
        out = {}
        for pool, commit in commits.items():
            compiled = self.compiled.get(commit or "")
            if compiled is not None and holds(compiled, pool):
                out[pool] = compiled.pool(pool)
        return out

    def planned(self, pool: str, commit: str, drivers: Mapping[str, Obj]) -> engine.PoolPlan | None:
        """The pool's plan at ``commit`` from this read, if it made one and the pool's objects
        are still as they were then (``drivers``: the NVIDIADrivers live now)."""
        plan = self.plans.get((pool, commit))
        if plan is None:
            return None
        for obj in plan.objects:
            then, now = _rv(self.drivers.get(obj.name)), _rv(drivers.get(obj.name))
            if then is None or then != now:
                return None
        return plan


def _rv(obj: Obj | None) -> str | None:
    rv = (obj or {}).get("metadata", {}).get("resourceVersion")
    return None if rv is None else str(rv)


def live_commit(drivers: Mapping[str, Obj], compiled: CompiledFleet, pool: str) -> str | None:
    """The commit the pool's live NVIDIADriver (named in ``compiled``) carries."""
    live = drivers.get(str(compiled.pool(pool).driver["metadata"]["name"]))
    ann = (live or {}).get("metadata", {}).get("annotations") or {}
    commit = ann.get(names.COMMIT_ANNOTATION)
    return str(commit) if commit else None


def holds(compiled: CompiledFleet, pool: str) -> bool:
    return any(pool in c.pools for c in compiled.clusters.values())


class Reader:
    """Reads a pass's snapshot. A pool's members are recomputed only when some node changed
    since the last pass (idle passes at 2,000 nodes); the engine skips the dry runs of objects
    known in sync."""

    def __init__(self, nodes: Informer, reports: Informer, pods: Informer) -> None:
        self.nodes, self.reports, self.pods = nodes, reports, pods
        self._members: dict[str, tuple[int, tuple[tuple[str, str], ...], list[Obj]]] = {}
        # label key -> value -> nodes, for one nodes version: pools find their members by
        # lookup, so a change costs one pass over the nodes, not one per pool.
        self._index: tuple[int, dict[str, dict[str, list[Obj]]]] = (-1, {})
        self._plans: dict[str, tuple[tuple[object, ...], engine.PoolPlan]] = {}
        self._marks: tuple[int, NodeMarks | None] = (-1, None)

    def informers(self) -> Snapshot:
        # Logs and version first: a change racing the copies is then seen again next pass.
        logs = (self.nodes.change_log(), self.reports.change_log(), self.pods.change_log())
        version = self.nodes.version
        pods: dict[str, list[Obj]] = {}
        for pod in self.pods.items():
            node = pod_node(pod)
            if node:
                pods.setdefault(node, []).append(pod)
        nodes = self.nodes.items()
        if self._marks[0] != version:
            self._marks = (version, mark(nodes))
        return Snapshot(
            nodes,
            version,
            self.reports.by_name(),
            pods,
            datetime.now(UTC),
            logs,
            self._marks[1],
        )

    def read(
        self,
        eng: engine.Engine,
        drivers: Mapping[str, Obj],
        newest: CompiledFleet,
        compiled_for: CompiledFor,
        ops: OperandContext | None = None,
    ) -> PassSnapshot:
        """Read what judging the pools of ``newest`` needs; ``drivers`` and ``ops`` were read
        by the caller (the controller reads them for other uses too)."""
        snap = self.informers()
        seen: dict[str, CompiledFleet | None] = {}
        members: dict[str, Sequence[Obj]] = {}
        plans: dict[tuple[str, str], engine.PoolPlan] = {}
        for cluster in newest.clusters.values():
            for pool in sorted(cluster.pools):
                commit = live_commit(drivers, newest, pool)
                if commit is None:
                    continue  # no objects yet (the machine adopts), or no commit on them
                if commit not in seen:
                    seen[commit] = compiled_for(commit)
                compiled = seen[commit]
                if compiled is None or not holds(compiled, pool):
                    continue
                found = self.members(compiled, pool, snap)
                members[pool] = found
                plans[(pool, compiled.commit)] = self._plan(
                    eng, compiled, pool, drivers, found, snap.nodes_version
                )
        known = {c: f for c, f in seen.items() if f is not None}
        return PassSnapshot(snap, drivers, known, members, plans, ops)

    def _plan(
        self,
        eng: engine.Engine,
        compiled: CompiledFleet,
        pool: str,
        drivers: Mapping[str, Obj],
        found: Sequence[Obj],
        nodes_version: int,
    ) -> engine.PoolPlan:
        """The pool's plan at ``compiled``; the last one while its inputs are the same (no
        node changed, its NVIDIADriver's spec and metadata as they were): an idle pass plans
        nothing."""
        live = drivers.get(str(compiled.pool(pool).driver["metadata"]["name"]))
        key = (compiled.commit, nodes_version, engine.live_key(live) if live else None)
        cached = self._plans.get(pool)
        if cached is not None and cached[0] == key:
            return cached[1]
        target = compiled.clusters[compiled.pool(pool).cluster]
        plan = eng.plan(
            target,
            engine.Selection(frozenset({pool}), False),
            compiled.commit,
            drivers=drivers,
            nodes=found,
        ).pools[0]
        self._plans[pool] = (key, plan)
        return plan

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
