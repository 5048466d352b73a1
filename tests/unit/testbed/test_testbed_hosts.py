"""The hosts' part beside the real GPU Operator: driver facts from pods, crash loops, nudges."""

from __future__ import annotations

from typing import Any

from gitops_gpu import names
from gitops_gpu_dev.testbed import hosts, kwok_stages
from gitops_gpu_dev.testbed import operator_sim as sim


def pod(
    version: str = "580.126.20", *, ready: bool = True, created: str = "2026-12-01T10:00:00Z"
) -> dict[str, Any]:
    image = f"nvcr.io/nvidia/driver:{version}-ubuntu24.04"
    return {
        "metadata": {
            "name": f"nvidia-gpu-driver-ubuntu24.04-abc-{version[-2:]}",
            "namespace": "gpu-operator",
            "creationTimestamp": created,
        },
        "spec": {
            "nodeName": "n0",
            "containers": [{"name": "nvidia-driver-ctr", "image": image}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "nvidia-driver-ctr", "image": image, "ready": ready}],
        },
    }


def node(*, running: str | None = None, fault: str | None = None, state: str = "") -> Any:
    ann = {}
    if running:
        ann[sim.DRIVER_ANN] = running
    if fault:
        ann[sim.FAULT_ANN] = fault
    labels = {names.UPGRADE_STATE_LABEL: state} if state else {}
    return {"metadata": {"name": "n0", "labels": labels, "annotations": ann}}


def test_version_comes_from_the_driver_image_tag() -> None:
    assert hosts.pod_driver_version(pod("580.142.01")) == "580.142.01"
    digest = pod()
    digest["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/driver@sha256:abc"
    assert hosts.pod_driver_version(digest) is None


def test_a_ready_driver_pod_sets_the_hosts_driver_and_gfd_labels() -> None:
    patch, write = hosts.host_step(node(running="580.126.20"), pod("580.142.01"))
    assert write is None
    assert patch.annotations[sim.DRIVER_ANN] == "580.142.01"
    assert patch.labels["nvidia.com/cuda.driver-version.full"] == "580.142.01"
    # Not Ready yet: the host still runs the old driver.
    patch, _ = hosts.host_step(node(running="580.126.20"), pod("580.142.01", ready=False))
    assert not patch


def test_the_fault_crash_loops_a_new_driver_only_and_clearing_it_heals() -> None:
    faulty = node(running="580.126.20", fault="upgrade-failed")
    assert hosts.host_step(faulty, pod("580.126.20")) == (sim.NodePatch(), None)
    patch, write = hosts.host_step(faulty, pod("580.142.01"))
    assert not patch and write is not None
    crashed = pod("580.142.01")
    crashed["status"].update(write.status)
    ctr = crashed["status"]["containerStatuses"][0]
    assert ctr["restartCount"] > 10 and not ctr["ready"]  # what k8s-operator-libs calls failing
    assert hosts.crash_looping(crashed) and not hosts.pod_ready(crashed)
    assert hosts.host_step(faulty, crashed) == (sim.NodePatch(), None)  # stays broken
    _, heal = hosts.host_step(node(running="580.126.20"), crashed)
    assert heal is not None
    crashed["status"].update(heal.status)
    assert hosts.pod_ready(crashed) and not hosts.crash_looping(crashed)


def test_a_fresh_node_with_the_fault_installs_its_first_driver() -> None:
    patch, write = hosts.host_step(node(fault="upgrade-failed"), pod("580.126.20"))
    assert write is None and patch.annotations[sim.DRIVER_ANN] == "580.126.20"


def test_newest_pod_per_node_and_terminating_ones_ignored() -> None:
    old, new = pod("580.126.20"), pod("580.142.01", created="2026-12-01T11:00:00Z")
    gone = pod("580.159.03", created="2026-12-01T12:00:00Z")
    gone["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:01Z"
    assert hosts.driver_pods_by_node([old, gone, new]) == {"n0": new}


def test_nudge_toggles_the_skip_label_only_while_waiting_on_pods() -> None:
    assert hosts.nudge_patch(node(state="upgrade-done")) is None
    waiting = node(state="pod-restart-required")
    first = hosts.nudge_patch(waiting)
    assert first == {"metadata": {"labels": {hosts.SKIP_LABEL: "false"}}}
    waiting["metadata"]["labels"][hosts.SKIP_LABEL] = "false"
    assert hosts.nudge_patch(waiting) == {"metadata": {"labels": {hosts.SKIP_LABEL: None}}}
    waiting["metadata"]["labels"][hosts.SKIP_LABEL] = "true"  # a person's: never touched
    assert hosts.nudge_patch(waiting) is None
    # A node its NVIDIADriver owns but the upgrade controller has not labelled yet.
    fresh = node()
    assert hosts.nudge_patch(fresh) is None  # no owner: no driver pod is coming
    fresh["metadata"]["labels"][names.DRIVER_OWNER_LABEL] = "canary"
    assert hosts.nudge_patch(fresh) == {"metadata": {"labels": {hosts.SKIP_LABEL: "false"}}}


def test_no_nudge_before_the_host_had_its_say_on_a_new_driver_pod() -> None:
    faulty = node(running="580.126.20", fault="upgrade-failed", state="pod-restart-required")
    fresh_ready = pod("580.142.01")  # KWOK made it Ready; the host has not crash-looped it
    assert not hosts.handled(faulty, fresh_ready, wrote=False)
    assert hosts.handled(faulty, fresh_ready, wrote=True)  # crash-looped in this tick
    assert not hosts.handled(faulty, None, wrote=False)
    assert not hosts.handled(faulty, pod("580.142.01", ready=False), wrote=False)
    healthy = node(running="580.126.20", state="pod-restart-required")
    assert hosts.handled(healthy, fresh_ready, wrote=False)


def test_a_faulty_nodes_crash_stage_spares_the_driver_it_runs_and_keeps_that_choice() -> None:
    faulty = node(running="580.126.20", fault="upgrade-failed")
    old = "nvcr.io/nvidia/driver:580.126.20-ubuntu24.04"
    assert hosts.crash_image(faulty, pod("580.126.20"), None) == old
    # Mid-upgrade (the pod is not the running driver): not known yet, and once known, kept.
    assert hosts.crash_image(faulty, pod("580.142.01"), None) is None
    assert hosts.crash_image(faulty, pod("580.142.01"), old) == old
    assert hosts.crash_image(faulty, None, "") is None
    assert hosts.crash_image(node(running="580.126.20"), pod("580.126.20"), old) is None


def test_the_crash_stage_matches_only_new_driver_pods_on_its_node() -> None:
    old = "nvcr.io/nvidia/driver:580.126.20-ubuntu24.04"
    stage = kwok_stages.driver_crash_stage("n0", old, hosts.CRASH_RESTARTS)
    assert stage["metadata"]["name"] == kwok_stages.DRIVER_CRASH_PREFIX + "n0"
    assert stage["spec"]["weight"] == 1  # over kwok's pod-ready for the same pod
    exprs = {
        e["key"]: (e["operator"], e.get("values"))
        for e in stage["spec"]["selector"]["matchExpressions"]
    }
    assert exprs[".spec.nodeName"] == ("In", ["n0"])
    assert exprs[".status.phase"] == ("In", ["Pending"])
    image_key = next(k for k in exprs if k.endswith(".image"))
    assert exprs[image_key] == ("NotIn", [old])
    assert f"restartCount: {hosts.CRASH_RESTARTS}" in stage["spec"]["next"]["statusTemplate"]
