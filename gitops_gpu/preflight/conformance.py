"""CRD conformance of what a fleet repo compiles to, reported at the line a person edits.

The merged ClusterPolicy of every pool (base + the pool's file) is checked, so an error in the
base points at the base file and an error in a pool's overlay at that overlay; every compiled
NVIDIADriver is checked and its errors are mapped back to the ClusterPolicy field (or the
pool.yaml field) they were compiled from.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from gitops_gpu import names
from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import policy
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.fleet.yamlio import PathKey, dotted
from gitops_gpu.preflight import schema
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.preflight.schema import CrdSchema

# NVIDIADriver spec fields that come from pool.yaml rather than the ClusterPolicy.
_FROM_POOL_YAML: dict[str, PathKey] = {
    "nodeSelector": ("spec", "nodeSelector"),
    "driverType": ("spec", "driverType"),
}


def _need(crds: Mapping[tuple[str, str], CrdSchema], api: tuple[str, str]) -> CrdSchema:
    if api not in crds:
        raise FleetError(
            f"no CRD for {api[0]} {api[1]} in the CRD directory",
            fix="pass --crds with the GPU Operator's CRDs (config/crd/bases)",
        )
    return crds[api]


def cluster_policies(
    repo: FleetRepo, crds: Mapping[tuple[str, str], CrdSchema]
) -> Iterator[Finding]:
    """GG010 for each pool's merged ClusterPolicy."""
    crd = _need(crds, names.CLUSTER_POLICY_API)
    memo: schema.Memo = {}  # the views share the base's maps: each is judged once
    for pool in sorted(repo.pools):
        doc = repo.policy_view(pool)
        # the compiler renames the object; only the spec is the user's to get right
        named = {**doc, "metadata": {"name": names.CLUSTER_POLICY_NAME}}
        for issue in crd.validate(named, memo):
            file, line = fleet_compile.locate(repo, pool, issue.path)
            yield Finding.make(
                "GG010",
                issue.message,
                file=file,
                line=line,
                fix=issue.fix,
                field=dotted(issue.path),
                pool=pool,
            )


def drivers(
    repo: FleetRepo,
    compiled: CompiledFleet,
    crds: Mapping[tuple[str, str], CrdSchema],
    reported: Iterable[Finding] = (),
) -> Iterator[Finding]:
    """GG011 for each compiled NVIDIADriver, located at the field it was compiled from.

    ``reported``: GG010 findings already made; the same field is not reported twice.
    """
    crd = _need(crds, names.NVIDIA_DRIVER_API)
    seen = {(f.pool, f.field) for f in reported}
    for cluster in compiled.clusters.values():
        for name, target in sorted(cluster.pools.items()):
            for issue in crd.validate(dict(target.driver)):
                if (
                    len(issue.path) > 1
                    and (name, dotted(policy.policy_path(issue.path[1:]))) in seen
                ):
                    continue
                file, line = _driver_origin(repo, name, issue.path)
                yield Finding.make(
                    "GG011",
                    f"NVIDIADriver '{name}': {issue.message}",
                    file=file,
                    line=line,
                    fix=issue.fix,
                    field=dotted(issue.path),
                    pool=name,
                    cluster=cluster.name,
                )


def _driver_origin(repo: FleetRepo, pool: str, path: PathKey) -> tuple[str, int]:
    if (
        len(path) >= 2
        and path[0] == "spec"
        and isinstance(path[1], str)
        and path[1] in _FROM_POOL_YAML
    ):
        doc = repo.pools[pool].pool_doc
        return doc.file, doc.where((*_FROM_POOL_YAML[path[1]], *path[2:]))[0]
    if len(path) >= 2 and path[0] == "spec":
        return fleet_compile.locate(repo, pool, policy.policy_path(path[1:]))
    doc = repo.pools[pool].pool_doc
    return doc.file, doc.where(())[0]


def skipped_rules(crds: Mapping[tuple[str, str], CrdSchema]) -> Iterator[Finding]:
    """GG013 once per CEL rule the offline validator does not translate."""
    for api in (names.CLUSTER_POLICY_API, names.NVIDIA_DRIVER_API):
        crd = crds.get(api)
        for path, rule in crd.skipped_rules if crd else []:
            yield Finding.make(
                "GG013",
                f"{api[1]} CRD rule at {path or '<root>'} not checked offline: {rule}",
                file=crd.source if crd else "",
                fix="run with --kubeconfig to have the apiserver evaluate it",
            )
