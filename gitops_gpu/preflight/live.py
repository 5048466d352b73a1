"""Preflight against live clusters (``--kubeconfig``): read node labels, dry-run the objects.

Only reads and server-side dry-runs (``dryRun=All``): nothing is written. One client per
cluster, from the kubeconfig context that fleet.yaml names for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from gitops_gpu import names
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight.findings import Finding


class LiveClient(Protocol):
    def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str = ""
    ) -> dict[str, Any]: ...

    def apply(
        self,
        obj: Any,
        *,
        field_manager: str,
        force: bool = False,
        dry_run: bool = False,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...


ClientFactory = Callable[[str | None], LiveClient]  # kubeconfig context -> client


def kube_factory(kubeconfig: str) -> ClientFactory:
    def make(context: str | None) -> LiveClient:
        # lazy: importing the kubernetes client costs ~0.5 s that offline checks never need
        from gitops_gpu import kube  # noqa: PLC0415

        return kube.Client.from_kubeconfig(kubeconfig, context=context)

    return make


def read_nodes(
    compiled: CompiledFleet, clients: dict[str, LiveClient]
) -> dict[str, list[dict[str, Any]]]:
    """cluster -> its Node objects."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cname in compiled.clusters:
        items = clients[cname].list("v1", "Node").get("items") or []
        out[cname] = [dict(n) for n in items]
    return out


def _objects(cluster: ClusterTarget) -> Iterator[tuple[str, Any]]:
    yield "", cluster.cluster_policy
    for name in sorted(cluster.pools):
        yield name, cluster.pools[name].driver


def _file(repo: FleetRepo, pool: str, cluster: ClusterTarget) -> str:
    if pool:
        src = repo.pools[pool]
        return (src.policy_doc or src.pool_doc).file
    if repo.base_doc:
        return repo.base_doc.file
    first = repo.pools[sorted(cluster.pools)[0]]
    return (first.policy_doc or first.pool_doc).file


def dry_run(
    repo: FleetRepo, compiled: CompiledFleet, clients: dict[str, LiveClient]
) -> Iterator[Finding]:
    """GG012 for every object the apiserver refuses in a server-side dry-run apply."""
    for cname, cluster in sorted(compiled.clusters.items()):
        for pool, obj in _objects(cluster):
            kind, name = obj["kind"], obj["metadata"]["name"]
            try:
                clients[cname].apply(obj, field_manager=names.FIELD_MANAGER, dry_run=True)
            except KubeError as exc:
                yield Finding.make(
                    "GG012",
                    f"cluster '{cname}' refuses {kind}/{name} "
                    f"(server-side dry-run): {exc.args[0] if exc.args else exc}",
                    file=_file(repo, pool, cluster),
                    fix=exc.fix or "see the message",
                    pool=pool,
                    cluster=cname,
                )
