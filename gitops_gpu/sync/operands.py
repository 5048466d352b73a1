"""Staged operand upgrades: operand pods move to a new revision only when their stage adopts.

Compile sets the ClusterPolicy's ``daemonsets.updateStrategy: OnDelete``. The GPU Operator then
updates its operand DaemonSets (toolkit, device plugin, DCGM, DCGM exporter, GFD, MIG manager,
validator, ...) as soon as the ClusterPolicy changes, but with OnDelete no pod is replaced until
someone deletes it (operator v26.7.0 controllers/object_controls.go
``applyUpdateStrategyConfig``). gitops-gpu is that someone, stage by stage:

- A pool *expects the current revision* when the ClusterPolicy its commit compiles to is the
  one live in the cluster (same spec). Only such pools' nodes are touched; a later stage whose
  commit is older keeps the previous revision until its stage adopts a commit with that
  ClusterPolicy. A rollback restores the older ClusterPolicy, the DaemonSet's current revision
  goes back, and the pods that moved are stale again: they are re-deleted.
- On such a pool, the pods whose ``controller-revision-hash`` label is not their DaemonSet's
  current revision (the newest ControllerRevision, exactly what the operator's
  ``isDaemonSetReady`` compares) are evicted, at most ``maxUnavailable`` nodes per pool at a
  time, counting nodes whose operand pods are still being recreated. Eviction, not deletion,
  so a PodDisruptionBudget is honoured; a refused eviction is the reason the pool is not
  converged.
- The gate counts a node on the commit only when every operand DaemonSet that selects it has a
  Running pod at the current revision there.
- What cannot be staged: a node that reboots or joins mid-rollout gets the current revision at
  once. On a pool that does not expect it, such nodes are reported "ahead of stage".

The driver DaemonSets belong to the NVIDIADrivers (and the operator's upgrade controller): only
DaemonSets owned by the ClusterPolicy are operands here. Everything but ``evict`` is pure.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet.budget import resolve_max_unavailable
from gitops_gpu.sync.live import selector_matches

Obj = Mapping[str, Any]
REVISION_LABEL = "controller-revision-hash"
DAEMONSET_API = ("apps/v1", "DaemonSet")
REVISION_API = ("apps/v1", "ControllerRevision")


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _owner(obj: Obj, kind: str) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("kind") == kind:
            return str(ref.get("uid"))
    return None


@dataclass(frozen=True)
class DaemonSetView:
    name: str
    revision: str  # the current revision's hash
    node_selector: Mapping[str, str]


@dataclass(frozen=True)
class Operands:
    """One pass's view of the operand DaemonSets and their pods."""

    daemonsets: Mapping[str, DaemonSetView]  # by uid
    pods_by_node: Mapping[str, tuple[Obj, ...]]  # operand pods only

    @staticmethod
    def empty() -> Operands:
        return Operands({}, {})


def read(daemonsets: Iterable[Obj], revisions: Iterable[Obj], pods: Iterable[Obj]) -> Operands:
    """Operand DaemonSets (owned by the ClusterPolicy), each with its current revision, and
    their pods by node."""
    newest: dict[str, tuple[int, Obj]] = {}
    for rev in revisions:
        owner = _owner(rev, "DaemonSet")
        number = int(rev.get("revision") or 0)
        if owner is not None and (owner not in newest or number > newest[owner][0]):
            newest[owner] = (number, rev)
    views: dict[str, DaemonSetView] = {}
    for ds in daemonsets:
        meta = _meta(ds)
        uid = str(meta.get("uid"))
        if _owner(ds, names.CLUSTER_POLICY_API[1]) is None or uid not in newest:
            continue
        rev = newest[uid][1]
        name = str(meta.get("name"))
        hashed = (_meta(rev).get("labels") or {}).get(REVISION_LABEL) or str(
            _meta(rev).get("name", "")
        ).removeprefix(name + "-")
        template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        views[uid] = DaemonSetView(name, hashed, dict(template.get("nodeSelector") or {}))
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        if _owner(pod, "DaemonSet") in views:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                by_node.setdefault(str(node), []).append(pod)
    return Operands(views, {n: tuple(p) for n, p in by_node.items()})


@dataclass(frozen=True)
class NodeOperands:
    node: str
    stale: tuple[Obj, ...]  # operand pods on an old revision
    waiting: tuple[str, ...]  # DaemonSets without a Running current pod here (being recreated)
    current: int  # operand pods Running at the current revision

    @property
    def on_revision(self) -> bool:
        return not self.stale and not self.waiting


def node_state(ops: Operands, node: Obj) -> NodeOperands:
    name = str(_meta(node).get("name"))
    labels = _meta(node).get("labels") or {}
    pods = ops.pods_by_node.get(name, ())
    stale: list[Obj] = []
    running_current: set[str] = set()
    for pod in pods:
        uid = _owner(pod, "DaemonSet")
        ds = ops.daemonsets.get(uid or "")
        if ds is None:
            continue
        revision = (_meta(pod).get("labels") or {}).get(REVISION_LABEL)
        if revision != ds.revision:
            stale.append(pod)
        elif (pod.get("status") or {}).get("phase") == "Running" and not _meta(pod).get(
            "deletionTimestamp"
        ):
            running_current.add(str(uid))
    waiting = tuple(
        sorted(
            ds.name
            for uid, ds in ops.daemonsets.items()
            if selector_matches(ds.node_selector, labels) and uid not in running_current
        )
    )
    return NodeOperands(name, tuple(stale), waiting, len(running_current))


