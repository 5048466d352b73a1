"""Compile-rule checks (docs/compile-model.md) and pool settings that would silently do nothing.

Each function takes the loaded repo and/or the compiled fleet and returns findings that point
at the file and line a person has to edit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet import compile as fleet_compile
from gitops_gpu.fleet import lowering
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo, PoolSource
from gitops_gpu.fleet.policy import MISSING
from gitops_gpu.fleet.yamlio import dotted
from gitops_gpu.preflight.findings import Finding

# pool.yaml settings to use instead of a per-pool value of these cluster-scoped fields.
_POOL_ALTERNATIVE = {
    ("spec", "devicePlugin", "config", "default"): "spec.devicePluginConfig in pool.yaml",
    ("spec", "migManager", "config", "default"): "spec.migConfig in pool.yaml",
    ("spec", "sandboxWorkloads", "defaultWorkload"): "spec.workload in pool.yaml",
}
# Labels the GPU Operator, GFD or gitops-gpu write: selecting on them is circular.
_MANAGED_PREFIXES = (names.GROUP + "/", names.DEPLOY_LABEL_PREFIX)
_MANAGED_KEYS = {
    names.MIG_CONFIG_LABEL,
    names.MIG_CONFIG_STATE_LABEL,
    names.DEVICE_PLUGIN_CONFIG_LABEL,
    names.WORKLOAD_CONFIG_LABEL,
    names.UPGRADE_STATE_LABEL,
    names.DRIVER_OWNER_LABEL,
}


def _show(value: Any) -> str:
    return "<not set>" if value is MISSING else repr(value)


def _related(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """One path is the other or inside it."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def conflicts(repo: FleetRepo, found: Sequence[fleet_compile.Conflict]) -> Iterator[Finding]:
    """GG020: one finding per pool whose value differs from the first pool's."""
    for c in found:
        pools = sorted(c.values)
        ref = pools[0]
        alt = next((v for k, v in _POOL_ALTERNATIVE.items() if _related(k, c.path)), None)
        if alt is None and len(c.path) == 3 and c.path[0] == "spec" and c.path[2] == "enabled":
            alt = "spec.disabledComponents in pool.yaml (switch the component off per pool)"
        fix = "make it the same in every pool of the cluster, or move it to the base" + (
            f"; for a per-pool value use {alt}" if alt else ""
        )
        values = ", ".join(f"{p}: {_show(c.values[p])}" for p in pools)
        for pool in pools[1:]:
            if c.values[pool] == c.values[ref]:
                continue
            file, line = fleet_compile.locate(repo, pool, c.path)
            yield Finding.make(
                "GG020",
                f"cluster-scoped field {dotted(c.path)} differs between the pools of "
                f"cluster '{c.cluster}' ({values}); the cluster has one ClusterPolicy "
                f"({lowering.considered(c.path[1:])})",
                file=file,
                line=line,
                fix=fix,
                field=dotted(c.path),
                pool=pool,
                cluster=c.cluster,
            )


def _selector_where(repo: FleetRepo, pool: str) -> tuple[str, int]:
    doc = repo.pools[pool].pool_doc
    return doc.file, doc.where(("spec", "nodeSelector"))[0]


def nested_pairs(sels: Sequence[frozenset[tuple[str, str]]]) -> list[tuple[int, int]]:
    """Every (i, j), i < j, where one selector's label set holds the other's, in pair order.

    Not every pair: a pool is compared with the pools that carry its rarest label (all pools
    for an empty selector), so 2,000 pools with their own label each cost 2,000 look-ups."""
    index: dict[tuple[str, str], list[int]] = {}
    for i, sel in enumerate(sels):
        for item in sel:
            index.setdefault(item, []).append(i)
    found: set[tuple[int, int]] = set()
    for i, sel in enumerate(sels):
        near = min((index[item] for item in sel), key=len) if sel else range(len(sels))
        found.update((min(i, j), max(i, j)) for j in near if j != i and sel <= sels[j])
    return sorted(found)


def static_overlaps(repo: FleetRepo) -> Iterator[Finding]:
    """GG021: identical selectors, or one a subset of another, in the same cluster."""
    for cluster, pools in repo.cluster_pools().items():
        sels = {p: repo.pools[p].model.spec.node_selector for p in pools}
        for i, j in nested_pairs([frozenset(sels[p].items()) for p in pools]):
            a, b = pools[i], pools[j]
            sa, sb = sels[a].items(), sels[b].items()
            wider, narrower = (a, b) if sa <= sb else (b, a)
            what = (
                "the same node selector"
                if sa == sb
                else (f"a node selector that matches every node of '{narrower}'")
            )
            file, line = _selector_where(repo, wider)
            yield Finding.make(
                "GG021",
                f"pools '{wider}' and '{narrower}' of cluster '{cluster}': '{wider}' has "
                f"{what} ({dict(sels[wider])}); two NVIDIADrivers would claim the same nodes",
                file=file,
                line=line,
                pool=wider,
                cluster=cluster,
                field="spec.nodeSelector",
                fix=f"add a label to '{wider}'s selector that '{narrower}'s nodes do not carry",
            )


