"""Hold the GPU Operator's driver upgrade of nodes not started yet while their stage may not
move (a closed window, a freeze, the line stopped, a held rollout).

gitops-gpu starts no new node batch while a stage's window is closed, but the operator walks a
pool's nodes itself once its NVIDIADriver changed, ``maxParallelUpgrades`` at a time. Its
upgrade manager (k8s-operator-libs pkg/upgrade, upgrade_inplace.go) leaves a node in
``upgrade-required`` while it is labelled ``nvidia.com/gpu-driver-upgrade.skip=true``; a node
already past that state (cordoned, draining, restarting) finishes. So while held, each node of
the stage still in ``upgrade-required`` gets that label, with :data:`names.UPGRADE_HOLD_ANNOTATION`
saying why; once the hold lifts, the label goes from exactly the nodes carrying our annotation.
A skip label someone else set (no annotation) is never touched. A rollback is never held
(rollout/machine.py asks for no hold after a failure).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.sync import marks
from gitops_gpu.sync.marks import NodeMarks

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
NOT_STARTED = "upgrade-required"


@dataclass(frozen=True)
class Change:
    node: str
    reason: str | None  # None: release our hold


def decide(
    nodes: Iterable[Obj], holds: Mapping[str, str], marked: NodeMarks | None = None
) -> list[Change]:
    """``holds``: node name -> why its stage is held, for every node of a held stage. Nodes not
    in it that carry our hold are released. ``marked``: the nodes' marks (sync/marks.py), if
    known: with no stage held and no node carrying our hold, nothing is walked."""
    if not holds and marked is not None and not marked.held:
        return []
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        ours = marks.held(node)
        if not holds and not ours:
            continue  # one lookup a node
        name = str(meta.get("name"))
        labels = meta.get("labels") or {}
        reason = holds.get(name)
        if reason is None:
            if ours:
                out.append(Change(name, None))
        elif (
            not ours
            and labels.get(names.UPGRADE_STATE_LABEL) == NOT_STARTED
            and labels.get(names.UPGRADE_SKIP_LABEL) != "true"
        ):
            out.append(Change(name, reason))
    return out


def apply(client: kube.Client, changes: Sequence[Change]) -> int:
    """Write ``changes`` (merge patches of one label and one annotation: nothing else on the
    node is touched); returns how many went through. A failed one is tried next pass."""
    written = 0
    for change in changes:
        hold = change.reason is not None
        patch = {
            "metadata": {
                "labels": {names.UPGRADE_SKIP_LABEL: "true" if hold else None},
                "annotations": {names.UPGRADE_HOLD_ANNOTATION: change.reason},
            }
        }
        try:
            client.patch("v1", "Node", change.node, patch, field_manager=names.FIELD_MANAGER)
        except kube.NotFoundError:
            continue
        except GitopsGpuError as exc:
            log.info("node %s: upgrade hold not changed this pass: %s", change.node, exc)
            continue
        if hold:
            log.info("node %s: driver upgrade held (%s)", change.node, change.reason)
        else:
            log.info("node %s: driver upgrade hold released", change.node)
        written += 1
    return written
