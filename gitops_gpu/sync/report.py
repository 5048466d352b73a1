"""Render plans and apply results for people (text) and machines (JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gitops_gpu.sync.diff import FieldChange, NodeLabelDiff, ObjectDiff
from gitops_gpu.sync.engine import ApplyResult, ClusterPlan

MAX_VALUE = 60


def _short(value: Any) -> str:
    text = "<absent>" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."


def _changes(changes: Sequence[FieldChange], indent: str) -> list[str]:
    return [f"{indent}{c.path}: {_short(c.live)} -> {_short(c.desired)}" for c in changes]


def _object_line(obj: ObjectDiff) -> str:
    extra = f" ({len(obj.changes)} fields)" if obj.action.value == "configured" else ""
    if obj.stale_commit and not obj.drifted:
        extra = " (commit annotation moves)"
    return f"{obj.kind}/{obj.name} {obj.action.value}{extra}"


def plan_text(plan: ClusterPlan, *, show_fields: bool = True) -> str:
    lines = [
        f"cluster {plan.cluster} @ {plan.commit[:12]}: "
        + ("in sync" if plan.in_sync else "changes pending")
    ]
    for obj in plan.cluster_objects:
        lines.append(f"  {_object_line(obj)}")
        if show_fields and obj.drifted and obj.action.value != "created":
            lines += _changes(obj.changes, "      ")
    for pool in plan.pools:
        objs = ", ".join(_object_line(o) for o in pool.objects)
        state = "in sync" if pool.in_sync else "changes pending"
        lines.append(
            f"  pool {pool.pool}: {state}; {objs}; "
            f"{len(pool.nodes)}/{pool.node_count} nodes relabelled"
        )
        if show_fields:
            for obj in pool.objects:
                if obj.drifted and obj.action.value != "created":
                    lines += _changes(obj.changes, "      ")
            lines += _node_lines(pool.nodes)
    if plan.orphan_nodes:
        lines.append(
            f"  {len(plan.orphan_nodes)} nodes keep labels of pools they are no longer in:"
        )
        lines += _node_lines(plan.orphan_nodes)
    return "\n".join(lines)


def _node_lines(nodes: Sequence[NodeLabelDiff]) -> list[str]:
    out = []
    for node in nodes:
        out.append(f"      node {node.node}:")
        out += _changes(node.changes, "        ")
    return out


def plan_json(plan: ClusterPlan) -> dict[str, Any]:
    def obj(o: ObjectDiff) -> dict[str, Any]:
        return {
            "kind": o.kind,
            "name": o.name,
            "pool": o.pool,
            "action": o.action.value,
            "staleCommit": o.stale_commit,
            "changes": [{"path": c.path, "live": c.live, "desired": c.desired} for c in o.changes],
        }

    def node(n: NodeLabelDiff) -> dict[str, Any]:
        return {"node": n.node, "pool": n.pool, "set": dict(n.set), "remove": list(n.remove)}

    return {
        "cluster": plan.cluster,
        "commit": plan.commit,
        "inSync": plan.in_sync,
        "clusterObjects": [obj(o) for o in plan.cluster_objects],
        "pools": [
            {
                "pool": p.pool,
                "inSync": p.in_sync,
                "nodeCount": p.node_count,
                "objects": [obj(o) for o in p.objects],
                "nodes": [node(n) for n in p.nodes],
            }
            for p in plan.pools
        ],
        "orphanNodes": [node(n) for n in plan.orphan_nodes],
    }


def apply_text(cluster: str, result: ApplyResult) -> str:
    lines = [
        f"cluster {cluster}: {len(result.applied)} objects written, "
        f"{sum(len(b) for b in result.label_batches)} nodes relabelled in "
        f"{len(result.label_batches)} batches, {result.nodes_pending} nodes pending"
    ]
    lines += [f"  {o.kind}/{o.name} {o.action.value}" for o in result.applied]
    for obj, managers in result.conflicts:
        lines.append(
            f"  CONFLICT {obj.kind}/{obj.name}: fields owned by {', '.join(managers)}"
            " (re-run with --force-conflicts to take them over)"
        )
    return "\n".join(lines)
