"""The verification ladder: walk a node's components in the GPU Operator's deploy order.

Every rung is judged (cheap, and ``gitops-gpu nodes`` shows them all), but the node's health and
reason are those of the FIRST rung that is not Healthy: a driver stuck in upgrade-failed also
breaks the validator, and the root cause is the driver. Rungs a pool switches off are skipped.

Order: node (Ready) -> nfd -> driver -> gpu (NVML hardware faults) -> toolkit -> gfd ->
device-plugin -> dcgm -> mig-manager -> validator.

A node that is not available (NotReady; or cordoned by someone other than the driver upgrade
and failing a rung: node.unavailable) is not judged by its rungs but by the pool's
``unavailableNodes``: skip (Skipped: counted, not judged, at most maxUnavailable of them:
:func:`judge_pool`), wait (Progressing) or fail (Degraded), with the reason. The rungs are
still walked, for ``nodes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gitops_gpu.components import (
    dcgm,
    device_plugin,
    driver,
    gfd,
    gpu,
    mig_manager,
    nfd,
    node,
    toolkit,
    validator,
)
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import (
    DEFAULT_OPTIONS,
    Health,
    NodeHealth,
    Options,
    PoolHealth,
    RungResult,
    aggregate,
)
from gitops_gpu.fleet.budget import resolve_max_unavailable
from gitops_gpu.fleet.compiled import PoolTarget
from gitops_gpu.kept import Kept

Check = Callable[[NodeEvidence, PoolTarget, Options], RungResult]

RUNGS: tuple[tuple[str, Check], ...] = (
    (node.COMPONENT, node.check),
    (nfd.COMPONENT, nfd.check),
    (driver.COMPONENT, driver.check),
    (gpu.COMPONENT, gpu.check),
    (toolkit.COMPONENT, toolkit.check),
    (gfd.COMPONENT, gfd.check),
    (device_plugin.COMPONENT, device_plugin.check),
    (dcgm.COMPONENT, dcgm.check),
    (mig_manager.COMPONENT, mig_manager.check),
    (validator.COMPONENT, validator.check),
)
COMPONENTS = tuple(name for name, _ in RUNGS)


# unavailableNodes -> how an unavailable node counts, and what its reason adds.
_POLICY: dict[str, tuple[Health, str]] = {
    "skip": (Health.SKIPPED, ", skipped"),
    "wait": (Health.PROGRESSING, ", waiting for it (unavailableNodes: wait)"),
    "fail": (Health.DEGRADED, ""),
}


def walk(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> NodeHealth:
    """Judge one node: every rung's result, and the first failing rung as the verdict (an
    unavailable node's verdict is the pool's ``unavailableNodes``)."""
    rungs = tuple(check(ev, pool, opts) for _, check in RUNGS)
    rungs = _RUNGS.one(rungs, rungs)
    failing = next((r for r in rungs if not r.ok), None)
    gone = node.unavailable(ev, pool)
    # A cordoned node whose rungs all pass is simply healthy: it runs the commit, and a cordon
    # the operator keeps (one already there when its upgrade began) must not stall a pool.
    if gone is not None and (gone.kind == node.NOT_READY or failing is not None):
        health, note = _POLICY[pool.unavailable_nodes]
        return NodeHealth(ev.name, health, gone.reason + note, rungs, gone)
    if failing is not None:
        return NodeHealth(ev.name, failing.health, failing.reason, rungs)
    driver_facts = next(r.reason for r in rungs if r.component == driver.COMPONENT)
    reason = _HEALTHY.get(driver_facts) or _HEALTHY.one(
        driver_facts, f"all rungs healthy ({driver_facts})"
    )
    return NodeHealth(ev.name, Health.HEALTHY, reason, rungs)


# One string per distinct driver fact, and one tuple per distinct set of rung results, not one
# per node (results are shared too: health.result).
_HEALTHY: Kept[str, str] = Kept(1024)
_RUNGS: Kept[tuple[RungResult, ...], tuple[RungResult, ...]] = Kept(1024)


def aggregate_pool(pool: PoolTarget, verdicts: Iterable[NodeHealth]) -> PoolHealth:
    """Worst-of over verdicts from :func:`walk`, skipping at most the pool's maxUnavailable
    (resolved against its node count, rounded up as the GPU Operator does)."""
    members = list(verdicts)
    budget = resolve_max_unavailable(pool.max_unavailable, len(members))
    return aggregate(pool.name, members, skip_budget=budget)


def judge_pool(
    pool: PoolTarget, evidence: Iterable[NodeEvidence], opts: Options = DEFAULT_OPTIONS
) -> PoolHealth:
    """Worst-of over the pool's nodes, each judged by :func:`walk`."""
    return aggregate_pool(pool, (walk(ev, pool, opts) for ev in evidence))
