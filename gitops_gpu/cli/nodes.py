"""`gitops-gpu nodes`: each node's verdict on the component ladder (driver, toolkit, device
plugin, DCGM, GFD, MIG, validator, NVML), read like `plan`: a commit of the fleet repo
(``--repo``/``--rev``) against the cluster(s) its kubeconfig contexts reach.

Exit codes (cli/exits.py): 0 every selected node healthy, 1 otherwise, 2 usage/IO errors.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from gitops_gpu import kube
from gitops_gpu.cli import options, sync, verify_args
from gitops_gpu.cli.exits import Exit
from gitops_gpu.components import drift, evidence, ladder
from gitops_gpu.components.health import Health, PoolHealth
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet.compiled import CompiledFleet, PoolTarget


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
    client: kube.Client, pools: Sequence[PoolTarget], namespace: str = evidence.OPERATOR_NAMESPACE
) -> list[tuple[PoolHealth, list[drift.NvmlDrift]]]:
    """Ladder verdict and NVML drift for each pool, read from one cluster."""
    found = evidence.read_evidence(client, pools, namespace=namespace)
    return [
        (ladder.judge_pool(p, found[p.name]), drift.pool_drift(p, found[p.name])) for p in pools
    ]


def _nodes(args: argparse.Namespace) -> int:
    _sha, _path, compiled = sync.load(args)
    selected = _selected(compiled, args.pool, args.stage)
    results: list[tuple[PoolHealth, list[drift.NvmlDrift]]] = []
    for context in dict.fromkeys(ctx for ctx, _ in selected):
        client = kube.Client.from_kubeconfig(args.kubeconfig, context=context)
        try:
            pools = [t for ctx, t in selected if ctx == context]
            results.extend(judge(client, pools, args.operator_namespace))
        finally:
            client.close()
    print(json.dumps(as_json(results), indent=2) if args.format == "json" else as_text(results))
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
