"""The cluster's GPU Operator CRDs against what the fleet applies and the release it runs.

Read with ``check --kubeconfig`` (and ``plan``), upgrade or not:

- GG094: a compiled ClusterPolicy or NVIDIADriver sets a field the live CRD lacks (the CRDs
  were not upgraded with the operator): a server-side apply of it is refused ("field not
  declared in schema", seen on a real apiserver), a client-side one prunes the field silently;
- GG093: the release's CRD no longer lists a version the cluster stores objects in (the
  apiserver refuses that CRD update: migrate the objects first);
- GG095: the live CRD lacks fields the release's CRD has (``gpuOperator``), or the CRDs
  preflight checks against (``--crds``): the CRDs are older than the operator.

The running operator's version comes from its Deployment's image tag when there is one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gitops_gpu import names
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight import compat, crd_change, crd_source
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.preflight.live import LiveClient, file_of
from gitops_gpu.preflight.operator_release import Release
from gitops_gpu.preflight.schema import CrdSchema

CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
SHOWN = 6  # fields named in one finding
FIX_CRDS_FIRST = (
    "apply the release's CRDs before the operator, as NVIDIA's upgrade guide says (Helm never "
    "upgrades CRDs): kubectl apply --server-side -f <chart>/crds/"
)


def _by_api(crds: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(group/version, kind) -> the version's openAPIV3Schema, over ``crds``."""
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        for version, schema in crd_change.versions(crd).items():
            out[(f"{spec.get('group')}/{version}", str((spec.get("names") or {}).get("kind")))] = (
                schema
            )
    return out


def _shown(paths: Sequence[str]) -> str:
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return ", ".join(paths[:SHOWN]) + more


def running_version(client: LiveClient, namespace: str) -> str | None:
    """The operator release its Deployment runs (the image tag), if it runs as one."""
    try:
        items = client.list("apps/v1", "Deployment", namespace=namespace).get("items") or []
    except GitopsGpuError:
        return None
    for dep in items:
        if (dep.get("metadata") or {}).get("name") != names.OPERATOR_DEPLOYMENT:
            continue
        containers = dep["spec"]["template"]["spec"].get("containers") or []
        image = str(containers[0].get("image", "")) if containers else ""
        last = image.rsplit("/", 1)[-1]
        return last.rsplit(":", 1)[1] if ":" in last else None
    return None


def check(
    repo: FleetRepo,
    compiled: CompiledFleet,
    clients: Mapping[str, LiveClient],
    releases: Mapping[str, Release],
    reference: Mapping[tuple[str, str], CrdSchema],
) -> Iterator[Finding]:
    namespaces = {c.name: c.operator_namespace for c in repo.fleet.cluster_refs()}
    for cname, client in sorted(clients.items()):
        if cname not in compiled.clusters:
            continue
        try:
            items = client.list(*CRD_API).get("items") or []
        except GitopsGpuError:
            continue  # no CRDs to read (the dry-run says why)
        live = {str(c["metadata"]["name"]): c for c in items}
        running = running_version(client, namespaces.get(cname, "gpu-operator"))
        yield from _pruned(repo, compiled, cname, _by_api(list(live.values())))
        at = compat.operator_version_where(repo, cname)
        release = releases.get(cname)
        if release is not None:
            yield from _against_release(cname, at, live, release, running)
        else:
            yield from _against_reference(cname, at, live, reference, running)


def _pruned(
    repo: FleetRepo,
    compiled: CompiledFleet,
    cname: str,
    live: Mapping[tuple[str, str], Mapping[str, Any]],
) -> Iterator[Finding]:
    cluster = compiled.clusters[cname]
    objects = [("", cluster.cluster_policy)] + [
        (name, cluster.pools[name].driver) for name in sorted(cluster.pools)
    ]
    for pool, obj in objects:
        schema = live.get((str(obj["apiVersion"]), str(obj["kind"])))
        if schema is None:
            continue  # no such CRD at all: the dry-run reports it
        paths = [crd_change.dotted(p) for p in crd_change.pruned(schema, obj)]
        if not paths:
            continue
        yield Finding.make(
            "GG094",
            f"cluster '{cname}': its {obj['kind']} CRD has no {_shown(paths)}: the apiserver "
            f"refuses a server-side apply of {obj['kind']}/{obj['metadata']['name']} ('field "
            "not declared in schema'), and a client-side apply (kubectl, Helm) drops "
            f"{'it' if len(paths) == 1 else 'them'} silently",
            file=file_of(repo, pool, cluster),
            pool=pool,
            cluster=cname,
            field=paths[0],
            fix=FIX_CRDS_FIRST,
        )


def _running(running: str | None) -> str:
    return f"the operator running is {running}" if running else "no operator Deployment found"


def _against_release(
    cname: str,
    at: tuple[str, int],
    live: Mapping[str, Mapping[str, Any]],
    release: Release,
    running: str | None,
) -> Iterator[Finding]:
    for target in release.crds:
        name = str(target["metadata"]["name"])
        have = live.get(name)
        if have is None:
            continue  # a CRD the release adds: created first
        dropped = crd_change.dropped_stored_versions(have, target)
        if dropped:
            yield Finding.make(
                "GG093",
                f"cluster '{cname}': CRD {name} of release {release.version} drops version "
                f"{', '.join(dropped)}, which the cluster stores objects in: the apiserver "
                "refuses that CRD",
                file=at[0],
                line=at[1],
                cluster=cname,
                field="gpuOperator.version",
                fix="migrate the stored objects to a version the release serves (and "
                "status.storedVersions with them), or upgrade through a release that serves both",
            )
        targets = crd_change.versions(target)
        yield from _stale(cname, at, name, have, targets, f"the release {release.version}", running)


def _against_reference(
    cname: str,
    at: tuple[str, int],
    live: Mapping[str, Mapping[str, Any]],
    reference: Mapping[tuple[str, str], CrdSchema],
    running: str | None,
) -> Iterator[Finding]:
    for name in crd_source.OPERATOR_CRDS:
        have = live.get(name)
        if have is None:
            continue
        spec = have.get("spec") or {}
        kind = str((spec.get("names") or {}).get("kind"))
        target = {
            v: ref.schema
            for v in crd_change.versions(have)
            if (ref := reference.get((f"{spec.get('group')}/{v}", kind))) is not None
        }
        yield from _stale(
            cname, at, name, have, target, "the CRDs preflight checks against", running
        )


def _stale(
    cname: str,
    at: tuple[str, int],
    name: str,
    have: Mapping[str, Any],
    target: Mapping[str, Mapping[str, Any]],
    than: str,
    running: str | None,
) -> Iterator[Finding]:
    live_versions = crd_change.versions(have)
    paths = sorted(
        {
            f"{v}: {p}"
            for v, schema in target.items()
            if v in live_versions
            for p in crd_change.missing(live_versions[v], schema)
        }
    )
    if not paths:
        return
    yield Finding.make(
        "GG095",
        f"cluster '{cname}': CRD {name} is older than {than} "
        f"({_running(running)}): it lacks {_shown(paths)}; a field set there is pruned",
        file=at[0],
        line=at[1],
        cluster=cname,
        field=name,
        fix=FIX_CRDS_FIRST,
    )
