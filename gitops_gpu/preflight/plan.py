"""The plan between two compiled commits: per stage and pool, which objects and node labels
change, field by field. Pure: two CompiledFleets in, a Plan value out.

A cluster-scoped change (the ClusterPolicy) hits every pool of the cluster at once; it is
listed under the first stage holding one of the cluster's pools, the stage that adopts the
commit first (docs/compile-model.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet
from gitops_gpu.fleet.render import node_label_doc
from gitops_gpu.fleet.yamlio import PathKey, dotted
from gitops_gpu.sync import prune

_ABSENT: Any = None


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any  # None when the field is new
    new: Any  # None when the field is removed
    parts: PathKey = ()  # the path as keys and indexes


@dataclass(frozen=True)
class ObjectChange:
    kind: str  # ClusterPolicy | NVIDIADriver | NodeLabels
    name: str
    action: str  # create | update | delete
    fields: tuple[FieldChange, ...] = ()


@dataclass(frozen=True)
class PoolChanges:
    pool: str
    cluster: str
    changes: tuple[ObjectChange, ...]
    pruned_by: str = ""  # a removed pool: the stage whose adoption prunes it (sync/prune.py)


@dataclass(frozen=True)
class StagePlan:
    stage: str
    cluster_changes: tuple[tuple[str, ObjectChange], ...]  # (cluster, ClusterPolicy change)
    pools: tuple[PoolChanges, ...]


@dataclass(frozen=True)
class Plan:
    base_commit: str
    head_commit: str
    stages: tuple[StagePlan, ...]
    removed: tuple[PoolChanges, ...]  # pools (and their NVIDIADrivers) gone at head

    @property
    def empty(self) -> bool:
        return not self.removed and all(not s.cluster_changes and not s.pools for s in self.stages)


def _strip(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest without the commit annotation, which differs on every commit."""
    out = {k: v for k, v in manifest.items()}
    meta = dict(out.get("metadata") or {})
    ann = {k: v for k, v in (meta.get("annotations") or {}).items() if k != names.COMMIT_ANNOTATION}
    meta["annotations"] = ann
    out["metadata"] = meta
    return out


