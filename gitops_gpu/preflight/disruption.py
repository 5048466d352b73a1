"""The disruption plan: what a change will do to nodes and workloads, per stage and pool.

The object plan (preflight/plan.py) says which fields change; this says what the GPU Operator
will do about it (preflight/disruption_rules.py): which operand pods restart, whether the driver
is upgraded (cordon, GPU pods deleted, drain per the pool's upgradePolicy) or only restarted in
place, MIG reconfigurations and device-plugin config switches. With the cluster's nodes, pods
and PodDisruptionBudgets (an ``Inventory``) it also names the nodes, the GPU workloads running
on them now and the budgets that would block, and estimates each stage's wall time.

Pure: two compiled fleets, their plan and an optional inventory in, a Disruption value out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitops_gpu.components import holders
from gitops_gpu.fleet.budget import resolve_max_unavailable
from gitops_gpu.fleet.compiled import CompiledFleet, PoolTarget
from gitops_gpu.preflight import disruption_rules as rules
from gitops_gpu.preflight.matrix import facts_for
from gitops_gpu.preflight.plan import ObjectChange, Plan
from gitops_gpu.sync.live import selector_matches

Obj = Mapping[str, Any]
# Per-node durations assumed for the estimate (seconds), unless measured ones are passed in.
ASSUMED_SECONDS: dict[str, float] = {
    "driver-upgrade": 600.0,
    "driver-restart": 180.0,
    "driver-install": 300.0,
    "operand-restart": 60.0,
    "mig-reconfig": 300.0,
    "workload-switch": 300.0,
    "device-plugin-config": 30.0,
}


@dataclass(frozen=True)
class Effect:
    kind: str  # driver-upgrade | driver-restart | operand-restart | mig-reconfig | ...
    text: str
    cause: tuple[str, ...] = ()  # the changed fields behind it
    cordons: bool = False
    stops_gpu_pods: bool = False
    drains: bool = False
    batch: int | str = 1  # nodes of the pool at a time (an int or a percent)


@dataclass(frozen=True)
class PoolDisruption:
    pool: str
    cluster: str
    effects: tuple[Effect, ...]
    nodes: tuple[str, ...] | None = None  # None: not known (no cluster read)
    # GPU pods running on the pool's nodes now that the change stops, and who blocks them.
    workloads: tuple[holders.Holder, ...] = ()
    estimate_seconds: float | None = None

    @property
    def disrupts(self) -> bool:
        return any(e.kind != "none" for e in self.effects)


@dataclass(frozen=True)
class StageDisruption:
    stage: str
    pools: tuple[PoolDisruption, ...]
    waits: tuple[str, ...] = ()  # approval, soak, windows
    estimate_seconds: float | None = None


@dataclass(frozen=True)
class Disruption:
    base_commit: str
    head_commit: str
    stages: tuple[StageDisruption, ...]
    removed: tuple[PoolDisruption, ...] = ()
    cluster_wide: tuple[str, ...] = ()  # "cluster: field: what happens at once"
    unknown: tuple[str, ...] = ()  # ClusterPolicy fields not in the operator tables

    @property
    def pools(self) -> Iterable[PoolDisruption]:
        for stage in self.stages:
            yield from stage.pools
        yield from self.removed

    @property
    def none(self) -> bool:
        return not self.cluster_wide and not any(p.disrupts for p in self.pools)


@dataclass(frozen=True)
class Inventory:
    """The cluster as it is: each pool's nodes, the pods on each node, the PDBs."""

    pool_nodes: Mapping[str, tuple[str, ...]]
    pods_by_node: Mapping[str, tuple[Obj, ...]] = field(default_factory=dict)
    pdbs: tuple[Obj, ...] = ()


def inventory(
    pools: Mapping[str, PoolTarget], nodes: Iterable[Obj], pods: Iterable[Obj], pdbs: Iterable[Obj]
) -> Inventory:
    """One cluster's inventory: pool membership by the pools' node selectors."""
    members: dict[str, list[str]] = {p: [] for p in pools}
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        for name, target in pools.items():
            if target.node_selector and selector_matches(target.node_selector, labels):
                members[name].append(str(meta.get("name")))
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        where = (pod.get("spec") or {}).get("nodeName")
        if where:
            by_node.setdefault(str(where), []).append(pod)
    return Inventory(
        {p: tuple(sorted(n)) for p, n in members.items()},
        {n: tuple(p) for n, p in by_node.items()},
        tuple(pdbs),
    )


def merged(parts: Iterable[Inventory]) -> Inventory:
    """Several clusters' inventories as one (pool names are unique across a fleet)."""
    pool_nodes: dict[str, tuple[str, ...]] = {}
    pods: dict[str, tuple[Obj, ...]] = {}
    pdbs: list[Obj] = []
    for part in parts:
        pool_nodes.update(part.pool_nodes)
        pods.update(part.pods_by_node)
        pdbs.extend(part.pdbs)
    return Inventory(pool_nodes, pods, tuple(pdbs))


