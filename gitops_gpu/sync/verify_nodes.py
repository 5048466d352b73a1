"""New nodes take no GPU work before they are verified (NodePool ``verifyNewNodes: true``).

A node of such a pool that gitops-gpu has not verified yet (no :data:`names.VERIFIED_ANNOTATION`)
carries the ``NoSchedule`` taint :data:`names.UNVERIFIED_TAINT`; once the ladder judges it
Healthy on the commit the pool's objects carry, the annotation records that commit and the
taint goes. The taint is ours: added and removed only here, by key, every other taint kept (a
merge patch with the node's resourceVersion, so a concurrent change is never overwritten; a
409 is read again and retried a few times, since a joining node is busy: status, the
lifecycle controller's taints, NFD and GPU feature labels). A node verified once stays
verified: later commits are the gate's job.
The pool's operands tolerate the taint (fleet/compile.py), or nothing could verify the node.
A pool that stops verifying new nodes has our taint removed from its nodes.

A pass adds the taint within one interval of a node joining; for no window at all, register
nodes with it (kubelet ``--register-with-taints=gitops-gpu.io/unverified=:NoSchedule``, or the
cloud node group's taints): gitops-gpu removes it the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.components.health import Health, PoolHealth
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet.compiled import PoolTarget
from gitops_gpu.sync import marks
from gitops_gpu.sync.marks import NodeMarks

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
TAINT = {"key": names.UNVERIFIED_TAINT, "effect": "NoSchedule"}


@dataclass(frozen=True)
class Change:
    node: str
    taint: bool  # True: add our taint; False: remove it
    verified: str | None = None  # the commit to record as verified on


def decide(
    target: PoolTarget | None,
    commit: str | None,
    health: PoolHealth | None,
    members: Iterable[Obj],
    marked: NodeMarks | None = None,
) -> list[Change]:
    """What to change on the pool's nodes. ``commit``: what the pool's objects carry (None:
    not one commit yet); ``health``: the ladder's verdicts at that commit; ``marked``: the
    nodes' marks (sync/marks.py), if known."""
    if target is None or not target.verify_new_nodes:
        # Most pools: only our taint to shed; none to walk when no node has it.
        if marked is not None and not marked.tainted:
            return []
        return [
            Change(str(node["metadata"].get("name")), taint=False)
            for node in members
            if marks.tainted(node)
        ]
    verdicts = {n.node: n.health for n in health.nodes} if health is not None else {}
    out = []
    for node in members:
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        tainted = marks.tainted(node)
        verified = names.VERIFIED_ANNOTATION in (meta.get("annotations") or {})
        if verified:
            if tainted:
                out.append(Change(name, taint=False))
            continue
        if commit is not None and verdicts.get(name) is Health.HEALTHY:
            out.append(Change(name, taint=False, verified=commit))
        elif not tainted:
            out.append(Change(name, taint=True))
    return out


def apply(client: kube.Client, changes: Sequence[Change]) -> int:
    """Carry ``changes`` out; returns how many nodes were written. A node that went, or kept
    changing under us (409 on every try), is left for the next pass."""
    written = 0
    for change in changes:
        try:
            done = _apply_one(client, change)
        except GitopsGpuError as exc:
            log.info("node %s not %s this pass: %s", change.node, _what(change), exc)
            continue
        if done:
            log.info("node %s %s", change.node, _what(change))
            written += 1
    return written


CONFLICT_TRIES = 4


def _apply_one(client: kube.Client, change: Change) -> bool:
    for attempt in range(CONFLICT_TRIES):
        node = client.get("v1", "Node", change.node)
        if node is None:
            return False
        taints = [t for t in _taints(node) if t.get("key") != TAINT["key"]]
        if change.taint:
            taints.append(dict(TAINT))
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": taints},
        }
        if change.verified is not None:
            patch["metadata"]["annotations"] = {names.VERIFIED_ANNOTATION: change.verified}
        try:
            client.patch("v1", "Node", change.node, patch, field_manager=names.FIELD_MANAGER)
        except kube.StaleError:
            if attempt == CONFLICT_TRIES - 1:
                raise
            continue
        return True
    return False


def _taints(node: Obj) -> list[Obj]:
    return list((node.get("spec") or {}).get("taints") or [])


def _what(change: Change) -> str:
    if change.taint:
        return f"tainted {names.UNVERIFIED_TAINT}:NoSchedule (not verified yet)"
    if change.verified is not None:
        return f"verified on {change.verified[:12]}: {names.UNVERIFIED_TAINT} removed"
    return f"untainted ({names.UNVERIFIED_TAINT} not wanted)"
