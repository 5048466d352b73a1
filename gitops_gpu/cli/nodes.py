"""`gitops-gpu nodes`: each node's verdict on the component ladder (driver, toolkit, device
plugin, DCGM, GFD, MIG, validator, NVML), read like `plan`: a commit of the fleet repo
(``--repo``/``--rev``) against the cluster(s) its kubeconfig contexts reach.

Exit codes (cli/exits.py): 0 every selected node healthy, 1 otherwise, 2 usage/IO errors.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.cli import options, sync, verify_args
from gitops_gpu.cli.exits import Exit
from gitops_gpu.components import drift, evidence, ladder
from gitops_gpu.components.health import Health, Options, PoolHealth
from gitops_gpu.errors import FleetError, GitopsGpuError, SourceError
from gitops_gpu.fleet.compiled import CompiledFleet, PoolTarget
from gitops_gpu.observe import adopted_at
from gitops_gpu.sync import source


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    n = sub.add_parser("nodes", help="per-node health: the first failing component rung")
    options.fleet_source(n)
    options.kubeconfig(n, required=True)
    options.selection(n)
    options.output_format(n)
    options.operator_namespace(n)
    verify_args.add_arguments(n)
    n.set_defaults(func=_nodes)


def _selected(
    compiled: CompiledFleet, pool: str | None, stage: str | None
) -> list[tuple[str | None, PoolTarget]]:
    wanted = set(compiled.stage(stage).pools) if stage else None
    out = []
    for cluster in compiled.clusters.values():
        for target in cluster.pools.values():
            if (pool is None or target.name == pool) and (wanted is None or target.name in wanted):
                out.append((cluster.context, target))
    if pool is not None and not out:
        raise GitopsGpuError(
            f"nodes: no pool {pool!r} in the fleet repo",
            fix="pass --pool with a pool under nodepools/",
        )
    return out


def judge(
    client: kube.Client,
    pools: Sequence[PoolTarget],
    namespace: str = evidence.OPERATOR_NAMESPACE,
    since: Mapping[str, datetime | None] | None = None,
) -> list[tuple[PoolHealth, list[drift.NvmlDrift]]]:
    """Ladder verdict and NVML drift for each pool, read from one cluster; ``since``: per pool,
    when it adopted its commit (Xids before it do not count, as in the controller)."""
    found = evidence.read_evidence(client, pools, namespace=namespace)
    return [
        (
            ladder.judge_pool(p, found[p.name], Options(since=(since or {}).get(p.name))),
            drift.pool_drift(p, found[p.name]),
        )
        for p in pools
    ]


def _live_commit(driver: Mapping[str, Any] | None) -> str | None:
    annotations = ((driver or {}).get("metadata") or {}).get("annotations") or {}
    commit = annotations.get(names.COMMIT_ANNOTATION)
    return str(commit) if commit else None


def at_live_commits(
    args: argparse.Namespace,
    src: source.GitSource,
    sha: str,
    selected: Sequence[tuple[str | None, PoolTarget]],
    live: Mapping[str, str | None],
) -> tuple[list[tuple[str | None, PoolTarget]], list[str]]:
    """Each pool as the commit its live NVIDIADriver carries compiles it, as the controller
    judges it (not as the branch head does, which a later stage has not adopted yet); a commit
    the repo lacks (a checkout behind the cluster) is said and the head is used."""
    compiled: dict[str, CompiledFleet | None] = {}
    out, notes = [], []
    for ctx, target in selected:
        commit = live.get(target.name)
        if args.rev or not commit or commit == sha:
            out.append((ctx, target))
            continue
        if commit not in compiled:
            try:
                compiled[commit] = sync.compile_commit(args, src, commit)
            except (SourceError, FleetError):  # not fetched, or unloadable (TreeError too)
                compiled[commit] = None
        at = compiled[commit]
        if at is None or target.name not in {p for c in at.clusters.values() for p in c.pools}:
            notes.append(
                f"pool {target.name}: the cluster runs commit {commit[:12]}, which {args.repo} "
                f"does not have: judged at {sha[:12]} instead (fetch or pull the checkout)"
            )
            out.append((ctx, target))
        else:
            notes.append(
                f"pool {target.name}: judged at {commit[:12]}, the commit its NVIDIADriver "
                f"carries ({args.branch} is at {sha[:12]})"
            )
            out.append((ctx, at.pool(target.name)))
    return out, notes


def _nodes(args: argparse.Namespace) -> int:
    src, sha, _path, compiled = sync.load_source(args)
    selected = _selected(compiled, args.pool, args.stage)
    results: list[tuple[PoolHealth, list[drift.NvmlDrift]]] = []
    notes: list[str] = []
    for context in dict.fromkeys(ctx for ctx, _ in selected):
        client = kube.Client.from_kubeconfig(args.kubeconfig, context=context)
        try:
            mine = [(ctx, t) for ctx, t in selected if ctx == context]
            # One LIST, not a GET per pool (a pool's NVIDIADriver is named after it).
            listed = client.list(*names.NVIDIA_DRIVER_API).get("items") or []
            by_name = {str(d["metadata"]["name"]): d for d in listed}
            drivers = {t.name: by_name.get(t.name) for _, t in mine}
            live = {p: _live_commit(d) for p, d in drivers.items()}
            since = {p: adopted_at(d) if d else None for p, d in drivers.items()}
            judged, said = at_live_commits(args, src, sha, mine, live)
            notes += said
            pools = [t for _, t in judged]
            results.extend(judge(client, pools, args.operator_namespace, since))
        finally:
            client.close()
    if args.format == "json":
        print(json.dumps({**as_json(results), "notes": notes}, indent=2))
    else:
        print("\n".join([*notes, as_text(results)]))
    return Exit.OK if all(ph.health is Health.HEALTHY for ph, _ in results) else Exit.FAILED


def as_json(results: Sequence[tuple[PoolHealth, list[drift.NvmlDrift]]]) -> dict[str, Any]:
    return {
        "pools": [
            {
                "pool": ph.pool,
                "health": str(ph.health),
                "reason": ph.reason,
                "counts": {str(h): n for h, n in ph.counts.items()},
                "nodes": [
                    {
                        "node": nh.node,
                        "health": str(nh.health),
                        "reason": nh.reason,
                        "rungs": [
                            {
                                "component": r.component,
                                "health": str(r.health),
                                "reason": r.reason,
                                "skipped": r.skipped,
                            }
                            for r in nh.rungs
                        ],
                    }
                    for nh in ph.nodes
                ],
                "nvmlDrift": [d.as_dict() for d in drifts],
            }
            for ph, drifts in results
        ]
    }


def as_text(results: Sequence[tuple[PoolHealth, list[drift.NvmlDrift]]]) -> str:
    rows = [("POOL", "NODE", "HEALTH", "REASON")]
    rows += [(ph.pool, nh.node, str(nh.health), nh.reason) for ph, _ in results for nh in ph.nodes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
        for r in rows
    ]
    for ph, drifts in results:
        lines.append(f"pool {ph.reason} -> {ph.health}")
        lines.extend(f"  NVML drift: {d}" for d in drifts)
    return "\n".join(lines)
