"""Rung 4, the NVIDIA Container Toolkit: deployed where the pool wants it, its pod healthy.

It leaves no node label of its own beyond the deploy switch, so the verdict rests on that label
and, when operator pods are visible, on the toolkit DaemonSet's pod.
"""

from __future__ import annotations

from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "toolkit"
DEPLOY = "container-toolkit"


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    verdict = signals.operand_verdict(COMPONENT, ev, pool, DEPLOY, signals.APP_TOOLKIT)
    return verdict or result(COMPONENT, Health.HEALTHY, "deployed")
