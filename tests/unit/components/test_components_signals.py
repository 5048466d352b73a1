"""signals.operand_verdict: the deploy gate first, then the operand pod, else None."""

from __future__ import annotations

from components_builders import edit, healthy, pool, with_pods

from gitops_gpu.components import signals
from gitops_gpu.components.health import Health

DEPLOY, APP = "container-toolkit", signals.APP_TOOLKIT


def test_a_healthy_node_leaves_the_rung_to_its_own_signals() -> None:
    assert signals.operand_verdict("toolkit", healthy(), pool(), DEPLOY, APP) is None
    assert signals.operand_verdict("toolkit", with_pods(healthy()), pool(), DEPLOY, APP) is None


def test_the_deploy_gate_speaks_first() -> None:
    off = pool(extra_labels={"nvidia.com/gpu.deploy.container-toolkit": "false"})
    ev = with_pods(healthy(), **{APP: {"waiting": "CrashLoopBackOff"}})
    verdict = signals.operand_verdict("toolkit", ev, off, DEPLOY, APP)
    assert verdict is not None and verdict.skipped and verdict.health is Health.HEALTHY
    paused = edit(healthy(), labels={"nvidia.com/gpu.deploy.container-toolkit": "paused-for-x"})
    verdict = signals.operand_verdict("toolkit", paused, pool(), DEPLOY, APP)
    assert verdict is not None and verdict.health is Health.PROGRESSING


def test_a_broken_pod_is_the_verdict_when_the_gate_is_open() -> None:
    ev = with_pods(healthy(), **{APP: {"waiting": "CrashLoopBackOff"}})
    verdict = signals.operand_verdict("toolkit", ev, pool(), DEPLOY, APP)
    assert verdict is not None and verdict.health is Health.DEGRADED
    assert "CrashLoopBackOff" in verdict.reason
