"""mig-manager wedged mid-reconfiguration (NVIDIA/gpu-operator#2833, mig-parted#485): a node
still pending or rebooting past the bound is Degraded with the reason, not waited on forever."""

from __future__ import annotations

from datetime import timedelta

import pytest
from components_builders import NOW, edit, healthy, pool

from gitops_gpu.components import mig_manager
from gitops_gpu.components.health import Health, Options


@pytest.mark.parametrize("state", ["pending", "rebooting"])
def test_a_mig_reconfiguration_stuck_past_its_bound_is_degraded(state: str) -> None:
    ev = edit(healthy(), labels={"nvidia.com/mig.config.state": state})
    target = pool(mig_config="all-disabled")
    early = mig_manager.check(ev, target, Options(since=NOW - timedelta(minutes=5)))
    assert early.health is Health.PROGRESSING
    late = mig_manager.check(ev, target, Options(since=NOW - timedelta(minutes=45)))
    assert late.health is Health.DEGRADED
    assert f"mig.config.state={state} applying all-disabled for 45m (bound 30m)" in late.reason
    assert mig_manager.check(ev, target, Options()).health is Health.PROGRESSING


def test_a_node_that_joined_later_is_bounded_from_when_it_joined() -> None:
    ev = edit(healthy(), labels={"nvidia.com/mig.config.state": "pending"})
    ev.node["metadata"]["creationTimestamp"] = (NOW - timedelta(minutes=10)).strftime(  # type: ignore[index]
        "%Y-%m-%dT%H:%M:%SZ"
    )
    since = Options(since=NOW - timedelta(hours=3))
    assert mig_manager.check(ev, pool(), since).health is Health.PROGRESSING