def matches(selector: Mapping[str, str], node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def live_overlaps(
    repo: FleetRepo, nodes: Mapping[str, Sequence[Mapping[str, Any]]]
) -> Iterator[Finding]:
    """GG022 for nodes matched by two pools, GG023 for pools that match no node."""
    for cluster, pools in repo.cluster_pools().items():
        if cluster not in nodes:
            continue
        owners: dict[str, list[str]] = {}
        for node in nodes[cluster]:
            name = str((node.get("metadata") or {}).get("name", "?"))
            owners[name] = [
                p for p in pools if matches(repo.pools[p].model.spec.node_selector, node)
            ]
        for pool in pools:
            if not any(pool in o for o in owners.values()):
                file, line = _selector_where(repo, pool)
                yield Finding.make(
                    "GG023",
                    f"pool '{pool}' matches no node of cluster '{cluster}'",
                    file=file,
                    line=line,
                    pool=pool,
                    cluster=cluster,
                    field="spec.nodeSelector",
                    fix="check the selector against `kubectl get nodes --show-labels`",
                )
        for node_name, owned in sorted(owners.items()):
            if len(owned) > 1:
                file, line = _selector_where(repo, owned[1])
                yield Finding.make(
                    "GG022",
                    f"node '{node_name}' of cluster '{cluster}' is matched by pools "
                    f"{', '.join(owned)}",
                    file=file,
                    line=line,
                    pool=owned[1],
                    cluster=cluster,
                    field="spec.nodeSelector",
                    fix="make the selectors disjoint (a node belongs to one pool)",
                )


def managed_selector_labels(repo: FleetRepo) -> Iterator[Finding]:
    """GG026: selecting on labels that gitops-gpu or the operator set is circular."""
    for name, src in sorted(repo.pools.items()):
        for key in src.model.spec.node_selector:
            if key in _MANAGED_KEYS or key.startswith(_MANAGED_PREFIXES):
                line = src.pool_doc.where(("spec", "nodeSelector", key))[0]
                yield Finding.make(
                    "GG026",
                    f"pool '{name}' selects nodes on '{key}', a label gitops-gpu or the GPU "
                    "Operator sets itself",
                    file=src.pool_doc.file,
                    line=line,
                    pool=name,
                    field=f"spec.nodeSelector.{key}",
                    fix="select on a label your provisioning sets (e.g. the cloud node-pool label)",
                )


def _get(doc: Mapping[str, Any], *path: str) -> Any:
    cur: Any = doc
    for p in path:
        if not isinstance(cur, Mapping) or p not in cur:
            return None
        cur = cur[p]
    return cur


def _no_effect(src: PoolSource, cluster: str, key: str, message: str, fix: str) -> Finding:
    doc = src.pool_doc
    return Finding.make(
        "GG027",
        message,
        file=doc.file,
        line=doc.where(("spec", key))[0],
        pool=src.name,
        cluster=cluster,
        field=f"spec.{key}",
        fix=fix,
    )


def no_effect(repo: FleetRepo, compiled: CompiledFleet) -> Iterator[Finding]:
    """GG027: a pool setting the cluster's ClusterPolicy makes a no-op."""
    for cluster in compiled.clusters.values():
        spec = cluster.cluster_policy["spec"]
        for name in sorted(cluster.pools):
            src = repo.pools[name]
            pool = src.model.spec
            mig_off = _get(spec, "migManager", "enabled") is False
            if pool.mig_config not in (None, "all-disabled") and (
                mig_off or "mig-manager" in pool.disabled_components
            ):
                yield _no_effect(
                    src,
                    cluster.name,
                    "migConfig",
                    f"pool '{name}' sets migConfig '{pool.mig_config}' but the MIG "
                    "manager is disabled for it",
                    "enable migManager or remove migConfig",
                )
            # devicePluginConfig with no ConfigMap to select from is GG082 (sharing_check.py)
            sandbox = _get(spec, "sandboxWorkloads", "enabled") is True
            if pool.workload not in (None, "container") and not sandbox:
                yield _no_effect(
                    src,
                    cluster.name,
                    "workload",
                    f"pool '{name}' sets workload '{pool.workload}' but "
                    "sandboxWorkloads.enabled is not true, so the operator ignores "
                    "the label",
                    "set sandboxWorkloads.enabled: true in the base ClusterPolicy",
                )
            yield from _budget_overridden(src, name, cluster.name)


def _budget_overridden(src: PoolSource, name: str, cluster: str) -> Iterator[Finding]:
    """pool.yaml's maxUnavailable wins over the pool's own upgradePolicy.maxUnavailable."""
    if "max_unavailable" not in src.model.spec.model_fields_set or src.policy_doc is None:
        return
    path = ("spec", "driver", "upgradePolicy", "maxUnavailable")
    written = _get(src.policy_doc.data, *path)
    if written is not None and written != src.model.spec.max_unavailable:
        yield Finding.make(
            "GG027",
            f"pool '{name}': driver.upgradePolicy.maxUnavailable {written!r} is replaced "
            f"by pool.yaml's maxUnavailable {src.model.spec.max_unavailable!r}",
            file=src.policy_doc.file,
            line=src.policy_doc.where(path)[0],
            pool=name,
            cluster=cluster,
            field="spec.driver.upgradePolicy.maxUnavailable",
            fix="set the budget in one place: pool.yaml's spec.maxUnavailable",
        )


def auto_upgrade_unset(repo: FleetRepo) -> Iterator[Finding]:
    """GG028: the CRDs default autoUpgrade differently (ClusterPolicy false, NVIDIADriver true)."""
    for name in sorted(repo.pools):
        doc = repo.policy_view(name)
        if _get(doc, "spec", "driver", "upgradePolicy", "autoUpgrade") is None:
            file, line = fleet_compile.locate(repo, name, ("spec", "driver", "upgradePolicy"))
            yield Finding.make(
                "GG028",
                f"pool '{name}': driver.upgradePolicy.autoUpgrade is not set; the "
                "ClusterPolicy CRD defaults it to false (upgrade controller off) while the "
                "NVIDIADriver CRD defaults it to true",
                file=file,
                line=line,
                pool=name,
                field="spec.driver.upgradePolicy.autoUpgrade",
                fix="set driver.upgradePolicy.autoUpgrade explicitly (true to let the operator "
                "roll driver pods node by node)",
            )
