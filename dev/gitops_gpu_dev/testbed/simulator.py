"""Runs the simulated GPU Operator (or, beside the real one, only the hosts) and NVML against
the testbed's KWOK nodes.

With ``plays_operator`` (``--operator sim``) each tick reads NVIDIADrivers and GPU nodes,
applies `operator_sim` to them, and writes the resulting node patches and CR statuses. Beside
the real operator (``--operator real``) it plays only what no operator writes (:mod:`hosts`):
the driver a host runs once its driver pod is Ready, GFD's driver labels, crash-looping driver
pods for the ``upgrade-failed`` fault, and nudges for the upgrade controller. Either way it
plays the MIG manager's ``mig.config.state``, NotReady nodes, and publishes each node's
NodeGPUReport as the agent would (from the NVML snapshot of the node's GPU product, with the
host's driver, MIG mode and faults). ``tick`` sets the time scale: 0.1 s makes an upgrade of a
node take ~1 s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.agent import publish
from gitops_gpu.errors import KubeError
from gitops_gpu.sync import slim
from gitops_gpu.sync.live import selector_matches
from gitops_gpu_dev.testbed import hosts, kwok_stages, plugin_sim
from gitops_gpu_dev.testbed import operator_sim as sim
from gitops_gpu_dev.testbed.nodes import KWOK_ANNOTATION

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MANAGER = "gpu-operator-sim"
ReportFn = Callable[[Obj], Obj | None]


class Simulator:
    def __init__(
        self,
        client: kube.Client,
        *,
        tick: float = 0.5,
        report_fn: ReportFn | None = None,
        report_heartbeat: float = 120.0,
        plays_operator: bool = True,
        operator_namespace: str = "gpu-operator",
        nudge_every: float = 1.0,
    ) -> None:
        self.client = client
        self.plays_operator = plays_operator
        self.operator_namespace = operator_namespace
        self.nudge_every = nudge_every
        self._last_nudge = 0.0
        self.tick = tick
        self.report_fn = report_fn
        self._publishers: dict[str, publish.KubePublisher] = {}
        self.report_heartbeat = report_heartbeat
        self._status: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._crash: dict[str, str] | None = None  # node -> image its crash stage spares
        self.ticks = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Simulator:
        if self.plays_operator:  # as the operator's install would: its namespace exists
            self.client.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": self.operator_namespace},
                },
                field_manager=MANAGER,
                force=True,
            )
        self._thread = threading.Thread(target=self.run, name="gpu-operator-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for node in self._crash or {}:  # a later test's pods on a same-named node run
            try:
                self.client.delete(kwok_stages.API, "Stage", kwok_stages.DRIVER_CRASH_PREFIX + node)
            except KubeError as exc:
                log.warning("driver-crash stage of %s left: %s", node, exc)
        self._crash = None

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except KubeError as exc:
                log.warning("simulator tick failed: %s", exc)
            except Exception:  # a host keeps running: log it, the next tick tries again
                log.exception("simulator tick raised")
            self._stop.wait(self.tick)

    # -- one tick -------------------------------------------------------------------------------
    def step(self) -> int:
        """One tick; returns the number of writes made."""
        self.ticks += 1
        nodes = self._gpu_nodes()
        patches: dict[str, sim.NodePatch] = {}
        if self.plays_operator:
            writes = self._operator_step(nodes, patches)
        else:
            writes = self._hosts_step(nodes, patches)
        configs = plugin_sim.read_configs(self.client, self.operator_namespace)
        for node in nodes:
            name = node["metadata"]["name"]
            _merge(patches.setdefault(name, sim.NodePatch()), sim.mig_step(node))
            writes += self._fault_readiness(node)
            writes += self._advertise(node, configs, patches[name])
        for name, patch in patches.items():
            if patch:
                self.client.patch("v1", "Node", name, patch.as_merge_patch(), field_manager=MANAGER)
                writes += 1
        if self.report_fn is not None:
            # The reports see this tick's patches: applied to the listed nodes, not re-listed
            # (at 5,000 nodes a LIST is most of a tick).
            for node in nodes:
                done = patches.get(node["metadata"]["name"])
                if done:
                    _apply(node, done)
            writes += self._publish_reports(nodes)
        return writes

    def _gpu_nodes(self) -> list[Obj]:
        items: list[Obj] = self.client.list(
            "v1",
            "Node",
            label_selector=f"{names.GPU_PRESENT_LABEL}=true",
            decode=slim.OBJECT_LIST,  # msgspec, and no managedFields: several times json's pace
        )["items"]
        return items

    def _operator_step(self, nodes: list[Obj], patches: dict[str, sim.NodePatch]) -> int:
        """The simulated operator: upgrade state machine, deploy labels, CR statuses."""
        drivers = self.client.list(*names.NVIDIA_DRIVER_API)["items"]
        cp = self.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
        states: dict[str, str] = {}
        index: dict[str, dict[str, list[Obj]]] = {}  # label key -> value -> nodes
        for drv in drivers:
            selector = (drv.get("spec") or {}).get("nodeSelector") or {}
            owned = [
                n
                for n in _candidates(nodes, selector, index)
                if selector_matches(selector, n["metadata"].get("labels") or {})
            ]
            for name, patch in sim.driver_step(owned, drv).items():
                _merge(patches.setdefault(name, sim.NodePatch()), patch)
            states[drv["metadata"]["name"]] = sim.driver_state(owned, drv)
        for node in nodes if cp is not None else ():
            _merge(
                patches.setdefault(node["metadata"]["name"], sim.NodePatch()), sim.node_labels(node)
            )
        writes = 0
        for name, state in states.items():
            writes += self._set_status(names.NVIDIA_DRIVER_API, name, state)
        if cp is not None:
            writes += self._set_status(
                names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME, sim.cluster_policy_state(nodes)
            )
        return writes

    def _hosts_step(self, nodes: list[Obj], patches: dict[str, sim.NodePatch]) -> int:
        """Beside the real operator: the hosts' driver facts, faults and upgrade nudges."""
        pods = self.client.list(
            "v1", "Pod", namespace=self.operator_namespace, label_selector=hosts.DRIVER_COMPONENT
        )["items"]
        by_node = hosts.driver_pods_by_node(pods)
        writes = self._crash_stages(nodes, by_node)
        ready_to_nudge: list[Obj] = []
        for node in nodes:
            name = node["metadata"]["name"]
            patch, pod_status = hosts.host_step(node, by_node.get(name))
            _merge(patches.setdefault(name, sim.NodePatch()), patch)
            if hosts.handled(node, by_node.get(name), pod_status is not None):
                ready_to_nudge.append(node)
            if pod_status is not None:
                self.client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{pod_status.namespace}/pods/{pod_status.name}/status",
                    body={"status": pod_status.status},
                    content_type="application/merge-patch+json",
                )
                self._last_nudge = 0.0  # the operator should see it now, not in 2 minutes
                writes += 1
        now = time.monotonic()
        if now - self._last_nudge >= self.nudge_every:
            self._last_nudge = now
            for node in ready_to_nudge:
                nudge = hosts.nudge_patch(node)
                if nudge is not None:
                    self.client.patch("v1", "Node", node["metadata"]["name"], nudge)
                    writes += 1
        return writes

    def _crash_stages(self, nodes: list[Obj], by_node: Mapping[str, hosts.Obj]) -> int:
        """One driver-crash stage per node with the upgrade-failed fault, none for others."""
        if self._crash is None:  # an earlier run's stages: redone or removed below
            self._crash = dict.fromkeys(kwok_stages.driver_crash_stages(self.client), "")
        want: dict[str, str] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            image = hosts.crash_image(node, by_node.get(name), self._crash.get(name))
            if image:
                want[name] = image
        writes = 0
        for name, image in want.items():
            if self._crash.get(name) != image:
                stage = kwok_stages.driver_crash_stage(name, image, hosts.CRASH_RESTARTS)
                self.client.apply(stage, field_manager=MANAGER, force=True)
                writes += 1
        for name in set(self._crash) - set(want):
            self.client.delete(kwok_stages.API, "Stage", kwok_stages.DRIVER_CRASH_PREFIX + name)
            writes += 1
        self._crash = want
        return writes

    def _set_status(self, api: tuple[str, str], name: str, state: str) -> int:
        if self._status.get((api[1], name)) == state:
            return 0
        body = {
            "apiVersion": api[0],
            "kind": api[1],
            "metadata": {"name": name},
            "status": {"state": state},
        }
        try:
            self.client.apply(body, field_manager=MANAGER, subresource="status", force=True)
        except KubeError as exc:
            log.debug("status of %s/%s not written: %s", api[1], name, exc)
            return 0
        self._status[(api[1], name)] = state
        return 1

    def _advertise(self, node: Obj, configs: plugin_sim.Configs, patch: sim.NodePatch) -> int:
        """The host's device plugin and GFD: allocatable and sharing labels from its config."""
        labels, status = plugin_sim.node_step(node, configs, sim.fault(node))
        patch.labels.update(labels)
        if status is None:
            return 0
        self.client.request(
            "PATCH",
            f"/api/v1/nodes/{node['metadata']['name']}/status",
            body=status,
            content_type="application/merge-patch+json",
        )
        # the reports this tick see it, as they see the label patches
        have = node.setdefault("status", {})
        have["allocatable"] = {**(have.get("allocatable") or {}), **status["status"]["allocatable"]}
        return 1

    def _fault_readiness(self, node: Obj) -> int:
        """not-ready: kwok stops managing the node and its Ready condition goes False."""
        name = node["metadata"]["name"]
        ann = node["metadata"].get("annotations") or {}
        managed = ann.get(KWOK_ANNOTATION) == "fake"
        if sim.fault(node) == "not-ready" and managed:
            self.client.patch(
                "v1", "Node", name, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}}
            )
            conds = [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "message": "simulated: node stopped posting status",
                }
            ]
            self.client.request(
                "PATCH",
                f"/api/v1/nodes/{name}/status",
                body={"status": {"conditions": conds}},
                content_type="application/strategic-merge-patch+json",
            )
            return 2
        if sim.fault(node) != "not-ready" and not managed:
            self.client.patch(
                "v1", "Node", name, {"metadata": {"annotations": {KWOK_ANNOTATION: "fake"}}}
            )
            return 1
        return 0

    def _publish_reports(self, nodes: list[Obj]) -> int:
        """Publish through the agent's own publisher (same dedup, heartbeat and ownership)."""
        assert self.report_fn is not None
        writes = 0
        for node in nodes:
            name = node["metadata"]["name"]
            status = self.report_fn(node)
            if status is None:
                continue
            pub = self._publishers.get(name)
            if pub is None:
                pub = publish.KubePublisher(
                    self.client, name, heartbeat_seconds=self.report_heartbeat
                )
                self._publishers[name] = pub
            writes += int(pub.publish(status))
        return writes


