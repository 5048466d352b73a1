"""Which nodes of a pool carry the unverified taint (sync/verify_nodes.py decide)."""

from __future__ import annotations

from typing import Any

from gitops_gpu import names
from gitops_gpu.components.health import Health, NodeHealth, aggregate
from gitops_gpu.fleet.compiled import PoolTarget
from gitops_gpu.sync import slim
from gitops_gpu.sync.verify_nodes import Change, decide

C = "c" * 40


def target(verify: bool = True) -> PoolTarget:
    return PoolTarget(
        name="train",
        cluster="lab",
        stage="training",
        node_selector={},
        max_unavailable=1,
        gpu_product=None,
        mig_config=None,
        device_plugin_config=None,
        node_labels={},
        driver={"metadata": {"name": "train"}},
        driver_version=None,
        verify_new_nodes=verify,
    )


def node(name: str, *, tainted: bool = False, verified: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if verified:
        meta["annotations"] = {names.VERIFIED_ANNOTATION: "b" * 40}
    spec = {"taints": [{"key": names.UNVERIFIED_TAINT, "effect": "NoSchedule"}]} if tainted else {}
    return {"metadata": meta, "spec": spec}


def health(**verdicts: Health) -> Any:
    return aggregate("train", [NodeHealth(n, h, str(h), ()) for n, h in verdicts.items()])


def test_a_new_node_is_tainted_until_healthy_then_verified_on_the_pools_commit() -> None:
    members = [node("new"), node("new-tainted", tainted=True), node("ready", tainted=True)]
    verdicts = health(
        **{"new": Health.PROGRESSING, "new-tainted": Health.UNKNOWN, "ready": Health.HEALTHY}
    )
    assert decide(target(), C, verdicts, members) == [
        Change("new", taint=True),
        Change("ready", taint=False, verified=C),
    ]
    # Not one commit on the pool's objects yet: nothing is verified, new nodes still tainted.
    assert decide(target(), None, verdicts, members) == [Change("new", taint=True)]


def test_verified_nodes_stay_verified_and_a_pool_that_stops_verifying_sheds_the_taint() -> None:
    old = node("old", verified=True)
    stray = node("stray", tainted=True, verified=True)  # tainted by hand, or a race: ours to lift
    sick = health(old=Health.DEGRADED, stray=Health.DEGRADED)
    assert decide(target(), C, sick, [old, stray]) == [Change("stray", taint=False)]
    tainted = [node("a", tainted=True), node("b")]
    assert decide(target(verify=False), C, None, tainted) == [Change("a", taint=False)]
    assert decide(None, C, None, tainted) == [Change("a", taint=False)]  # pool gone from the fleet


def test_the_node_projection_keeps_only_our_taint() -> None:
    raw = {
        "metadata": {"name": "n"},
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {"key": names.UNVERIFIED_TAINT, "effect": "NoSchedule", "timeAdded": None},
            ]
        },
    }
    assert slim.node(raw)["spec"] == {
        "taints": [{"key": names.UNVERIFIED_TAINT, "effect": "NoSchedule"}]
    }
    assert (
        slim.node(replace_spec(raw, {"taints": [{"key": "x", "effect": "NoSchedule"}]}))["spec"]
        == {}
    )


def replace_spec(obj: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "spec": spec}
