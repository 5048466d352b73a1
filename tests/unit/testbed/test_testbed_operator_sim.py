"""The simulated upgrade controller and MIG manager, tick by tick on plain node dicts."""

from __future__ import annotations

from typing import Any

from gitops_gpu import names
from gitops_gpu_dev.testbed import operator_sim as sim


def node(
    name: str,
    *,
    driver: str | None = "570.86.10",
    state: str = "",
    fault: str | None = None,
    mig: str | None = None,
    mig_current: str | None = None,
) -> dict[str, Any]:
    labels = {names.UPGRADE_STATE_LABEL: state, "nvidia.com/mig.capable": "true"}
    if mig:
        labels[names.MIG_CONFIG_LABEL] = mig
    ann = {}
    if driver:
        ann[sim.DRIVER_ANN] = driver
    if fault:
        ann[sim.FAULT_ANN] = fault
    if mig_current:
        ann[sim.MIG_ANN] = mig_current
    return {
        "metadata": {"name": name, "labels": labels, "annotations": ann},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def driver(version: str, **policy: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "pool"},
        "spec": {"version": version, "upgradePolicy": {"autoUpgrade": True, **policy}},
    }


def apply(nodes: list[dict[str, Any]], patches: dict[str, sim.NodePatch]) -> None:
    for n in nodes:
        p = patches.get(n["metadata"]["name"])
        if not p:
            continue
        for k, v in p.labels.items():
            if v is None:
                n["metadata"]["labels"].pop(k, None)
            else:
                n["metadata"]["labels"][k] = v
        for k, v in p.annotations.items():
            if v is not None:
                n["metadata"]["annotations"][k] = v
        if p.unschedulable is not None:
            n["spec"]["unschedulable"] = p.unschedulable


def run(nodes: list[dict[str, Any]], drv: dict[str, Any], ticks: int) -> list[int]:
    """Tick the controller; return how many nodes were mid-upgrade after each tick."""
    busy = []
    for _ in range(ticks):
        apply(nodes, sim.driver_step(nodes, drv))
        busy.append(sum(1 for n in nodes if n["spec"].get("unschedulable")))
    return busy


def test_upgrade_walks_every_state_and_respects_max_parallel() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    drv = driver("580.126.20", maxParallelUpgrades=1, maxUnavailable="50%")
    busy = run(nodes, drv, 60)
    assert max(busy) == 1  # one node at a time
    assert all(n["metadata"]["annotations"][sim.DRIVER_ANN] == "580.126.20" for n in nodes)
    assert all(n["metadata"]["labels"][names.UPGRADE_STATE_LABEL] == "upgrade-done" for n in nodes)
    assert all(
        n["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] == "580.126.20"
        for n in nodes
    )
    assert sim.driver_state(nodes, drv) == "ready"


def test_max_unavailable_caps_parallel_upgrades() -> None:
    nodes = [node(f"n{i}") for i in range(8)]
    busy = run(nodes, driver("580.126.20", maxParallelUpgrades=0, maxUnavailable=2), 40)
    assert max(busy) == 2


def test_without_auto_upgrade_nothing_moves() -> None:
    nodes = [node("n0")]
    drv = {"metadata": {"name": "pool"}, "spec": {"version": "580.126.20"}}
    run(nodes, drv, 10)
    assert nodes[0]["metadata"]["annotations"][sim.DRIVER_ANN] == "570.86.10"
    assert sim.driver_state(nodes, drv) == "notReady"


def test_injected_fault_fails_the_upgrade_and_recovers_when_cleared() -> None:
    nodes = [node("n0", fault="upgrade-failed")]
    drv = driver("580.126.20")
    run(nodes, drv, 12)
    assert nodes[0]["metadata"]["labels"][names.UPGRADE_STATE_LABEL] == "upgrade-failed"
    assert nodes[0]["metadata"]["annotations"][sim.DRIVER_ANN] == "570.86.10"
    del nodes[0]["metadata"]["annotations"][sim.FAULT_ANN]
    run(nodes, drv, 12)
    assert nodes[0]["metadata"]["labels"][names.UPGRADE_STATE_LABEL] == "upgrade-done"
    assert nodes[0]["metadata"]["annotations"][sim.DRIVER_ANN] == "580.126.20"


def test_fresh_node_installs_desired_driver_directly() -> None:
    nodes = [node("n0", driver=None)]
    apply(nodes, sim.driver_step(nodes, driver("580.126.20")))
    assert nodes[0]["metadata"]["annotations"][sim.DRIVER_ANN] == "580.126.20"
    assert nodes[0]["metadata"]["labels"][names.DRIVER_OWNER_LABEL] == "pool"


def test_mig_manager_pending_then_success_or_failed() -> None:
    n = node("n0", mig="all-balanced")
    apply([n], {"n0": sim.mig_step(n)})
    assert n["metadata"]["labels"][names.MIG_CONFIG_STATE_LABEL] == "pending"
    apply([n], {"n0": sim.mig_step(n)})
    assert n["metadata"]["labels"][names.MIG_CONFIG_STATE_LABEL] == "success"
    assert n["metadata"]["annotations"][sim.MIG_ANN] == "all-balanced"
    bad = node("n1", mig="all-1g.10gb", fault="mig-failed")
    for _ in range(3):
        apply([bad], {"n1": sim.mig_step(bad)})
    assert bad["metadata"]["labels"][names.MIG_CONFIG_STATE_LABEL] == "failed"


# -- what the real GPU Operator v26.7.0 does, and the simulator now does too -------------------


def test_fresh_node_is_upgrade_done_like_the_real_upgrade_controller() -> None:
    nodes = [node("n0", driver=None)]
    apply(nodes, sim.driver_step(nodes, driver("580.126.20")))
    assert nodes[0]["metadata"]["labels"][names.UPGRADE_STATE_LABEL] == "upgrade-done"


def test_upgrade_failed_recovers_to_uncordon_required_not_pod_restart() -> None:
    nodes = [node("n0", fault="upgrade-failed")]
    drv = driver("580.126.20")
    run(nodes, drv, 12)
    assert nodes[0]["metadata"]["labels"][names.UPGRADE_STATE_LABEL] == "upgrade-failed"
    del nodes[0]["metadata"]["annotations"][sim.FAULT_ANN]
    apply(nodes, sim.driver_step(nodes, drv))
    assert nodes[0]["metadata"]["labels"][names.UPGRADE_STATE_LABEL] == "uncordon-required"
    assert nodes[0]["metadata"]["annotations"][sim.DRIVER_ANN] == "580.126.20"


def test_node_labels_mig_manager_only_on_mig_capable_and_default_all_disabled() -> None:
    mig = node("n0")
    patch = sim.node_labels(mig)
    assert patch.labels[names.MIG_CONFIG_LABEL] == "all-disabled"
    assert patch.labels[f"{names.DEPLOY_LABEL_PREFIX}mig-manager"] == "true"
    assert patch.labels[f"{names.DEPLOY_LABEL_PREFIX}driver"] == "true"
    plain = node("n1")
    plain["metadata"]["labels"]["nvidia.com/mig.capable"] = "false"
    patch = sim.node_labels(plain)
    assert f"{names.DEPLOY_LABEL_PREFIX}mig-manager" not in patch.labels
    assert names.MIG_CONFIG_LABEL not in patch.labels
    chosen = node("n2", mig="all-balanced")
    assert names.MIG_CONFIG_LABEL not in sim.node_labels(chosen).labels
