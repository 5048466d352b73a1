"""Preflight against live clusters (``--kubeconfig``): read node labels, dry-run the objects.

Only reads and server-side dry-runs (``dryRun=All``): nothing is written. One client per
cluster, from the kubeconfig context that fleet.yaml names for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gitops_gpu import names
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.preflight import disruption
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


def missing_contexts(repo: FleetRepo, kubeconfig: str) -> list[Finding]:
    """GG004 for every spec.clusters[].context the kubeconfig does not define (file:line of the
    context in fleet.yaml): a typo must not read or dry-run against the current context."""
    try:
        text = Path(kubeconfig).read_text()
        doc: Any = YAML(typ="safe").load(text) or {}
    except (OSError, YAMLError) as exc:
        return [
            Finding.make(
                "GG004",
                f"cannot read kubeconfig {kubeconfig}: {exc}",
                fix="pass a readable kubeconfig with --kubeconfig",
            )
        ]
    known = {str(c.get("name")) for c in doc.get("contexts") or [] if isinstance(c, dict)}
    out = []
    for i, ref in enumerate(repo.fleet.cluster_refs()):
        if ref.context is None or ref.context in known:
            continue
        line, _col = repo.fleet_doc.where(("spec", "clusters", i, "context"))
        out.append(
            Finding.make(
                "GG004",
                f"cluster '{ref.name}' uses kubeconfig context '{ref.context}', which "
                f"{kubeconfig} does not define (it has: {', '.join(sorted(known)) or 'none'})",
                file=repo.fleet_doc.file,
                line=line,
                field=f"spec.clusters[{i}].context",
                cluster=ref.name,
                fix="fix the context name in fleet.yaml or add the context to the kubeconfig",
            )
        )
    return out


def read_nodes(
    compiled: CompiledFleet, clients: dict[str, LiveClient]
) -> dict[str, list[dict[str, Any]]]:
    """cluster -> its Node objects."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cname in compiled.clusters:
        items = clients[cname].list("v1", "Node").get("items") or []
        out[cname] = [dict(n) for n in items]
    return out


def inventory(
    head: CompiledFleet,
    base: CompiledFleet | None,
    nodes: Mapping[str, Sequence[Mapping[str, Any]]],
    clients: Mapping[str, LiveClient],
) -> disruption.Inventory:
    """Each pool's nodes, their pods and the PDBs, for the disruption plan: one LIST of pods
    and one of PDBs per cluster (a CLI run, not the controller's pass)."""
    parts = []
    for cname, client in sorted(clients.items()):
        pools = {
            **(base.clusters[cname].pools if base and cname in base.clusters else {}),
            **(head.clusters[cname].pools if cname in head.clusters else {}),
        }
        pods = client.list("v1", "Pod").get("items") or []
        pdbs = client.list("policy/v1", "PodDisruptionBudget").get("items") or []
        parts.append(disruption.inventory(pools, nodes.get(cname, ()), pods, pdbs))
    return disruption.merged(parts)


def _objects(cluster: ClusterTarget) -> Iterator[tuple[str, Any]]:
    yield from (("", cm) for cm in cluster.config_maps)
    yield "", cluster.cluster_policy
    for name in sorted(cluster.pools):
        yield name, cluster.pools[name].driver


def file_of(repo: FleetRepo, pool: str, cluster: ClusterTarget) -> str:
    """The file that holds what ``pool`` (or, for "", the cluster's shared objects) sets."""
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
                    file=file_of(repo, pool, cluster),
                    fix=exc.fix or "see the message",
                    pool=pool,
                    cluster=cname,
                )