def _candidates(
    nodes: list[Obj], selector: dict[str, str], index: dict[str, dict[str, list[Obj]]]
) -> list[Obj]:
    """The nodes that carry the selector's first label (all nodes for an empty selector), by
    an index built once per tick: 125 drivers x 5,000 nodes is otherwise most of a tick."""
    if not selector:
        return nodes
    key = next(iter(selector))
    if key not in index:
        by_value: dict[str, list[Obj]] = {}
        for node in nodes:
            value = (node["metadata"].get("labels") or {}).get(key)
            if value is not None:
                by_value.setdefault(value, []).append(node)
        index[key] = by_value
    return index[key].get(selector[key], [])


def _apply(node: Obj, patch: sim.NodePatch) -> None:
    """A merge patch's effect on the listed node, as the apiserver applied it."""
    meta = node["metadata"]
    for field_, changes in (("labels", patch.labels), ("annotations", patch.annotations)):
        values = meta.setdefault(field_, {})
        for key, value in changes.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
    if patch.unschedulable is not None:
        node.setdefault("spec", {})["unschedulable"] = patch.unschedulable


def _merge(into: sim.NodePatch, other: sim.NodePatch) -> None:
    into.labels.update(other.labels)
    into.annotations.update(other.annotations)
    if other.unschedulable is not None:
        into.unschedulable = other.unschedulable
