"""GG042: operand DaemonSets that roll by themselves reach every pool of a cluster at once.

Compile sets the ClusterPolicy's ``daemonsets.updateStrategy: OnDelete`` so operand pods (toolkit,
device plugin, DCGM, DCGM exporter, GFD, MIG manager, validator, ...) move to a new revision only
when the controller deletes them, stage by stage (sync/operands.py). A fleet that sets
``RollingUpdate`` gets the operator's own rolling update instead: one cluster-wide roll when the
first stage adopts.
"""

from __future__ import annotations

from collections.abc import Iterator

from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight.findings import Finding

PATH = ("spec", "daemonsets", "updateStrategy")


def rolling_update(repo: FleetRepo, compiled: CompiledFleet) -> Iterator[Finding]:
    for cname, cluster in sorted(compiled.clusters.items()):
        daemonsets = cluster.cluster_policy["spec"].get("daemonsets")
        strategy = daemonsets.get("updateStrategy") if isinstance(daemonsets, dict) else None
        if strategy != "RollingUpdate":
            continue
        pool = sorted(cluster.pools)[0]
        file, line = fleet_compile.locate(repo, pool, PATH)
        yield Finding.make(
            "GG042",
            f"cluster '{cname}': daemonsets.updateStrategy is RollingUpdate: cluster-wide operand "
            "changes will reach every pool at once (the operator rolls the DaemonSets across all "
            "nodes when the first stage adopts)",
            file=file,
            line=line,
            cluster=cname,
            field="spec.daemonsets.updateStrategy",
            fix="remove it (gitops-gpu compiles OnDelete and moves operand pods stage by stage)",
        )