def diff_fields(old: Any, new: Any, path: PathKey = ()) -> list[FieldChange]:
    """Field-level differences; maps recurse, lists and scalars compare whole."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: list[FieldChange] = []
        for key in sorted(set(old) | set(new), key=str):
            out.extend(diff_fields(old.get(key, _ABSENT), new.get(key, _ABSENT), (*path, key)))
        return out
    return [] if old == new else [FieldChange(dotted(path), old, new, path)]


def _object(
    kind: str, name: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
) -> ObjectChange | None:
    if old is None and new is None:
        return None
    if old is None:
        return ObjectChange(kind, name, "create", tuple(diff_fields({}, new)))
    if new is None:
        return ObjectChange(kind, name, "delete", tuple(diff_fields(old, {})))
    fields = diff_fields(old, new)
    return ObjectChange(kind, name, "update", tuple(fields)) if fields else None


def _pool_changes(
    name: str, old: ClusterTarget | None, new: ClusterTarget | None
) -> tuple[ObjectChange, ...]:
    op = old.pools.get(name) if old else None
    np = new.pools.get(name) if new else None
    changes = [
        _object(
            "NVIDIADriver",
            name,
            _strip(op.driver) if op else None,
            _strip(np.driver) if np else None,
        ),
        _object(
            "NodeLabels",
            name,
            node_label_doc(op)["labels"] if op else None,
            node_label_doc(np)["labels"] if np else None,
        ),
    ]
    return tuple(c for c in changes if c is not None)


def make_plan(base: CompiledFleet | None, head: CompiledFleet) -> Plan:
    """What moving from ``base`` (None: nothing deployed) to ``head`` changes."""
    stages: list[StagePlan] = []
    claimed: set[str] = set()
    for stage in head.stages:
        cluster_changes: list[tuple[str, ObjectChange]] = []
        pools: list[PoolChanges] = []
        for pool in stage.pools:
            target = head.pool(pool)
            cname = target.cluster
            old_cluster = base.clusters.get(cname) if base else None
            new_cluster = head.clusters[cname]
            if cname not in claimed:
                claimed.add(cname)
                cp = _object(
                    "ClusterPolicy",
                    names.CLUSTER_POLICY_NAME,
                    _strip(old_cluster.cluster_policy) if old_cluster else None,
                    _strip(new_cluster.cluster_policy),
                )
                if cp:
                    cluster_changes.append((cname, cp))
            changes = _pool_changes(pool, old_cluster, new_cluster)
            if changes:
                pools.append(PoolChanges(pool, cname, changes))
        stages.append(StagePlan(stage.name, tuple(cluster_changes), tuple(pools)))
    removed: list[PoolChanges] = []
    for cname, was in sorted((base.clusters if base else {}).items()):
        now = head.clusters.get(cname)
        for pool in sorted(was.pools):
            if now is None or pool not in now.pools:
                order = prune.cluster_stages(head, now) if now is not None else []
                by = prune.pruning_stage(was.pools[pool].stage, order) or was.pools[pool].stage
                removed.append(PoolChanges(pool, cname, _pool_changes(pool, was, None), by))
    return Plan(base.commit if base else "", head.commit, tuple(stages), tuple(removed))


def _change_lines(change: ObjectChange, indent: str) -> list[str]:
    lines = [f"{indent}{change.action} {change.kind}/{change.name}"]
    for f in change.fields:
        if f.old is None:
            lines.append(f"{indent}  + {f.path}: {f.new!r}")
        elif f.new is None:
            lines.append(f"{indent}  - {f.path}: {f.old!r}")
        else:
            lines.append(f"{indent}  ~ {f.path}: {f.old!r} -> {f.new!r}")
    return lines


def _short_sha(commit: str) -> str:
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def plan_text(plan: Plan) -> str:
    head = f"plan {_short_sha(plan.base_commit) or '(nothing)'} -> {_short_sha(plan.head_commit)}"
    if plan.empty:
        return head + ": no changes\n"
    lines = [head]
    for stage in plan.stages:
        if not stage.cluster_changes and not stage.pools:
            continue
        lines.append(f"stage {stage.stage}:")
        for cname, change in stage.cluster_changes:
            lines.append(f"  cluster {cname} (all its pools at once):")
            lines.extend(_change_lines(change, "    "))
        for pool in stage.pools:
            lines.append(f"  pool {pool.pool} (cluster {pool.cluster}):")
            for change in pool.changes:
                lines.extend(_change_lines(change, "    "))
    for pool in plan.removed:
        lines.append(
            f"removed pool {pool.pool} (cluster {pool.cluster}, pruned when stage "
            f"{pool.pruned_by} adopts):"
        )
        for change in pool.changes:
            lines.extend(_change_lines(change, "    "))
    return "\n".join(lines) + "\n"


def _change_json(change: ObjectChange) -> dict[str, Any]:
    return {
        "kind": change.kind,
        "name": change.name,
        "action": change.action,
        "fields": [{"path": f.path, "old": f.old, "new": f.new} for f in change.fields],
    }


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "base": plan.base_commit,
        "head": plan.head_commit,
        "stages": [
            {
                "stage": s.stage,
                "cluster": [{"cluster": c, **_change_json(ch)} for c, ch in s.cluster_changes],
                "pools": [
                    {
                        "pool": p.pool,
                        "cluster": p.cluster,
                        "changes": [_change_json(c) for c in p.changes],
                    }
                    for p in s.pools
                ],
            }
            for s in plan.stages
        ],
        "removed": [
            {
                "pool": p.pool,
                "cluster": p.cluster,
                "prunedBy": p.pruned_by,
                "changes": [_change_json(c) for c in p.changes],
            }
            for p in plan.removed
        ],
    }