def _spec_paths(change: ObjectChange | None) -> list[tuple[Any, ...]]:
    if change is None:
        return []
    return [f.parts[1:] for f in change.fields if f.parts[:1] == ("spec",) and len(f.parts) > 1]


def _dotted(paths: Iterable[tuple[Any, ...]]) -> tuple[str, ...]:
    return tuple(sorted({"spec." + ".".join(str(p) for p in path) for path in paths}))


def _driver_effect(
    change: ObjectChange, head: PoolTarget | None, base: PoolTarget | None
) -> Effect | None:
    if change.action == "delete":
        return Effect(
            "driver-removed",
            "NVIDIADriver deleted: its driver pods leave the nodes; their GPUs are unusable "
            "until another pool's driver covers them",
            cordons=False,
            stops_gpu_pods=True,
        )
    assert head is not None
    policy = rules.UpgradePolicy.of(head.driver)
    if change.action == "create":
        return Effect(
            "driver-install",
            f"NVIDIADriver created: the driver ({head.driver_version or 'default'}) is installed "
            "on the pool's nodes",
            batch=head.max_unavailable,
        )
    paths = _spec_paths(change)
    kind = rules.driver_kind(paths)
    cause = _dotted(paths)
    if kind == "policy":
        text = "upgradePolicy only: no pod restarts; later upgrades follow it"
        return Effect("none", text, cause)
    if not kind:
        return None
    if not policy.auto:
        return Effect(
            "none",
            "autoUpgrade is off: the operator replaces no driver pod; each node keeps its driver "
            "until its driver pod is deleted or the node reboots",
            cause,
        )
    batch = _driver_batch(policy)
    if kind == "restart":
        return Effect(
            "driver-restart",
            "driver pod restarted in place (install config unchanged): node cordoned during "
            "the restart, GPU pods keep running; the full upgrade instead where the running "
            "pod has no DRIVER_CONFIG_DIGEST (made by an older operator)",
            cause,
            cordons=True,
            batch=batch,
        )
    version = ""
    if base is not None and base.driver_version != head.driver_version:
        version = f" {base.driver_version or 'default'} -> {head.driver_version or 'default'}"
    return Effect(
        "driver-upgrade",
        f"driver upgrade{version}: {_flow(policy)}",
        cause,
        cordons=True,
        stops_gpu_pods=True,
        drains=policy.drain,
        batch=batch,
    )


def _driver_batch(policy: rules.UpgradePolicy) -> int | str:
    if policy.max_parallel and isinstance(policy.max_unavailable, int):
        return min(policy.max_parallel, policy.max_unavailable)
    return policy.max_parallel or policy.max_unavailable


def _flow(p: rules.UpgradePolicy) -> str:
    steps = ["cordon"]
    if p.wait_selector:
        limit = f"{p.wait_timeout}s" if p.wait_timeout else "no timeout"
        steps.append(f"wait for pods {p.wait_selector!r} to finish ({limit})")
    force = ", forced" if p.delete_force else ""
    steps.append(
        f"GPU pods deleted by eviction (PDBs honoured, timeout {p.delete_timeout}s{force})"
    )
    if p.drain:
        force = ", forced" if p.drain_force else ""
        steps.append(f"node drained (timeout {p.drain_timeout}s{force})")
    else:
        steps.append("no drain")
    steps.append("driver restarted, validated, uncordoned")
    return ", ".join(steps)


def _pool(
    name: str,
    head_pool: PoolTarget | None,
    base_pool: PoolTarget | None,
    changes: Sequence[ObjectChange],
    operands: tuple[str, ...],
    cp_cause: tuple[str, ...],
    off: frozenset[str] = frozenset(),
) -> list[Effect]:
    effects: list[Effect] = []
    budget = head_pool.max_unavailable if head_pool else 1
    driver = next((c for c in changes if c.kind == "NVIDIADriver"), None)
    if driver is not None:
        effect = _driver_effect(driver, head_pool, base_pool)
        if effect is not None:
            effects.append(effect)
    if head_pool is not None:
        skipped = rules.disabled_operands(head_pool.node_labels) | off
        if not _mig_capable(head_pool):
            skipped |= {rules.MIG}
        restarts = tuple(o for o in operands if o not in skipped and o != rules.MPS)
        if restarts:
            also = (
                f"; also {rules.MPS_NOTE}"
                if rules.MPS in operands and rules.MPS not in skipped
                else ""
            )
            effects.append(
                Effect(
                    "operand-restart",
                    f"operand pods restarted: {', '.join(restarts)} (GPU pods keep running{also})",
                    cp_cause,
                    batch=budget,
                )
            )
        old = base_pool.node_labels if base_pool else {}
        for le in rules.label_effects(old, head_pool.node_labels):
            effects.append(Effect(le.kind, le.text, stops_gpu_pods=le.stops_gpu_pods, batch=budget))
    return effects


