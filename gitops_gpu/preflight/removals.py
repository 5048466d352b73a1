"""GG029 and GG041: pools removed since the base revision.

A removed pool is pruned (its NVIDIADriver deleted, its node labels removed) only when the stage
that held it in the base revision adopts the commit (sync/prune.py), so the warning names that
stage and how many nodes lose their GPU Operator configuration then. Removing more than half
the pools of a cluster in one commit is usually a mistake (a bad merge, a moved folder) and
needs ``allowMassPoolRemoval: true`` in fleet.yaml.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.sync import prune

Nodes = Mapping[str, Sequence[Mapping[str, Any]]]


def _count(selector: Mapping[str, str], nodes: Sequence[Mapping[str, Any]]) -> int:
    return sum(
        1
        for n in nodes
        if all(
            ((n.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in selector.items()
        )
    )


def removed_pools(
    repo: FleetRepo, base: CompiledFleet, head: CompiledFleet, nodes: Nodes
) -> Iterator[Finding]:
    fleet_file = repo.fleet_doc.file
    line = repo.fleet_doc.where(("spec", "stages"))[0]
    allowed = repo.fleet.spec.allow_mass_pool_removal
    for cname, old in sorted(base.clusters.items()):
        new = head.clusters.get(cname)
        gone = sorted(p for p in old.pools if new is None or p not in new.pools)
        if not gone:
            continue
        stages = prune.cluster_stages(head, new) if new is not None else []
        for pool in gone:
            target = old.pools[pool]
            held = target.stage
            by = prune.pruning_stage(held, stages) or held
            if cname in nodes:
                count = _count(target.node_selector, nodes[cname])
                many = f"{count} node{'s' if count != 1 else ''}"
            else:
                many = "its nodes (count them with --kubeconfig)"
            when = (
                f"stage '{by}' adopts the commit"
                if by == held
                else f"stage '{by}' (the cluster's last; '{held}' no longer holds pools) adopts "
                "the commit"
            )
            yield Finding.make(
                "GG029",
                f"pool '{pool}' (stage '{held}', cluster '{cname}') is removed: its NVIDIADriver "
                f"is deleted and {many} lose their GPU Operator labels when {when}",
                file=fleet_file,
                line=line,
                pool=pool,
                cluster=cname,
                fix="keep the pool if its nodes should keep their driver configuration",
            )
        if prune.too_many(len(gone), len(old.pools)) and not allowed:
            yield Finding.make(
                "GG041",
                f"the commit removes {len(gone)} of the {len(old.pools)} pools of cluster "
                f"'{cname}' ({', '.join(gone)})",
                file=fleet_file,
                line=line,
                cluster=cname,
                field="spec.allowMassPoolRemoval",
                fix="if that is meant, set spec.allowMassPoolRemoval: true in fleet.yaml for this "
                "commit (and remove it again afterwards)",
            )
