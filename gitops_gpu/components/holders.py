"""Who holds a node the driver upgrade waits on: pure, from the node's pods and the PDBs.

The GPU Operator's upgrade (k8s-operator-libs pkg/upgrade, v26.7.0) waits on workloads in three
states, each for its own set of pods on the node:

- ``wait-for-jobs-required``: pods matching the NVIDIADriver's
  ``upgradePolicy.waitForCompletion.podSelector`` still Running or Pending;
- ``pod-deletion-required``: GPU pods (a container requesting or limiting ``nvidia.com/gpu*`` or
  ``nvidia.com/mig-*``, Running or Pending: cmd/gpu-operator's gpuPodSpecFilter), deleted by the
  operator through the eviction API (pod_manager.go: the drain helper's DeleteOrEvictPods), so
  held by a PodDisruptionBudget that allows no disruption, a long grace period or a finalizer;
- ``drain-required``: every pod a drain evicts (not a DaemonSet's, not a mirror pod, not
  finished; ``upgradePolicy.drain.podSelector`` narrows it), held by a PodDisruptionBudget that
  allows no disruption.

Each holder is said the way a person acts on it: "pod research/train-llm-7 (Job, PDB train-pdb
allows 0)". Nothing here evicts: the pool's upgradePolicy (``force``, timeouts) decides that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_gpu import timefmt

Obj = Mapping[str, Any]
WAIT_FOR_JOBS = "wait-for-jobs-required"
POD_DELETION = "pod-deletion-required"
DRAIN = "drain-required"
WAIT_STATES = frozenset({WAIT_FOR_JOBS, POD_DELETION, DRAIN})
EVICTING = frozenset({POD_DELETION, DRAIN})  # the states whose pods go by eviction (PDBs)
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SHOWN = 3  # holders named in one line; the rest are counted


@dataclass(frozen=True)
class Holder:
    pod: str  # namespace/name
    owner: str  # the controller's kind ("Job"), or "no controller"
    pdbs: tuple[str, ...] = ()  # "train-pdb allows 0": budgets that block its eviction

    def __str__(self) -> str:
        extra = "".join(f", PDB {p}" for p in self.pdbs)
        return f"pod {self.pod} ({self.owner}{extra})"


@dataclass(frozen=True)
class NodeWait:
    """A node the upgrade waits on, since when (epoch seconds; None: not known), held by whom."""

    node: str
    pool: str
    state: str
    since: float | None
    holders: tuple[Holder, ...]

    def waited(self, now: float) -> float:
        return max(0.0, now - self.since) if self.since is not None else 0.0

    def hold(self) -> str:
        """For the commit status (which has its own time): "gpu-7 waits on pod ns/x (Job, PDB
        x allows 0)"; "" when no pod holds it."""
        if not self.holders:
            return ""
        named = ", ".join(str(h) for h in self.holders[:SHOWN])
        more = len(self.holders) - SHOWN
        return f"{self.node} waits on {named}" + (f" and {more} more" if more > 0 else "")

    def describe(self, now: float) -> str:
        """ "waiting 3d 4h for pod research/train-llm-7 (Job, PDB train-pdb allows 0)"."""
        how_long = f"waiting {age(self.waited(now))}" if self.since is not None else "waiting"
        if not self.holders:
            return f"{how_long} in {self.state} (no pod holds it now)"
        named = ", ".join(str(h) for h in self.holders[:SHOWN])
        more = len(self.holders) - SHOWN
        return f"{how_long} for {named}" + (f" and {more} more" if more > 0 else "")


def age(seconds: float) -> str:
    """ "45s", "12m", "5h 3m", "3d 4h": the two largest units."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if hours == 0:
        return f"{minutes}m"
    if days == 0:
        return f"{hours}h {minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{days}d {hours % 24}h" if hours % 24 else f"{days}d"


def holders(
    state: str, pods: Iterable[Obj], pdbs: Sequence[Obj], selector: Obj | None = None
) -> tuple[Holder, ...]:
    """The pods that hold a node in ``state``, sorted by name. ``pods``: the node's pods (for
    wait-for-jobs, already those matching the waitForCompletion selector); ``pdbs``: the
    budgets of their namespaces; ``selector``: the drain's podSelector, as a LabelSelector."""
    out = []
    for pod in pods:
        if not _active(pod):
            continue
        if state == POD_DELETION and not is_gpu_pod(pod):
            continue
        if state == DRAIN and (_daemon(pod) or not matches(selector, _labels(pod))):
            continue
        blocking = tuple(_blocking(pod, pdbs)) if state in EVICTING else ()
        meta = pod.get("metadata") or {}
        out.append(Holder(f"{meta.get('namespace')}/{meta.get('name')}", _owner(pod), blocking))
    return tuple(sorted(out, key=lambda h: h.pod))


def is_gpu_pod(pod: Obj) -> bool:
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        res = ctr.get("resources") or {}
        for names in (res.get("limits") or {}, res.get("requests") or {}):
            if any(str(n).startswith(GPU_RESOURCE_PREFIXES) for n in names):
                return True
    return False


def matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions. None selects everything; an
    empty selector too (as a drain's podSelector and a PDB's ``{}`` mean)."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(str(op), False)
        if not ok:
            return False
    return True


def parse_selector(text: str) -> Obj | None:
    """An equality-based selector string ("app=train,tier!=x"), as upgradePolicy's
    ``podSelector`` strings are, to a LabelSelector; "" is None (everything)."""
    if not text.strip():
        return None
    labels: dict[str, str] = {}
    exprs: list[dict[str, Any]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            exprs.append({"key": key, "operator": "NotIn", "values": [value]})
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            labels[key] = value
        elif part.startswith("!"):
            exprs.append({"key": part[1:].strip(), "operator": "DoesNotExist"})
        else:
            exprs.append({"key": part, "operator": "Exists"})
    return {"matchLabels": labels, "matchExpressions": exprs}


def since(annotation: str | None, state: str) -> float | None:
    """The time in our ``<state>@<RFC 3339>`` annotation, when it is for ``state``."""
    if not annotation or "@" not in annotation:
        return None
    noted, _, when = annotation.partition("@")
    parsed = timefmt.parse(when) if noted == state else None
    return parsed.timestamp() if parsed is not None else None


def _blocking(pod: Obj, pdbs: Sequence[Obj]) -> Iterable[str]:
    meta = pod.get("metadata") or {}
    for pdb in pdbs:
        pmeta = pdb.get("metadata") or {}
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        selector = (pdb.get("spec") or {}).get("selector")
        if selector is None or not matches(selector, _labels(pod)):
            continue  # a PDB without a selector selects nothing (policy/v1)
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed", 0)
        if allowed < 1:
            yield f"{pmeta.get('name')} allows {allowed}"


def _active(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Running", "Pending", None)


def _daemon(pod: Obj) -> bool:
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def _owner(pod: Obj) -> str:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    ctl = next((o for o in refs if o.get("controller")), refs[0] if refs else None)
    return str(ctl.get("kind")) if ctl else "no controller"


def _labels(pod: Obj) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}
