"""Rung 7, DCGM and the DCGM exporter: deployed where the pool wants them, their pods healthy.

The standalone DCGM host engine is off by default (the exporter embeds one), so a missing
``nvidia-dcgm`` pod is normal; only pods that exist are judged.
"""

from __future__ import annotations

from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "dcgm"
PARTS = (("dcgm", signals.APP_DCGM), ("dcgm-exporter", signals.APP_DCGM_EXPORTER))


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    judged = []
    for deploy, app in PARTS:
        gate = signals.deploy_gate(COMPONENT, ev, pool, deploy)
        if gate is not None and gate.skipped:
            continue
        if gate is not None:
            return gate
        bad = signals.pod_verdict(COMPONENT, ev, app)
        if bad is not None:
            return bad
        judged.append(deploy)
    if not judged:
        return result(
            COMPONENT,
            Health.HEALTHY,
            "skipped: the pool disables dcgm and dcgm-exporter",
            skipped=True,
        )
    return result(COMPONENT, Health.HEALTHY, f"{' and '.join(judged)} deployed")
