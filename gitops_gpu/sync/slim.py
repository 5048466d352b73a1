"""What the informers keep of a watched object: only the fields decisions read.

At 5,000 nodes a whole Node is ~60 KiB of Python objects (status.images, nodeInfo, every
condition with four timestamps, kwok's annotations) of which a pass reads labels, a few
annotations, Ready (and since when), unschedulable and allocatable GPUs. Projecting on arrival
keeps the cache small, and comparing projections lets a heartbeat (new resourceVersion, same
facts) leave the cache untouched, so nothing downstream recomputes for it.

Projections keep the apiserver's shape (``metadata.labels``, ``status.conditions``...): every
reader of a cached object reads a projection without knowing. Strings that repeat on every
node (label keys and values, condition types) are interned once.

Nodes and pods are decoded by msgspec into TypedDicts naming only those fields: the rest of
the JSON (images, nodeInfo, pod specs) is skipped while parsing, never built as Python
objects. Profiled at 5,000 KWOK nodes (~70 node events/s), json.loads plus projection was two
thirds of the idle controller's CPU; the typed decode is ~4x cheaper. Anything the types do
not fit (an ERROR event's Status, a null) falls back to json.loads.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypedDict, TypeVar, cast

import msgspec

from gitops_gpu import names
from gitops_gpu.components.gpu_facts import Ecc, Gpu, from_mapping
from gitops_gpu.kept import Kept
from gitops_gpu.sync import node_labels

Obj = dict[str, Any]
T = TypeVar("T")
Projection = Callable[[Obj], Obj]

# Node annotations read by the ladder and the label batches (ours and the GPU Operator's).
ANNOTATION_PREFIXES = (names.GROUP + "/", "nvidia.com/")
ALLOCATABLE_PREFIX = "nvidia.com/"
_POD_CONDITIONS = frozenset({"Ready"})
_CONTAINER_KEYS = ("name", "ready", "restartCount", "state")
# NodeGPUReport status fields the ladder reads besides conditions, Xids and GPUs.
# Not nodeName (the report's own name) nor xidEventsTotal (xidEvents is read): with conditions,
# xidEvents and gpus that is 9 keys, which fit half the dict table 11 need (~200 bytes a report).
_REPORT_KEYS = (
    "observedAt",
    "heartbeatSeconds",
    "driverVersion",
    "gpuCount",
    "migMode",
    "xidMonitoring",
)
_META_KEYS = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp")
# A report's uid and creation time are read by nothing (its age is its observedAt).
_REPORT_META_KEYS = ("name", "namespace", "deletionTimestamp")
_OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller")


def _i(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def _strings(mapping: Mapping[str, Any] | None, prefixes: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        sys.intern(k): _i(v)
        for k, v in (mapping or {}).items()
        if not prefixes or k.startswith(prefixes)
    }


def _meta(
    meta: Mapping[str, Any],
    annotations: tuple[str, ...] | None,
    owners: bool = True,
    keys: tuple[str, ...] = _META_KEYS,
) -> Obj:
    out: Obj = {k: meta[k] for k in keys if k in meta}
    out["resourceVersion"] = meta.get("resourceVersion")
    if meta.get("labels"):
        out["labels"] = _strings(meta["labels"])
    if owners and meta.get("ownerReferences"):
        out["ownerReferences"] = [
            {k: o.get(k) for k in _OWNER_KEYS} for o in meta["ownerReferences"]
        ]
    if annotations is None:
        if meta.get("annotations"):
            out["annotations"] = _strings(meta["annotations"])
    else:
        kept = _strings(meta.get("annotations"), annotations)
        if kept:
            out["annotations"] = kept
    return out


def _condition(cond: Mapping[str, Any]) -> Obj:
    # No timestamps: a heartbeat only moves lastHeartbeatTime, which nothing reads. Most
    # objects' conditions read the same ("NVML read 8 GPUs"): equal ones are kept once.
    return _shared(_fields(cond))


def _fields(cond: Mapping[str, Any]) -> Obj:
    return {k: _i(cond[k]) for k in ("type", "status", "reason", "message") if cond.get(k)}


def _ready(cond: Mapping[str, Any]) -> Obj:
    # lastTransitionTime too: it moves only when Ready flips, and "NotReady since 12m" reads it.
    out = _fields(cond)
    if cond.get("lastTransitionTime"):  # a time per node, mostly: not shared
        out["lastTransitionTime"] = cond["lastTransitionTime"]
    return out


def node(obj: Obj) -> Obj:
    """Labels (shared by the nodes of a shape: sync/node_labels.py), our and NVIDIA's
    annotations, unschedulable, Ready (and since when), allocatable GPUs."""
    status = obj.get("status") or {}
    ready = [_ready(c) for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    alloc = _shared(_strings(status.get("allocatable"), (ALLOCATABLE_PREFIX,)))  # one per shape
    raw = obj.get("spec") or {}
    spec: dict[str, Any] = {"unschedulable": True} if raw.get("unschedulable") else {}
    ours = [t for t in raw.get("taints") or [] if t.get("key") == names.UNVERIFIED_TAINT]
    if ours:  # only our taint: others' are not read, and never written back from here
        spec["taints"] = [{"key": names.UNVERIFIED_TAINT, "effect": ours[0].get("effect")}]
    meta = _meta(obj.get("metadata") or {}, ANNOTATION_PREFIXES)
    if "labels" in meta and isinstance(meta.get("name"), str):
        meta["labels"] = node_labels.shared(meta["labels"], meta["name"])
    return {"metadata": meta, "spec": spec, "status": {"conditions": ready, "allocatable": alloc}}


def pod(obj: Obj) -> Obj:
    """Operand pods: owner, revision labels, node, phase, Ready and container states."""
    status = obj.get("status") or {}
    slim_status: Obj = {k: status[k] for k in ("phase", "reason") if k in status}
    slim_status["conditions"] = [
        _condition(c) for c in status.get("conditions") or [] if c.get("type") in _POD_CONDITIONS
    ]
    for key in ("initContainerStatuses", "containerStatuses"):
        if status.get(key):
            slim_status[key] = [
                {k: cs[k] for k in _CONTAINER_KEYS if k in cs} for cs in status[key]
            ]
    node_name = (obj.get("spec") or {}).get("nodeName")
    return {
        "metadata": _meta(obj.get("metadata") or {}, None),
        "spec": {"nodeName": node_name} if node_name else {},
        "status": slim_status,
    }


def report(obj: Obj) -> Obj:
    """NodeGPUReports: what the ladder reads (freshness, NVMLReady, driver, per-GPU state, MIG,
    ECC, page retirement, Xids); not the GPU telemetry (name, PCI, memory, temperature,
    power) that changes on every heartbeat and no decision reads. GPUs are kept as
    :class:`Gpu` records; the owner reference (the Node, for garbage collection) is dropped."""
    status = obj.get("status") or {}
    slim_status: Obj = {k: _i(status[k]) for k in _REPORT_KEYS if k in status}
    if "conditions" in status:
        slim_status["conditions"] = [_condition(c) for c in status["conditions"] or []]
    if "xidEvents" in status:
        slim_status["xidEvents"] = [
            {k: _i(v) for k, v in ev.items()} for ev in status["xidEvents"] or []
        ]
    if "gpus" in status:
        gpus = status["gpus"] if isinstance(status["gpus"], list) else []
        slim_status["gpus"] = [_gpu(g) for g in gpus if isinstance(g, Gpu | Mapping)]
    return {
        "metadata": _meta(
            obj.get("metadata") or {}, ANNOTATION_PREFIXES, owners=False, keys=_REPORT_META_KEYS
        ),
        "status": slim_status,
    }


def report_heartbeat(old: Obj, obj: Obj) -> Obj | None:
    """``old`` (a report's projection) moved to ``obj``'s resourceVersion and observedAt, when
    those are all that changed (the agent's heartbeat, most report events); else None. Cheaper
    than projecting: the statuses compare in C, and only the metadata is projected."""
    status, was = obj.get("status") or {}, old.get("status") or {}
    observed = status.get("observedAt")
    if {**status, "observedAt": observed} != {**was, "observedAt": observed}:
        return None
    raw, kept = obj.get("metadata") or {}, old["metadata"]
    if not _same_meta(raw, kept, ANNOTATION_PREFIXES):
        return None
    meta = {**kept, "resourceVersion": raw.get("resourceVersion")}
    return {"metadata": meta, "status": {**was, "observedAt": observed}}


def _same_meta(raw: Mapping[str, Any], kept: Obj, annotations: tuple[str, ...]) -> bool:
    """A report's ``_meta`` of ``raw`` would equal ``kept`` but for resourceVersion: compared
    field by field, building nothing (a heartbeat's metadata, ~80 a second at 10,000 nodes)."""
    for key in _REPORT_META_KEYS:
        if raw.get(key) != kept.get(key):
            return False
    if (raw.get("labels") or {}) != kept.get("labels", {}):
        return False
    if raw.get("annotations") or "annotations" in kept:
        return bool(_strings(raw.get("annotations"), annotations) == kept.get("annotations", {}))
    return True


# Distinct small mappings seen, each kept once: a GPU's migMode, pageRetirement and ECC counts
# read the same on nearly every GPU (40,000 at 5,000 nodes), and projections are read-only.
_SHARED: Kept[tuple[tuple[str, Any], ...], Obj] = Kept(4096)


def _shared(mapping: Obj) -> Obj:
    try:
        return _SHARED.one(tuple(mapping.items()), mapping)
    except TypeError:  # a value that cannot be hashed (a list): kept as it is
        return mapping


def _gpu(gpu: Gpu | Mapping[str, Any]) -> Gpu:
    g = gpu if isinstance(gpu, Gpu) else from_mapping(gpu)  # typed decode, or json's fallback
    ecc = g.ecc_uncorrected
    return Gpu(
        index=g.index,
        uid=g.uid,  # one per GPU, held as a number (components/gpu_facts)
        state=_i(g.state),
        error=g.error,
        mig_mode=None if g.mig_mode is None else _shared(_strings(g.mig_mode)),
        ecc_uncorrected=None if ecc is None else cast(Ecc, _shared(dict(ecc))),
        page_retirement=None if g.page_retirement is None else _shared(_strings(g.page_retirement)),
    )


def policy(obj: Obj) -> Obj:
    """The ClusterPolicy: whole, but each managedFields entry only says who wrote it and when
    (the operand roll waits on our last apply; fieldsV1 is the bulk and nothing reads it)."""
    meta = obj.get("metadata") or {}
    meta["managedFields"] = [
        {k: e[k] for k in ("manager", "operation", "time") if k in e}
        for e in meta.get("managedFields") or []
    ]
    return obj


def trimmed(obj: Obj) -> Obj:
    """Any other kind: whole, less managedFields (often the bulk; nothing reads them)."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


PROJECTIONS: Mapping[str, Projection] = {
    "Node": node,
    "Pod": pod,
    "NodeGPUReport": report,
    "ClusterPolicy": policy,
}


def for_kind(kind: str) -> Projection:
    return PROJECTIONS.get(kind, trimmed)


# kind -> (old projection, decoded event object) -> the new projection when only what a
# heartbeat moves has changed, else None (project it).
HEARTBEATS: Mapping[str, Callable[[Obj, Obj], Obj | None]] = {"NodeGPUReport": report_heartbeat}


# --- typed decoding: only the fields the projections read ---------------------------------


class _Cond(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class _NodeCond(_Cond, total=False):
    lastTransitionTime: str  # kept for a node's Ready (a report's must compare as projected)


class _Owner(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class _ReportMeta(TypedDict, total=False):
    """What a report's projection keeps: not even decoded are its owner (its Node, for garbage
    collection), uid and creation time."""

    name: str
    namespace: str
    resourceVersion: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]


class _Meta(_ReportMeta, total=False):
    uid: str
    creationTimestamp: str
    ownerReferences: list[_Owner]


# ``continue`` is a keyword: the functional syntax.
_ListMeta = TypedDict(
    "_ListMeta", {"resourceVersion": str, "continue": str, "remainingItemCount": int}, total=False
)


class _NodeSpec(TypedDict, total=False):
    unschedulable: bool
    taints: list[dict[str, Any]]


class _NodeStatus(TypedDict, total=False):
    conditions: list[_NodeCond]
    allocatable: dict[str, str]


class _Node(TypedDict, total=False):
    metadata: _Meta
    spec: _NodeSpec
    status: _NodeStatus


class _Container(TypedDict, total=False):
    name: str
    ready: bool
    restartCount: int
    state: dict[str, Any]


class _PodSpec(TypedDict, total=False):
    nodeName: str


class _PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    conditions: list[_Cond]
    containerStatuses: list[_Container]
    initContainerStatuses: list[_Container]


class _Pod(TypedDict, total=False):
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


class _ReportStatus(TypedDict, total=False):
    observedAt: str
    heartbeatSeconds: int
    driverVersion: str
    gpuCount: int
    migMode: str
    xidMonitoring: str
    xidEvents: list[dict[str, Any]]
    conditions: list[_Cond]
    gpus: list[Gpu]  # decoded as records: a heartbeat compares them with the kept ones in C


class _Report(TypedDict, total=False):
    metadata: _ReportMeta
    status: _ReportStatus


class _Event(TypedDict, Generic[T], total=False):
    type: str
    object: T


class _List(TypedDict, Generic[T], total=False):
    metadata: _ListMeta
    items: list[T]


class _ManagedEntry(TypedDict, total=False):
    """Who last wrote an object and when; fieldsV1, the bulk, is skipped."""

    manager: str
    operation: str
    time: str


class _ObjectMeta(TypedDict, total=False):
    """Every metadata field; of managedFields only who wrote when (an NVIDIADriver's last apply
    by us is when its pool adopted the commit it carries: observe.py)."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[dict[str, Any]]
    finalizers: list[str]
    managedFields: list[_ManagedEntry]


class _Object(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _ObjectMeta
    spec: Any
    status: Any


Decode = Callable[[bytes], Any]


def _with_fallback(decoder: msgspec.json.Decoder[Any]) -> Decode:
    def decode(data: bytes) -> Any:
        try:
            return decoder.decode(data)
        except msgspec.ValidationError:
            return json.loads(data)

    return decode


_EVENTS: Mapping[str, Decode] = {
    "Node": _with_fallback(msgspec.json.Decoder(_Event[_Node])),
    "Pod": _with_fallback(msgspec.json.Decoder(_Event[_Pod])),
    "NodeGPUReport": _with_fallback(msgspec.json.Decoder(_Event[_Report])),
}
_LISTS: Mapping[str, Decode] = {
    "Node": _with_fallback(msgspec.json.Decoder(_List[_Node])),
    "Pod": _with_fallback(msgspec.json.Decoder(_List[_Pod])),
    "NodeGPUReport": _with_fallback(msgspec.json.Decoder(_List[_Report])),
}


# Any object, whole but for managedFields' fieldsV1: the managed NVIDIADrivers LISTed every pass.
OBJECT_LIST: Decode = _with_fallback(msgspec.json.Decoder(_List[_Object]))


def event_decoder(kind: str) -> Decode | None:
    """A decoder of this kind's watch events that skips unread fields; None: use json."""
    return _EVENTS.get(kind)


def list_decoder(kind: str) -> Decode | None:
    return _LISTS.get(kind)


def same_facts(a: Obj, b: Obj) -> bool:
    """Equal but for resourceVersion: a change no decision can see (a ConfigMap's is data)."""
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    return (
        a.get("spec") == b.get("spec")
        and a.get("status") == b.get("status")
        and a.get("data") == b.get("data")
        and a.get("binaryData") == b.get("binaryData")
        and {k: v for k, v in ma.items() if k != "resourceVersion"}
        == {k: v for k, v in mb.items() if k != "resourceVersion"}
    )
