"""`gitops-gpu status` for a fleet of several clusters: every cluster read through its
kubeconfig context (fleet.yaml ``clusters[].context``), the cluster in every line, and the
per-cluster parts of a stage that spans clusters (rollout/span.py) under the stage's verdict.

A one-cluster fleet never comes here: its output stays what `status` always printed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.components.health import Health, PoolHealth
from gitops_gpu.controller import Controller
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.observe import Observer
from gitops_gpu.rollout import span
from gitops_gpu.rollout.gate import applied_commit
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.sync import engine
from gitops_gpu.sync.live import Informer, LiveReader


def observe_cluster(
    ctl: Controller, client: kube.Client, newest: CompiledFleet
) -> tuple[dict[str, PoolObservation], dict[str, PoolHealth]]:
    """What one cluster's pools run and how healthy they are, read through ``client``."""
    nodes = Informer(client, "v1", "Node")
    reports = Informer(client, *names.NODE_GPU_REPORT_API)
    pods = Informer(client, "v1", "Pod", namespace=ctl.cfg.operator_namespace)
    informers = (nodes, reports, pods)
    for inf in informers:
        inf.start()
    try:
        for inf in informers:
            inf.wait_synced()
        eng = engine.Engine(client, LiveReader(client, nodes))
        drivers = eng.reader.managed(*names.NVIDIA_DRIVER_API)
        return Observer(nodes, reports, pods).observe(eng, drivers, newest, ctl.compiled_for)
    finally:
        for inf in informers:
            inf.stop()


def status(ctl: Controller, newest: CompiledFleet, kubeconfig: str | None, fmt: str) -> int:
    pools: dict[str, PoolObservation] = {}
    health: dict[str, PoolHealth] = {}
    for cluster in newest.clusters.values():
        client = kube.Client.from_kubeconfig(kubeconfig, context=cluster.context)
        try:
            seen, healthy = observe_cluster(ctl, client, newest)
        finally:
            client.close()
        pools |= {p: o for p, o in seen.items() if p in cluster.pools}
        health |= {p: h for p, h in healthy.items() if p in cluster.pools}
    pool_clusters = {p: c.name for c in newest.clusters.values() for p in c.pools}
    out = [_stage(ctl, stage, pools, health, pool_clusters) for stage in newest.stages]
    if fmt == "json":
        print(json.dumps({"paused": ctl.paused(), "stages": out}, indent=2))
        return 0
    if ctl.paused():
        print("PAUSED (gitops-gpu resume to continue)")
    for e in out:
        where = f"clusters {','.join(e['clusters'])}"
        commit = (e["commit"] or "-")[:12]
        print(
            f"stage {e['stage']:12} {where:18} {commit:12} {e['state'] or '-':8} {e['description']}"
        )
        for part in e["parts"]:
            pc = (part["commit"] or "-")[:12]
            state = part["state"] or "-"
            print(f"  part  cluster {part['cluster']:10} {pc:12} {state:8} {part['description']}")
        for p in e["pools"]:
            line = (
                f"  pool {p['pool']:14} cluster {p['cluster']:10} {p['healthy']}/{p['total']} "
                f"nodes healthy ({p['health']})"
            )
            if p["firstFailure"]:
                line += f"; first failing: {p['firstFailure']}"
            print(line)
    return 0


def _stage(
    ctl: Controller,
    stage: Any,
    pools: Mapping[str, PoolObservation],
    health: Mapping[str, PoolHealth],
    pool_clusters: Mapping[str, str],
) -> dict[str, Any]:
    commit = applied_commit(stage, pools)
    verdict = ctl.backend.latest(commit, stage_context(stage.name)) if commit else None
    clusters = span.stage_clusters(stage, pool_clusters)
    parts = []
    if len(clusters) > 1:
        for cluster in clusters:
            part = span.local_part(stage, cluster, pool_clusters)
            at = applied_commit(part, pools) if part is not None else None
            st = ctl.backend.latest(at, span.cluster_context(stage.name, cluster)) if at else None
            parts.append(
                {
                    "cluster": cluster,
                    "commit": at,
                    "state": st.state if st else None,
                    "description": st.description if st else "",
                }
            )
    return {
        "stage": stage.name,
        "clusters": list(clusters),
        "commit": commit,
        "state": verdict.state if verdict else None,
        "description": verdict.description if verdict else "",
        "parts": parts,
        "pools": [_pool(p, health.get(p), pool_clusters[p]) for p in stage.pools],
    }


def _pool(pool: str, ph: PoolHealth | None, cluster: str) -> dict[str, Any]:
    failing = next((n for n in ph.nodes if n.health is not Health.HEALTHY), None) if ph else None
    return {
        "pool": pool,
        "cluster": cluster,
        "healthy": ph.count(Health.HEALTHY) if ph else 0,
        "total": ph.total if ph else 0,
        "health": str(ph.health) if ph else "Unknown",
        "firstFailure": f"{failing.node}: {failing.reason}" if failing else None,
    }
