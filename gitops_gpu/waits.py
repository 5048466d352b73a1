"""Read who holds the nodes the driver upgrade waits on (components/holders.py says the rules).

Only nodes whose ``nvidia.com/gpu-driver-upgrade-state`` is a waiting state cost anything: one
pod LIST by ``spec.nodeName`` per such node (at most :data:`MAX_NODES` a pass: the upgrade's
``maxParallelUpgrades`` keeps them few) and, while evicting (GPU-pod deletion, drain), one
PodDisruptionBudget LIST per namespace of its pods. Since when a node waits is ours to keep, in
the node annotation :data:`SINCE_ANNOTATION` (``<state>@<RFC 3339>``), written when a wait
starts and removed when it ends, so a restarted controller and ``gitops-gpu status`` tell the
same time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.components import holders, signals
from gitops_gpu.fleet.compiled import PoolTarget
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.snapshot import PassSnapshot
from gitops_gpu.sync import marks
from gitops_gpu.sync.marks import SINCE_ANNOTATION

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
MAX_NODES = 100


@dataclass
class Waits:
    """One pass's reading: the waits, and the annotation patches that keep their times."""

    waits: list[holders.NodeWait] = field(default_factory=list)
    patches: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> merge patch

    def by_pool(self) -> dict[str, list[holders.NodeWait]]:
        out: dict[str, list[holders.NodeWait]] = {}
        for wait in self.waits:
            out.setdefault(wait.pool, []).append(wait)
        return out


def read_pass(
    client: kube.Client, snap: PassSnapshot, pools: Mapping[str, PoolObservation], now: float
) -> Waits:
    """The waits among the pools' members, each judged against the commit its objects carry."""
    marked = snap.informers.marks
    if marked is not None and not marked.waiting:
        return Waits()  # the idle case: no node waits, none keeps our since-annotation
    targets = snap.live_targets({p: o.commit for p, o in pools.items()})
    return read(client, {p: snap.members.get(p, ()) for p in targets}, targets, now)


def read(
    client: kube.Client,
    members: Mapping[str, Iterable[Obj]],
    targets: Mapping[str, PoolTarget],
    now: float,
) -> Waits:
    """The waits among ``members`` (pool -> its nodes), judged against each pool's target."""
    out = Waits()
    pdbs: dict[str, list[Obj]] = {}
    for pool, nodes in members.items():
        target = targets.get(pool)
        driver_on = target is not None and not signals.disabled_for_pool(target, "driver")
        for node in nodes:
            meta = node.get("metadata") or {}
            labels = meta.get("labels")
            state = labels.get(names.UPGRADE_STATE_LABEL, "") if labels else ""
            annotations = meta.get("annotations")
            if not marks.waiting(node):
                continue  # most nodes, while some wait
            name = str(meta.get("name"))
            noted = (annotations or {}).get(SINCE_ANNOTATION)
            waiting = state in holders.WAIT_STATES and driver_on
            if not waiting:
                if noted is not None:
                    out.patches[name] = {"metadata": {"annotations": {SINCE_ANNOTATION: None}}}
                continue
            assert target is not None
            if len(out.waits) >= MAX_NODES:
                continue
            since = holders.since(noted, state)
            if since is None:
                since = now
                stamp = f"{state}@{datetime.fromtimestamp(now, UTC):%Y-%m-%dT%H:%M:%SZ}"
                out.patches[name] = {"metadata": {"annotations": {SINCE_ANNOTATION: stamp}}}
            held = _holders(client, name, state, target, pdbs)
            out.waits.append(holders.NodeWait(name, pool, state, since, held))
    return out


def write(client: kube.Client, waits: Waits) -> None:
    """Keep the wait times on the nodes; a node gone meanwhile is not an error."""
    for node, patch in waits.patches.items():
        try:
            client.patch("v1", "Node", node, patch, field_manager=names.FIELD_MANAGER)
        except kube.NotFoundError:
            continue


def _holders(
    client: kube.Client, node: str, state: str, target: PoolTarget, pdbs: dict[str, list[Obj]]
) -> tuple[holders.Holder, ...]:
    policy = (target.driver.get("spec") or {}).get("upgradePolicy") or {}
    label_selector = ""
    if state == holders.WAIT_FOR_JOBS:
        label_selector = str((policy.get("waitForCompletion") or {}).get("podSelector") or "")
    pods = client.list(
        "v1", "Pod", field_selector=f"spec.nodeName={node}", label_selector=label_selector
    )["items"]
    budgets: list[Obj] = []
    if state in holders.EVICTING:
        for ns in sorted({str(p["metadata"].get("namespace")) for p in pods}):
            if ns not in pdbs:
                pdbs[ns] = client.list("policy/v1", "PodDisruptionBudget", namespace=ns)["items"]
            budgets.extend(pdbs[ns])
    drain = holders.parse_selector(str((policy.get("drain") or {}).get("podSelector") or ""))
    return holders.holders(state, pods, budgets, drain)
