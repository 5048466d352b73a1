"""Which stage prunes a removed pool, and the guard against removing most of a cluster.

A pool removed from the fleet repo is pruned (its NVIDIADriver deleted, its node labels
removed) by the stage that held it, when that stage adopts the removing commit: after the
earlier stages passed the commit, and after the stage's approval when it has one. The stage
that held it is read from the pool's live NVIDIADriver (``gitops-gpu.io/stage``, written when
that stage applied it), so it is the stage of the commit the pool runs, not of the new commit.
When that stage no longer exists in the new commit (its last pool went with it), the cluster's
last stage prunes it: the latest point of the rollout, never earlier than before.

Pure: plain values in, plain values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet

Obj = Mapping[str, Any]


def held_by(live: Obj) -> str | None:
    """The stage annotation of a live object (the stage that applied it)."""
    return ((live.get("metadata") or {}).get("annotations") or {}).get(names.STAGE_ANNOTATION)


def cluster_stages(compiled: CompiledFleet, cluster: ClusterTarget) -> list[str]:
    """The stages holding pools of ``cluster``, in rollout order."""
    return [s.name for s in compiled.stages if set(s.pools) & set(cluster.pools)]


def pruning_stage(held: str | None, stages: list[str]) -> str | None:
    """The stage that prunes a removed pool the stage ``held`` held: that stage, or the
    cluster's last stage when it no longer holds pools of the cluster (or is unknown)."""
    if held in stages:
        return held
    return stages[-1] if stages else None


@dataclass(frozen=True)
class Removal:
    cluster: str
    removed: tuple[str, ...]  # pools with live objects the commit no longer has
    before: int  # pools with live objects before


def removals(cluster: ClusterTarget, live_pools: Iterable[str]) -> Removal:
    live = sorted(set(live_pools))
    gone = tuple(p for p in live if p not in cluster.pools)
    return Removal(cluster.name, gone, len(live))


def too_many(removed: int, before: int) -> bool:
    """More than half the pools of a cluster: needs ``allowMassPoolRemoval`` in fleet.yaml."""
    return before > 0 and removed * 2 > before


def refusal(cluster: ClusterTarget, live_pools: Iterable[str], allowed: bool) -> str | None:
    """Why the controller must not apply a commit that removes most of the cluster's pools
    (the same rule as GG041, against what the cluster runs rather than a base revision)."""
    found = removals(cluster, live_pools)
    if allowed or not too_many(len(found.removed), found.before):
        return None
    return (
        f"the commit removes {len(found.removed)} of the {found.before} pools running in "
        f"cluster '{cluster.name}' ({', '.join(found.removed)}) without allowMassPoolRemoval"
    )