def _mig_capable(pool: PoolTarget) -> bool:
    """False only when the pool's GPU is known and has no MIG (then no MIG manager runs)."""
    if not pool.gpu_product:
        return True
    facts = facts_for(pool.gpu_product, pool.name)
    return facts.mig_model is not None or facts.architecture is None


def _batches(nodes: int, batch: int | str) -> int:
    return math.ceil(nodes / resolve_max_unavailable(batch, nodes)) if nodes else 0


def _with_inventory(
    pd: PoolDisruption, inv: Inventory | None, seconds: Mapping[str, float]
) -> PoolDisruption:
    if inv is None:
        return pd
    nodes = inv.pool_nodes.get(pd.pool, ())
    pods: list[Obj] = [p for n in nodes for p in inv.pods_by_node.get(n, ())]
    work: tuple[holders.Holder, ...] = ()
    if any(e.drains for e in pd.effects):
        work = holders.holders(holders.DRAIN, pods, inv.pdbs)
    elif any(e.stops_gpu_pods for e in pd.effects):
        work = holders.holders(holders.POD_DELETION, pods, inv.pdbs)
    estimate = sum(_batches(len(nodes), e.batch) * seconds.get(e.kind, 0.0) for e in pd.effects)
    return PoolDisruption(pd.pool, pd.cluster, pd.effects, nodes, work, estimate)


def _waits(fleet: CompiledFleet, stage: str) -> tuple[str, ...]:
    spec = fleet.stage(stage)
    out = []
    if not spec.windows.always_open:
        out.append("starts node batches only inside its windows")
    if spec.gate.approval_required:
        out.append("waits for an approval")
    if spec.gate.soak_seconds:
        out.append(f"soaks {holders.age(spec.gate.soak_seconds)}")
    return tuple(out)


def make_disruption(
    plan: Plan,
    base: CompiledFleet | None,
    head: CompiledFleet,
    inv: Inventory | None = None,
    seconds: Mapping[str, float] | None = None,
) -> Disruption:
    per_node = {**ASSUMED_SECONDS, **(seconds or {})}
    impacts: dict[str, rules.OperandImpact] = {}
    causes: dict[str, tuple[str, ...]] = {}
    for stage in plan.stages:
        for cname, change in stage.cluster_changes:
            paths = _spec_paths(change) if change.action == "update" else []
            impacts[cname] = rules.operand_impact(paths)
            causes[cname] = _dotted(paths)
    by_pool = {p.pool: p.changes for s in plan.stages for p in s.pools}
    disabled = {
        c: rules.cluster_disabled(t.cluster_policy.get("spec") or {})
        for c, t in head.clusters.items()
    }
    stages: list[StageDisruption] = []
    for spec in head.stages:
        pools = []
        for name in spec.pools:
            target = head.pool(name)
            impact = impacts.get(target.cluster)
            effects = _pool(
                name,
                target,
                _base_pool(base, name),
                by_pool.get(name, ()),
                impact.restarts if impact else (),
                causes.get(target.cluster, ()),
                disabled.get(target.cluster, frozenset()),
            )
            pd = PoolDisruption(name, target.cluster, tuple(effects))
            pools.append(_with_inventory(pd, inv, per_node))
        known = [p.estimate_seconds for p in pools if p.estimate_seconds is not None]
        estimate = (max(known, default=0.0) + spec.gate.soak_seconds) if inv else None
        stages.append(StageDisruption(spec.name, tuple(pools), _waits(head, spec.name), estimate))
    removed = []
    for pc in plan.removed:
        effects = _pool(pc.pool, None, _base_pool(base, pc.pool), pc.changes, (), ())
        pd = PoolDisruption(pc.pool, pc.cluster, tuple(effects))
        removed.append(_with_inventory(pd, inv, per_node))
    wide = tuple(f"{c}: spec.{w}" for c, i in sorted(impacts.items()) for w in i.cluster_wide)
    unknown = tuple(f"{c}: spec.{u}" for c, i in sorted(impacts.items()) for u in i.unknown)
    return Disruption(
        plan.base_commit, plan.head_commit, tuple(stages), tuple(removed), wide, unknown
    )


def _base_pool(base: CompiledFleet | None, name: str) -> PoolTarget | None:
    if base is None:
        return None
    try:
        return base.pool(name)
    except KeyError:
        return None
