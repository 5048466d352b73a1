"""The controller's side of staged operand upgrades (the rules are in sync/operands.py).

Two informers (operand DaemonSets and their ControllerRevisions, in the operator's namespace)
feed each pass's ``OperandContext``, which the observer folds into the pools' observations;
``roll`` evicts the next batch of stale operand pods of a stage's pools when that stage adopts
(or re-adopts, while pods are left) a commit whose ClusterPolicy is the one live.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.components import operator_state
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet
from gitops_gpu.snapshot import OperandContext
from gitops_gpu.sync import labels, operands
from gitops_gpu.sync.live import Informer, selector_matches

log = logging.getLogger(__name__)
# The operator updates its DaemonSets a few seconds after the ClusterPolicy changes, and says
# nothing when it has (no observedGeneration): until this long after our last apply, and while
# a DaemonSet does not run the image the ClusterPolicy names, nodes of pools that expect the
# live revision are not counted on it and no pod is evicted (its "current" revision may still
# be the one the ClusterPolicy just left, e.g. right after a rollback).
OPERATOR_SETTLE_SECONDS = 15.0
CompiledFor = Callable[[str], CompiledFleet | None]


class OperandRoller:
    def __init__(self, client: kube.Client, namespace: str, nodes: Informer, pods: Informer):
        self.client, self.nodes, self.pods = client, nodes, pods
        self.daemonsets = Informer(client, *operands.DAEMONSET_API, namespace=namespace)
        self.revisions = Informer(client, *operands.REVISION_API, namespace=namespace)
        # Watched, not read per pass: an idle pass must not GET it (issue 19's request budget).
        self.policies = Informer(client, *names.CLUSTER_POLICY_API)
        self.refused: dict[str, str] = {}  # node -> why its last eviction was refused
        self.clock: Callable[[], float] = time.time

    @property
    def informers(self) -> tuple[Informer, Informer, Informer]:
        return (self.daemonsets, self.revisions, self.policies)

    def read(self) -> operands.Operands:
        return operands.read(self.daemonsets.items(), self.revisions.items(), self.pods.items())

    def live_policy_specs(
        self, compiled_for: CompiledFor, live: Mapping[str, Any] | None = None
    ) -> dict[str, object]:
        """cluster -> the spec of the live ClusterPolicy, compiled from the commit it carries
        (empty when that commit is unknown: then no pool is taken to expect the current
        revision, so nothing is evicted)."""
        if live is None:
            live = self.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
        commit = ((live or {}).get("metadata", {}).get("annotations") or {}).get(
            names.COMMIT_ANNOTATION
        )
        compiled = compiled_for(commit) if commit else None
        if compiled is None:
            return {}
        return {c: t.cluster_policy["spec"] for c, t in compiled.clusters.items()}

    def settling(self, live: Mapping[str, Any], spec: Mapping[str, Any] | None) -> bool:
        """Whether the operator may not yet have carried the live ClusterPolicy into its
        DaemonSets."""
        applied = operands.applied_at(live, names.FIELD_MANAGER)
        if applied is not None and self.clock() - applied < OPERATOR_SETTLE_SECONDS:
            return True
        return bool(spec is not None and operands.lagging(self.daemonsets.items(), spec))

    def context(self, compiled_for: CompiledFor) -> OperandContext:
        ops = self.read()
        live = self.policies.get(names.CLUSTER_POLICY_NAME)
        refused = operator_state.refusal(live)
        if not ops.daemonsets:  # e.g. the operator refused the ClusterPolicy outright
            return OperandContext(ops, {}, dict(self.refused), policy_refusal=refused)
        specs = self.live_policy_specs(compiled_for, live or {})
        spec = (live or {}).get("spec")
        settling = self.settling(live or {}, spec if isinstance(spec, Mapping) else None)
        commit = ((live or {}).get("metadata", {}).get("annotations") or {}).get(
            names.COMMIT_ANNOTATION
        )
        return OperandContext(ops, specs, dict(self.refused), settling, commit, refused)

    def roll(self, cluster: ClusterTarget, pools: Iterable[str], compiled_for: CompiledFor) -> int:
        """Evict one batch of stale operand pods per pool of ``pools``; the pods evicted."""
        ops = self.read()
        if not ops.daemonsets:
            return 0
        live = self.client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME) or {}
        live_spec = self.live_policy_specs(compiled_for, live).get(cluster.name)
        if live_spec != cluster.cluster_policy["spec"]:
            return 0  # the live ClusterPolicy is another commit's: these nodes keep theirs
        if self.settling(live, cluster.cluster_policy["spec"]):
            return 0  # a DaemonSet's current revision may still be the previous policy's
        nodes = self.nodes.items()
        evicted = 0
        for name in sorted(pools):
            pool = cluster.pools[name]
            members = [
                n
                for n in nodes
                if selector_matches(pool.node_selector, n["metadata"].get("labels") or {})
            ]
            states = [operands.node_state(ops, n) for n in members]
            moving = {s.node for s in states if s.stale or s.waiting}
            busy = sum(
                1 for n in members if labels.is_busy(n) and n["metadata"]["name"] not in moving
            )
            for state in operands.next_batch(states, pool.max_unavailable, busy):
                self.refused.pop(state.node, None)
                for pod in state.stale:
                    error = operands.evict(self.client, pod)
                    if error is not None:
                        self.refused[state.node] = error
                        log.warning("pool %s: %s", name, error)
                        continue
                    evicted += 1
                    log.info(
                        "pool %s: evicted %s on %s (old operand revision)",
                        name,
                        pod["metadata"]["name"],
                        state.node,
                    )
        return evicted
