"""The disruption plan for people (text, and a one-line summary for commit statuses and pull
requests) and for tools (JSON)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gitops_gpu.components.holders import Holder, age
from gitops_gpu.preflight.disruption import Disruption, Effect, PoolDisruption

NONE = "no disruption: no node is cordoned, drained or restarted and no pod is restarted"
SHOWN_NODES = 5
SHOWN_WORKLOADS = 5


def _count(d: Disruption, hit: Callable[[Effect], bool]) -> str:
    pools = [p for p in d.pools if any(hit(e) for e in p.effects)]
    if not pools:
        return ""
    if all(p.nodes is not None for p in pools):
        n = sum(len(p.nodes or ()) for p in pools)
        return f"{n} node{'s' if n != 1 else ''}"
    return f"every node of {len(pools)} pool{'s' if len(pools) != 1 else ''}"


def summary(d: Disruption) -> str:
    """One line: "drains 16 nodes, ..." or "no disruption: ..."."""
    if d.none:
        return NONE
    parts = []
    for verb, hit in (
        ("drains", lambda e: e.drains),
        ("cordons", lambda e: e.cordons),
        ("stops GPU pods on", lambda e: e.stops_gpu_pods),
        ("reconfigures MIG on", lambda e: e.kind == "mig-reconfig"),
        ("restarts operand pods on", lambda e: e.kind == "operand-restart"),
        ("switches device-plugin config on", lambda e: e.kind == "device-plugin-config"),
        ("installs the driver on", lambda e: e.kind == "driver-install"),
    ):
        if counted := _count(d, hit):
            parts.append(f"{verb} {counted}")
    pods = sum(len(p.workloads) for p in d.pools)
    if pods:
        parts.append(f"{pods} GPU pod{'s' if pods != 1 else ''} running there now")
    if d.cluster_wide:
        parts.append(f"{len(d.cluster_wide)} cluster-wide change(s) not staged")
    return ", ".join(parts) or "no node disruption (see the cluster-wide changes)"


def _nodes(p: PoolDisruption) -> str:
    if p.nodes is None:
        return ""
    shown = ", ".join(p.nodes[:SHOWN_NODES])
    more = f" +{len(p.nodes) - SHOWN_NODES}" if len(p.nodes) > SHOWN_NODES else ""
    word = "node" if len(p.nodes) == 1 else "nodes"
    return f" ({len(p.nodes)} {word}{': ' + shown + more if p.nodes else ''})"


def _workloads(items: tuple[Holder, ...]) -> list[str]:
    if not items:
        return []
    byns: dict[str, int] = {}
    for h in items:
        ns = h.pod.split("/", 1)[0]
        byns[ns] = byns.get(ns, 0) + 1
    lines = [
        f"      GPU workloads there now: {len(items)} pods ("
        + ", ".join(f"{ns}: {n}" for ns, n in sorted(byns.items()))
        + ")"
    ]
    blocked = [h for h in items if h.pdbs]
    for h in blocked[:SHOWN_WORKLOADS]:
        lines.append(f"      blocked: {h}")
    if len(blocked) > SHOWN_WORKLOADS:
        lines.append(f"      blocked: {len(blocked) - SHOWN_WORKLOADS} more pods")
    return lines


def _same(p: PoolDisruption) -> tuple[object, ...] | None:
    """What pools share to be said once; None: said on its own (it has workloads to name)."""
    if p.workloads:
        return None
    return tuple((e.kind, e.text, e.cause, e.batch) for e in p.effects)


def _grouped(pools: tuple[PoolDisruption, ...]) -> list[tuple[PoolDisruption, list[str]]]:
    """Pools with the same effects, said once (a 125-pool bump reads as one line per kind of
    pool, not 125 blocks): (the first, every name)."""
    out: list[tuple[PoolDisruption, list[str]]] = []
    index: dict[tuple[object, ...], int] = {}
    for p in pools:
        key = _same(p)
        if key is not None and key in index:
            out[index[key]][1].append(p.pool)
            continue
        if key is not None:
            index[key] = len(out)
        out.append((p, [p.pool]))
    return out


def _group_head(first: PoolDisruption, names: list[str], all_: tuple[PoolDisruption, ...]) -> str:
    if len(names) == 1:
        return f"  pool {first.pool}{_nodes(first)}"
    shown = ", ".join(names[:SHOWN_NODES])
    more = f" +{len(names) - SHOWN_NODES}" if len(names) > SHOWN_NODES else ""
    members = [p for p in all_ if p.pool in set(names)]
    counted = ""
    if all(p.nodes is not None for p in members):
        counted = f", {sum(len(p.nodes or ()) for p in members)} nodes"
    return f"  {len(names)} pools ({shown}{more}{counted})"


def _pool_lines(p: PoolDisruption, head: str = "") -> list[str]:
    head = head or f"  pool {p.pool}{_nodes(p)}"
    if not p.disrupts:
        reasons = "; ".join(e.text for e in p.effects)
        return [f"{head}: no disruption" + (f" ({reasons})" if reasons else "")]
    lines = [head + ":"]
    for e in p.effects:
        batch = f" [{e.batch} at a time]" if e.kind != "none" else ""
        lines.append(f"    - {e.text}{batch}")
        if e.cause:
            lines.append(f"      because: {', '.join(e.cause)}")
    lines.extend(_workloads(p.workloads))
    if p.estimate_seconds:
        lines.append(f"      about {age(p.estimate_seconds)} of node work")
    return lines


def disruption_text(d: Disruption) -> str:
    lines = [f"disruption: {summary(d)}"]
    for wide in d.cluster_wide:
        lines.append(f"  cluster-wide, not staged: {wide}")
    for unknown in d.unknown:
        lines.append(
            f"  unknown to gitops-gpu's operator tables, assumed to restart every operand: "
            f"{unknown}"
        )
    for stage in d.stages:
        if not stage.pools:
            continue
        extra = [f"~{age(stage.estimate_seconds)}"] if stage.estimate_seconds else []
        extra += list(stage.waits)
        lines.append(f"stage {stage.stage}" + (f" ({'; '.join(extra)})" if extra else "") + ":")
        for first, names in _grouped(stage.pools):
            lines.extend(_pool_lines(first, _group_head(first, names, stage.pools)))
    for p in d.removed:
        lines.append(f"removed pool {p.pool}:")
        lines.extend(_pool_lines(p)[1:] if p.disrupts else ["  no disruption"])
    return "\n".join(lines) + "\n"


def _effect_json(e: Effect) -> dict[str, Any]:
    return {
        "kind": e.kind,
        "text": e.text,
        "cause": list(e.cause),
        "cordons": e.cordons,
        "stopsGpuPods": e.stops_gpu_pods,
        "drains": e.drains,
        "batch": e.batch,
    }


def _pool_json(p: PoolDisruption) -> dict[str, Any]:
    return {
        "pool": p.pool,
        "cluster": p.cluster,
        "disrupts": p.disrupts,
        "effects": [_effect_json(e) for e in p.effects],
        "nodes": list(p.nodes) if p.nodes is not None else None,
        "workloads": [{"pod": h.pod, "owner": h.owner, "pdbs": list(h.pdbs)} for h in p.workloads],
        "estimateSeconds": p.estimate_seconds,
    }


def disruption_json(d: Disruption) -> dict[str, Any]:
    return {
        "summary": summary(d),
        "none": d.none,
        "clusterWide": list(d.cluster_wide),
        "unknown": list(d.unknown),
        "stages": [
            {
                "stage": s.stage,
                "waits": list(s.waits),
                "estimateSeconds": s.estimate_seconds,
                "pools": [_pool_json(p) for p in s.pools],
            }
            for s in d.stages
        ],
        "removed": [_pool_json(p) for p in d.removed],
    }
