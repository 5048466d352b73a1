"""The upgrade-failed fault under the real operator, on real kwok: a new driver pod on the
faulty node starts crash-looping and is never Ready for a moment (kwok_stages), the driver the
host already runs still starts, and clearing the fault heals the pod."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from gitops_gpu import names
from gitops_gpu_dev.testbed import hosts, kwok_stages
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.session import Testbed
from gitops_gpu_dev.testbed.simulator import Simulator

OLD, NEW = "580.126.20", "580.142.01"


def _wait(
    what: str, pred: Callable[[], bool], seen: Callable[[], Any], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}; saw {seen()}"
        time.sleep(0.2)


def _pod(name: str, ns: str, node: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app.kubernetes.io/component": "nvidia-driver"},
        },
        "spec": {
            "nodeName": node,
            "initContainers": [{"name": "k8s-driver-manager", "image": "driver-manager:v1"}],
            "containers": [
                {
                    "name": "nvidia-driver-ctr",
                    "image": f"nvcr.io/nvidia/driver:{version}-ubuntu24.04",
                }
            ],
        },
    }


def test_a_new_driver_on_the_faulty_node_is_never_ready_and_heals(
    clean_cluster: Testbed,
) -> None:
    client, uid = clean_cluster.client, uuid.uuid4().hex[:6]
    ns, node = f"crash-{uid}", f"crash-node-{uid}"
    client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    client.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": {names.GPU_PRESENT_LABEL: "true"},
                "annotations": {"kwok.x-k8s.io/node": "fake", sim.DRIVER_ANN: OLD},
            },
        }
    )
    sim_ = Simulator(client, plays_operator=False, operator_namespace=ns)

    def get(name: str) -> dict[str, Any]:
        return client.get("v1", "Pod", name, ns) or {}

    try:
        client.create(_pod("drv-old", ns, node, OLD))
        _wait(
            "the running driver's pod Ready",
            lambda: hosts.pod_ready(get("drv-old")),
            lambda: get("drv-old"),
        )
        client.patch("v1", "Node", node, {"metadata": {"annotations": {sim.FAULT_ANN: sim.FAILED}}})
        sim_.step()
        stage = client.get(kwok_stages.API, "Stage", kwok_stages.DRIVER_CRASH_PREFIX + node)
        assert stage is not None, "the faulty node has no driver-crash stage"

        # Every status the new pod is written with, from before it exists.
        rv = client.list("v1", "Pod", namespace=ns)["metadata"]["resourceVersion"]
        seen: list[dict[str, Any]] = []
        stop = threading.Event()

        def watch() -> None:
            since = rv
            while not stop.is_set():
                for event in client.watch(
                    "v1", "Pod", namespace=ns, resource_version=since, timeout_seconds=1
                ):
                    obj = event.get("object") or {}
                    since = obj.get("metadata", {}).get("resourceVersion", since)
                    if obj.get("metadata", {}).get("name") == "drv-new":
                        seen.append(obj)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            client.create(_pod("drv-new", ns, node, NEW))
            _wait(
                "the new driver crash-looping",
                lambda: hosts.crash_looping(get("drv-new")),
                lambda: get("drv-new"),
            )
            crashed = get("drv-new")
            ctr = crashed["status"]["containerStatuses"][0]
            # what k8s-operator-libs reads as a failing driver pod
            assert ctr["restartCount"] > 10 and not ctr["ready"]
            assert crashed["status"]["phase"] == "Running"
            time.sleep(2)  # kwok would have made it Ready by now, had its stage won
        finally:
            stop.set()
            watcher.join(5)
        assert seen, "the watch saw no status of the new pod"
        assert not any(hosts.pod_ready(p) for p in seen), "the failing driver was Ready once"

        # The driver the host already runs still starts there.
        client.create(_pod("drv-again", ns, node, OLD))
        _wait(
            "the running driver starts again",
            lambda: hosts.pod_ready(get("drv-again")),
            lambda: get("drv-again"),
        )

        # Clearing the fault removes the stage and heals the crash-looping pod.
        client.delete("v1", "Pod", "drv-again", ns)
        client.patch("v1", "Node", node, {"metadata": {"annotations": {sim.FAULT_ANN: None}}})

        def healed() -> bool:
            sim_.step()
            return hosts.pod_ready(get("drv-new"))

        _wait("the new driver healed", healed, lambda: get("drv-new"))
        gone = client.get(kwok_stages.API, "Stage", kwok_stages.DRIVER_CRASH_PREFIX + node)
        assert gone is None, "the stage outlived the fault"
    finally:
        sim_.stop()
        assert kwok_stages.driver_crash_stages(client) == set()
        client.delete("v1", "Node", node)
        client.delete("v1", "Namespace", ns)
