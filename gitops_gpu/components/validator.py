"""Rung 9, the operator validator: the end-to-end check that the stack works on the node.

On a real cluster the ``nvidia-operator-validator`` pod's readiness is the signal (its init
containers validate driver, toolkit, CUDA and the plugin in turn; the driver upgrade state
machine waits on the same pod). Where no operator pods run at all (the testbed's KWOK nodes),
the simulator records the validator's outcome in the node annotation
:data:`VALIDATION_ANNOTATION` (``passed`` | ``running`` | ``failed``). Unlike the other rungs,
no evidence at all is Unknown: validation must be shown, never assumed.
"""

from __future__ import annotations

from gitops_gpu import names
from gitops_gpu.components import signals
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, Options, RungResult, result
from gitops_gpu.fleet.compiled import PoolTarget

COMPONENT = "validator"
DEPLOY = "operator-validator"
VALIDATION_ANNOTATION = f"{names.GROUP}/validator"
_ANNOTATION_HEALTH = {
    "passed": Health.HEALTHY,
    "running": Health.PROGRESSING,
    "failed": Health.DEGRADED,
}


def check(ev: NodeEvidence, pool: PoolTarget, opts: Options = DEFAULT_OPTIONS) -> RungResult:
    gate = signals.deploy_gate(COMPONENT, ev, pool, DEPLOY)
    if gate is not None:
        return gate
    if signals.pods_for(ev, signals.APP_VALIDATOR):
        bad = signals.pod_verdict(COMPONENT, ev, signals.APP_VALIDATOR)
        return bad or result(COMPONENT, Health.HEALTHY, f"{signals.APP_VALIDATOR} pod Ready")
    if ev.pods:  # operands run here, the validator pod is just not scheduled yet
        return result(
            COMPONENT, Health.PROGRESSING, f"no {signals.APP_VALIDATOR} pod on the node yet"
        )
    value = ev.annotations.get(VALIDATION_ANNOTATION)
    if value in _ANNOTATION_HEALTH:
        return result(COMPONENT, _ANNOTATION_HEALTH[value], f"{VALIDATION_ANNOTATION}={value}")
    return result(
        COMPONENT,
        Health.UNKNOWN,
        f"no {signals.APP_VALIDATOR} pod and no {VALIDATION_ANNOTATION} annotation on the node",
    )
