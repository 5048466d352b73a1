"""Which ClusterPolicy fields are per pool and how they become an NVIDIADriver spec.

docs/compile-model.md: the driver (version, image, repository, kernelModuleType,
usePrecompiled, upgradePolicy, rdma, manager, ...), GDS and GDRCopy are realised per pool as an
NVIDIADriver; everything else is cluster-scoped and must agree across the pools of a cluster.

Two details come from the operator's own code rather than the table:
- ``driver.enabled`` and ``driver.useNvidiaDriverCRD`` switch the driver state for the whole
  cluster, so they stay cluster-scoped (the latter is forced to true on compile).
- the upgrade controller reads ``driver.upgradePolicy`` from the ClusterPolicy even with
  NVIDIADriver CRs (controllers/upgrade_controller.go), so ``upgradePolicy.autoUpgrade`` must
  agree across pools and the ClusterPolicy carries the upgrade settings all pools agree on.
The field renames follow the operator's Helm chart (templates/nvidiadriver.yaml), which maps
the same ClusterPolicy-shaped values onto an NVIDIADriver.
"""

from __future__ import annotations

from typing import Any

from gitops_gpu.fleet import plain
from gitops_gpu.fleet.yamlio import PathKey

DRIVER_CLUSTER_KEYS = ("enabled", "useNvidiaDriverCRD")
POOL_SPEC_KEYS = ("gds", "gdrcopy")  # top-level ClusterPolicy spec keys owned by the pool
# ClusterPolicy spec.daemonsets fields the Helm chart copies into the NVIDIADriver.
DAEMONSET_KEYS = ("annotations", "labels", "tolerations", "priorityClassName", "podSecurityContext")
# (ClusterPolicy spec.driver path) -> (NVIDIADriver spec path)
RENAMES: tuple[tuple[PathKey, PathKey], ...] = (
    (("repoConfig", "configMapName"), ("repoConfig", "name")),
    (("licensingConfig", "configMapName"), ("licensingConfig", "name")),
    (("virtualTopology", "config"), ("virtualTopologyConfig", "name")),
    (("virtualTopology",), ("virtualTopologyConfig",)),
)
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<absent>"})()


def cluster_part(doc: dict[str, Any]) -> dict[str, Any]:
    """The cluster-scoped part of a merged ClusterPolicy document (what must agree). It shares
    maps with ``doc``: read it, copy before changing it."""
    meta = doc.get("metadata") or {}
    spec = dict(doc.get("spec") or {})
    for key in POOL_SPEC_KEYS:
        spec.pop(key, None)
    driver = spec.get("driver")
    if isinstance(driver, dict):
        kept = {k: driver[k] for k in DRIVER_CLUSTER_KEYS if k in driver}
        upgrade = driver.get("upgradePolicy")
        if isinstance(upgrade, dict) and "autoUpgrade" in upgrade:
            kept["upgradePolicy"] = {"autoUpgrade": upgrade["autoUpgrade"]}
        spec["driver"] = kept
    out: dict[str, Any] = {"spec": spec}
    labels, annotations = meta.get("labels"), meta.get("annotations")
    if labels or annotations:
        out["metadata"] = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    return out


def upgrade_policy(doc: dict[str, Any]) -> dict[str, Any]:
    """spec.driver.upgradePolicy of a merged ClusterPolicy ({} when absent or ill-typed)."""
    spec = doc.get("spec")
    driver = spec.get("driver") if isinstance(spec, dict) else None
    upgrade = driver.get("upgradePolicy") if isinstance(driver, dict) else None
    return upgrade if isinstance(upgrade, dict) else {}


def pool_driver(doc: dict[str, Any]) -> dict[str, Any]:
    """The per-pool driver fields of a merged ClusterPolicy, in ClusterPolicy shape."""
    spec = doc.get("spec") or {}
    driver: dict[str, Any] = spec["driver"] if isinstance(spec.get("driver"), dict) else {}
    return {k: plain.copy(v) for k, v in driver.items() if k not in DRIVER_CLUSTER_KEYS}


def driver_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """NVIDIADriver spec fields from a merged ClusterPolicy (selector and type are added later)."""
    spec = doc.get("spec") or {}
    out: dict[str, Any] = {}
    for key, value in pool_driver(doc).items():
        if key == "virtualTopology":
            topo = dict(value) if isinstance(value, dict) else value
            if isinstance(topo, dict) and "config" in topo and "name" not in topo:
                topo["name"] = topo.pop("config")
            out["virtualTopologyConfig"] = topo
        elif key in ("repoConfig", "licensingConfig") and isinstance(value, dict):
            renamed = dict(value)
            if "configMapName" in renamed and "name" not in renamed:
                renamed["name"] = renamed.pop("configMapName")
            out[key] = renamed
        else:
            out[key] = value
    for key in POOL_SPEC_KEYS:
        if key in spec:
            out[key] = plain.copy(spec[key])
    daemonsets = spec.get("daemonsets")
    if isinstance(daemonsets, dict):
        for key in DAEMONSET_KEYS:
            # like the Helm chart: only what is set (an empty map or list adds nothing)
            if daemonsets.get(key) not in (None, {}, [], "") and key not in out:
                out[key] = plain.copy(daemonsets[key])
    return out


def policy_path(nvd_path: PathKey) -> PathKey:
    """The ClusterPolicy document path an NVIDIADriver spec path was compiled from."""
    for cp, nvd in RENAMES:
        if nvd_path[: len(nvd)] == nvd:
            return ("spec", "driver", *cp, *nvd_path[len(nvd) :])
    head = nvd_path[0] if nvd_path else ""
    if head in POOL_SPEC_KEYS:
        return ("spec", *nvd_path)
    if head in DAEMONSET_KEYS:
        return ("spec", "daemonsets", *nvd_path)
    return ("spec", "driver", *nvd_path)


def common(values: list[Any]) -> Any:
    """What all ``values`` agree on: equal scalars/lists, and for maps the agreed keys."""
    if not values:
        return MISSING
    if all(isinstance(v, dict) for v in values):
        out = {}
        for key in values[0]:
            if all(key in v for v in values):
                agreed = common([v[key] for v in values])
                # an empty map agreed only because its contents differ says nothing
                if agreed is not MISSING and (agreed != {} or not any(v[key] for v in values)):
                    out[key] = agreed
        return out
    first = values[0]
    return plain.copy(first) if all(v == first for v in values[1:]) else MISSING


def disagreements(
    parts: dict[str, Any], path: PathKey = ()
) -> list[tuple[PathKey, dict[str, Any]]]:
    """Paths where the pools' values differ, at the shallowest level that differs.

    ``parts`` maps pool -> value (MISSING when absent); returns (path, pool -> value) pairs.
    """
    values = list(parts.values())
    if all(v == values[0] for v in values[1:]):
        return []
    present = [v for v in values if v is not MISSING]
    if len(present) == len(values) and all(isinstance(v, dict) for v in values):
        keys = sorted({k for v in values for k in v})
        out: list[tuple[PathKey, dict[str, Any]]] = []
        for key in keys:
            sub = {pool: v.get(key, MISSING) for pool, v in parts.items()}
            out.extend(disagreements(sub, (*path, key)))
        return out
    return [(path, dict(parts))]