def next_batch(
    states: Sequence[NodeOperands], max_unavailable: int | str, busy: int = 0
) -> list[NodeOperands]:
    """The nodes whose stale pods to evict now: up to ``maxUnavailable`` of the pool, less the
    nodes still recreating operand pods and other busy nodes (cordoned, NotReady)."""
    if not states:
        return []
    budget = resolve_max_unavailable(max_unavailable, len(states))
    in_flight = sum(1 for s in states if s.waiting and not s.stale)
    room = max(0, budget - in_flight - busy)
    return sorted((s for s in states if s.stale), key=lambda s: s.node)[:room]


def evict(client: kube.Client, pod: Obj) -> str | None:
    """Evict one pod (PDBs honoured); None when done or already gone, else why not."""
    meta = _meta(pod)
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    try:
        client.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body=body)
    except kube.NotFoundError:
        return None
    except KubeError as exc:
        return f"cannot evict {namespace}/{name}: {exc}"
    return None


# -- what the gate sees -------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolOperands:
    behind: int  # nodes not yet on the current revision (stale or recreating)
    stale_pods: int
    ahead: int  # on a pool that does not expect the current revision: nodes that run it
    first: str | None  # "operands: node n1 runs nvidia-dcgm-exporter at an old revision"


def pool_state(
    ops: Operands,
    members: Sequence[Obj],
    expects_current: bool,
    refused: Mapping[str, str] | None = None,
) -> tuple[PoolOperands, list[NodeOperands]]:
    """``refused``: node -> why its last eviction was refused (a PDB, an API error); that is
    the reason the pool is not converged."""
    states = [node_state(ops, n) for n in members]
    if expects_current:
        behind = [s for s in states if not s.on_revision]
        first = None
        why = [s for s in behind if s.stale and refused and s.node in refused]
        if why:
            assert refused is not None
            first = f"operands: node {why[0].node}: {refused[why[0].node]}"
        elif behind:
            s = behind[0]
            if s.stale:
                owners = sorted(
                    {ops.daemonsets[_owner(p, "DaemonSet") or ""].name for p in s.stale}
                )
                what = f"{', '.join(owners)} at an old revision"
            else:
                what = f"{', '.join(s.waiting)} not yet Running at the current revision"
            first = f"operands: node {s.node}: {what}"
        stale = sum(len(s.stale) for s in states)
        return PoolOperands(len(behind), stale, 0, first), states
    ahead = _ahead(states)
    return PoolOperands(0, 0, ahead, None), states


def _ahead(states: Sequence[NodeOperands]) -> int:
    """Nodes of a pool that keeps the previous revision but already run the current one of a
    DaemonSet whose other pods there are stale (rebooted or joined mid-rollout)."""
    if not any(s.stale for s in states):
        return 0
    return sum(1 for s in states if not s.stale and s.current)


# Operand DaemonSet -> the ClusterPolicy field naming its image (operator v26.7.0
# assets/state-*/*daemonset.yaml and api/nvidia/v1 ``ImagePath``).
IMAGE_FIELDS = {
    "nvidia-container-toolkit-daemonset": "toolkit",
    "nvidia-device-plugin-daemonset": "devicePlugin",
    "nvidia-dcgm-exporter": "dcgmExporter",
    "nvidia-dcgm": "dcgm",
    "gpu-feature-discovery": "gfd",
    "nvidia-mig-manager": "migManager",
    "nvidia-operator-validator": "validator",
    "nvidia-node-status-exporter": "nodeStatusExporter",
}


def image_path(component: Obj) -> str | None:
    """The image the operator runs for a ClusterPolicy component (its ``imagePath``), or None
    when the spec leaves it to the operator's environment."""
    repository, image, version = (
        str(component.get(k) or "") for k in ("repository", "image", "version")
    )
    if not repository and not version:
        return image or None
    if not (repository and image and version):
        return None
    sep = "@" if version.startswith("sha256:") else ":"
    return f"{repository}/{image}{sep}{version}"


def lagging(daemonsets: Iterable[Obj], spec: Obj) -> list[str]:
    """Operand DaemonSets (owned by the ClusterPolicy) whose pod template does not yet run the
    image ``spec`` names: the operator has not caught up with the live ClusterPolicy, and
    their current revision is still the previous one's."""
    out = []
    for ds in daemonsets:
        name = str(_meta(ds).get("name"))
        field = IMAGE_FIELDS.get(name)
        component = spec.get(field) if field else None
        if _owner(ds, names.CLUSTER_POLICY_API[1]) is None or not isinstance(component, Mapping):
            continue
        want = image_path(component)
        template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        images = {
            c.get("image")
            for c in [*(template.get("containers") or []), *(template.get("initContainers") or [])]
        }
        if want is not None and want not in images:
            out.append(name)
    return sorted(out)


def applied_at(obj: Obj, manager: str) -> float | None:
    """When ``manager`` last changed ``obj`` (its managedFields entry), as a Unix time."""
    times = [
        str(entry.get("time"))
        for entry in _meta(obj).get("managedFields") or []
        if entry.get("manager") == manager and entry.get("time")
    ]
    if not times:
        return None
    return max(_unix(t) for t in times)


@functools.lru_cache(maxsize=4096)
def _unix(stamp: str) -> float:
    # Read for every pool on every pass, and the same few stamps each time.
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
