"""What the ladder judges: one node's evidence as plain values, and the reader that gathers it.

:class:`NodeEvidence` holds the Node as the apiserver returns it (labels, annotations, status
conditions, allocatable, cordon), its NodeGPUReport (or None), the GPU Operator pods scheduled on
it and the time the evidence was read (so staleness is judged against read time, not wall time).
The reader makes three list calls per pass whatever the fleet size: nodes per pool selector,
all NodeGPUReports, all pods in the operator namespace.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import kube, names, timefmt
from gitops_gpu.components import gpu_facts
from gitops_gpu.components.gpu_facts import Gpu
from gitops_gpu.fleet.compiled import PoolTarget

OPERATOR_NAMESPACE = "gpu-operator"
Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class NodeEvidence:
    name: str
    node: Obj
    report: Obj | None
    pods: Sequence[Obj] = field(default=())
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def labels(self) -> Mapping[str, str]:
        return self.node.get("metadata", {}).get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.node.get("metadata", {}).get("annotations") or {}

    @property
    def conditions(self) -> Sequence[Obj]:
        return self.node.get("status", {}).get("conditions") or []

    @property
    def allocatable(self) -> Mapping[str, str]:
        return self.node.get("status", {}).get("allocatable") or {}

    @property
    def unschedulable(self) -> bool:
        return bool(self.node.get("spec", {}).get("unschedulable", False))

    @property
    def created(self) -> datetime | None:
        return timefmt.parse(self.node.get("metadata", {}).get("creationTimestamp"))

    def waited(self, since: datetime | None) -> float | None:
        """Seconds since ``since`` (the stage adopted the commit), or since the node joined or
        gitops-gpu last changed its MIG/sharing labels, if later: a node relabelled in a later
        batch has waited only since then. None without ``since``."""
        if since is None:
            return None
        later = [self.created, timefmt.parse(self.annotations.get(names.RELABELLED_ANNOTATION))]
        start = max([since, *(t for t in later if t is not None)])
        return (self.now - start).total_seconds()

    def condition(self, kind: str) -> Obj | None:
        return next((c for c in self.conditions if c.get("type") == kind), None)

    @property
    def status(self) -> Obj | None:
        """The NodeGPUReport's status, or None when there is no report (or no status yet)."""
        if self.report is None:
            return None
        status: Obj | None = self.report.get("status")
        return status or None

    @property
    def observed_at(self) -> datetime | None:
        return timefmt.parse((self.status or {}).get("observedAt"))

    @property
    def report_age(self) -> float | None:
        """Seconds since observedAt or, if longer, since the controller saw the report change:
        a report that stopped changing ages whatever it claims. None without observedAt."""
        observed = self.observed_at
        if observed is None:
            return None
        seen = seen_at(self.report)
        since = observed if seen is None else min(observed, seen)
        return (self.now - since).total_seconds()

    def nvml_ready(self) -> bool:
        for cond in (self.status or {}).get("conditions", []):
            if cond.get("type") == "NVMLReady":
                return bool(cond.get("status") == "True")
        return False

    @property
    def gpus(self) -> Sequence[Gpu]:
        return gpu_facts.of_status(self.status)


def seen_at(report: Obj | None) -> datetime | None:
    """When the controller's report cache saw this report's content last change (sync/live.py);
    None for a report read without the cache (the CLI's one LIST)."""
    seen = (report or {}).get(names.REPORT_SEEN_KEY)
    return seen if isinstance(seen, datetime) else None


def selector_string(selector: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def assemble(
    nodes: Iterable[Obj], reports: Iterable[Obj], pods: Iterable[Obj], now: datetime
) -> list[NodeEvidence]:
    """Pair each node with its report (same name) and its pods (spec.nodeName)."""
    by_name = {r["metadata"]["name"]: r for r in reports}
    pods_on: dict[str, list[Obj]] = defaultdict(list)
    for pod in pods:
        node_name = pod.get("spec", {}).get("nodeName")
        if node_name:
            pods_on[node_name].append(pod)
    out = []
    for node in nodes:
        name = node["metadata"]["name"]
        out.append(NodeEvidence(name, node, by_name.get(name), tuple(pods_on.get(name, ())), now))
    return sorted(out, key=lambda e: e.name)


def read_evidence(
    client: kube.Client,
    pools: Iterable[PoolTarget],
    *,
    namespace: str = OPERATOR_NAMESPACE,
    now: datetime | None = None,
) -> dict[str, list[NodeEvidence]]:
    """Evidence for every node of every pool, keyed by pool name."""
    when = now or datetime.now(UTC)
    try:
        reports = client.list(*names.NODE_GPU_REPORT_API)["items"]
    except kube.NotFoundError:  # CRD not installed: every node reads as "no report"
        reports = []
    pods = client.list("v1", "Pod", namespace=namespace)["items"]
    out: dict[str, list[NodeEvidence]] = {}
    for pool in pools:
        nodes = client.list("v1", "Node", label_selector=selector_string(pool.node_selector))
        out[pool.name] = assemble(nodes["items"], reports, pods, when)
    return out


def read_pool_evidence(
    client: kube.Client,
    pool: PoolTarget,
    *,
    namespace: str = OPERATOR_NAMESPACE,
    now: datetime | None = None,
) -> list[NodeEvidence]:
    return read_evidence(client, [pool], namespace=namespace, now=now)[pool.name]
