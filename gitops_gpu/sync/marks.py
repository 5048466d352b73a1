"""The few nodes a pass's node-level steps act on, found in one walk per node-cache version.

Three steps of a pass look for nodes in a particular state: the workload waits (a driver
upgrade waiting on pods, or our record of since when: waits.py), the upgrade holds (our
hold annotation: sync/upgrade_holds.py) and new-node verification (our NoSchedule taint:
sync/verify_nodes.py). In an idle fleet no node is in any of them, yet each step walked every
node every pass (half the idle pass thread's samples at 5,000 nodes). The node cache changes rarely
(heartbeats leave its projections alone), so the walk happens once per change and an idle pass
asks three empty sets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import names
from gitops_gpu.components import holders

Obj = Mapping[str, Any]
SINCE_ANNOTATION = f"{names.GROUP}/upgrade-wait-since"


@dataclass(frozen=True)
class NodeMarks:
    """Names of the nodes in each state, as of one node-cache version."""

    waiting: frozenset[str]  # a driver-upgrade wait state, or our since-annotation
    held: frozenset[str]  # our upgrade-hold annotation
    tainted: frozenset[str]  # our unverified taint


def waiting(node: Obj) -> bool:
    meta = node.get("metadata") or {}
    labels = meta.get("labels")
    if labels and labels.get(names.UPGRADE_STATE_LABEL, "") in holders.WAIT_STATES:
        return True
    return SINCE_ANNOTATION in (meta.get("annotations") or ())


def held(node: Obj) -> bool:
    return names.UPGRADE_HOLD_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or ())


def tainted(node: Obj) -> bool:
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(t.get("key") == names.UNVERIFIED_TAINT for t in taints)


def mark(nodes: Iterable[Obj]) -> NodeMarks:
    wait, hold, taint = set(), set(), set()
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        if waiting(node):
            wait.add(name)
        if held(node):
            hold.add(name)
        if tainted(node):
            taint.add(name)
    return NodeMarks(frozenset(wait), frozenset(hold), frozenset(taint))
