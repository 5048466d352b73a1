"""The verification ladder: walk a node's components in the GPU Operator's deploy order.

Every rung is judged (cheap, and ``gitops-gpu nodes`` shows them all), but the node's health and
reason are those of the FIRST rung that is not Healthy: a driver stuck in upgrade-failed also
breaks the validator, and the root cause is the driver. Rungs a pool switches off are skipped.

Order: node (Ready) -> nfd -> driver -> gpu (NVML hardware faults) -> toolkit -> gfd ->
device-plugin -> dcgm -> mig-manager -> validator.
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
from gitops_gpu.fleet.compiled import PoolTarget

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


def walk(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> NodeHealth:
    """Judge one node: every rung's result, and the first failing rung as the verdict."""
    rungs = tuple(check(ev, pool, opts) for _, check in RUNGS)
    failing = next((r for r in rungs if not r.ok), None)
    if failing is not None:
        return NodeHealth(ev.name, failing.health, failing.reason, rungs)
    driver_facts = next(r.reason for r in rungs if r.component == driver.COMPONENT)
    return NodeHealth(ev.name, Health.HEALTHY, f"all rungs healthy ({driver_facts})", rungs)


def judge_pool(
    pool: PoolTarget, evidence: Iterable[NodeEvidence], opts: Options = DEFAULT_OPTIONS
) -> PoolHealth:
    """Worst-of over the pool's nodes, each judged by :func:`walk`."""
    return aggregate(pool.name, (walk(ev, pool, opts) for ev in evidence))
