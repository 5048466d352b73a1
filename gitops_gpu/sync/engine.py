"""Plan and apply one cluster's compiled target: objects by server-side apply, node labels in
batches. Results are values (ClusterPlan, ApplyResult) that feed the CLI, statuses and metrics.

Drift is found by a server-side dry-run apply of each compiled object (field manager
``gitops-gpu``) compared with the live object, so CRD defaults and fields set by the GPU
Operator never show as drift. A memo keyed by the live resourceVersion and the manifest lets an
idle pass skip the dry runs entirely; the real apply is sent only for objects that drifted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet import mig_layouts
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet, PoolTarget
from gitops_gpu.sync import diff, labels, mig_keys, prune, sharing_keys, slim
from gitops_gpu.sync.live import LiveReader, selector_matches

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
CP_API, CP_KIND = names.CLUSTER_POLICY_API
DRV_API, DRV_KIND = names.NVIDIA_DRIVER_API


@dataclass(frozen=True)
class _Desired:
    """A pool's desired node labels, built once a plan: every member's label-diff memo holds
    this one value, not its own copy of the labels (5,000 memos at 5,000 nodes)."""

    pool: str
    items: tuple[tuple[str, str], ...]
    keys: tuple[str, ...]
    labels: Mapping[str, str] = field(compare=False)

    @classmethod
    def of(cls, pool: str, labels: Mapping[str, str]) -> _Desired:
        return cls(pool, tuple(sorted(labels.items())), tuple(sorted(labels)), labels)


@dataclass(frozen=True)
class Selection:
    """Which part of a cluster's target a plan covers."""

    pools: frozenset[str]
    cluster_scoped: bool  # the ClusterPolicy (and, with no ``stage``, every prune)
    # With a stage, a removed pool is pruned only by the stage that held it (sync/prune.py);
    # ``stages`` are the cluster's stages in rollout order, to find that stage.
    stage: str | None = None
    stages: tuple[str, ...] = ()


def select(
    compiled: CompiledFleet,
    cluster: ClusterTarget,
    *,
    pool: str | None = None,
    stage: str | None = None,
) -> Selection:
    """``--pool`` covers one pool's objects; ``--stage`` its pools and the removed pools it
    held, plus the ClusterPolicy when it is the cluster's first stage (that stage carries
    cluster-wide changes)."""
    if pool is not None:
        return Selection(frozenset({pool}) & frozenset(cluster.pools), False)
    if stage is not None:
        pools = frozenset(compiled.stage(stage).pools) & frozenset(cluster.pools)
        stages = tuple(prune.cluster_stages(compiled, cluster))
        return Selection(pools, first_stage(compiled, cluster) == stage, stage, stages)
    return Selection(frozenset(cluster.pools), True)


def first_stage(compiled: CompiledFleet, cluster: ClusterTarget) -> str | None:
    for stage in compiled.stages:
        if set(stage.pools) & set(cluster.pools):
            return stage.name
    return None


@dataclass(frozen=True)
class PoolPlan:
    pool: str
    objects: tuple[diff.ObjectDiff, ...]
    nodes: tuple[diff.NodeLabelDiff, ...]  # nodes whose labels change
    node_count: int
    max_unavailable: int | str = "25%"
    selector: Mapping[str, str] = field(default_factory=dict)
    # The pool's driver: a MIG relabel waits for it on each node (sync/labels.py).
    driver_version: str | None = None

    @property
    def in_sync(self) -> bool:
        return not any(o.drifted for o in self.objects) and not self.nodes


@dataclass(frozen=True)
class ClusterPlan:
    cluster: str
    commit: str
    cluster_objects: tuple[diff.ObjectDiff, ...]  # the ClusterPolicy and prunes
    pools: tuple[PoolPlan, ...]
    orphan_nodes: tuple[diff.NodeLabelDiff, ...]  # labelled by a pool that no longer exists

    @property
    def objects(self) -> tuple[diff.ObjectDiff, ...]:
        return self.cluster_objects + tuple(o for p in self.pools for o in p.objects)

    @property
    def in_sync(self) -> bool:
        return (
            not any(o.drifted for o in self.objects)
            and all(p.in_sync for p in self.pools)
            and not self.orphan_nodes
        )


@dataclass
class ApplyResult:
    applied: list[diff.ObjectDiff] = field(default_factory=list)
    conflicts: list[tuple[diff.ObjectDiff, list[str]]] = field(default_factory=list)
    label_batches: list[list[str]] = field(default_factory=list)
    nodes_pending: int = 0  # label changes left for a later pass (maxUnavailable reached)


# Pools labelled at once; each writes up to 8 nodes at once (_patch_nodes).
POOLS_IN_FLIGHT = 4


def _digest(manifest: Obj) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def live_key(live: Obj) -> tuple[object, ...]:
    """What a server-side diff of ``live`` depends on: its spec (``generation``, which status
    writes do not bump: the operator writes NVIDIADriver and ClusterPolicy status often) and
    its labels and annotations (which do not bump it either)."""
    meta = live["metadata"]
    generation = meta.get("generation")
    if generation is None:  # a kind without generation: any write may be a change
        return ("rv", meta.get("resourceVersion", ""))
    # Sorted items, not JSON: this runs for every pool on every pass.
    labels = tuple(sorted((meta.get("labels") or {}).items()))
    annotations = tuple(sorted((meta.get("annotations") or {}).items()))
    return (meta.get("uid"), generation, labels, annotations)


class Engine:
    def __init__(
        self,
        client: kube.Client,
        reader: LiveReader | None = None,
        field_manager: str = names.FIELD_MANAGER,
    ) -> None:
        self.client = client
        self.reader = reader or LiveReader(client)
        self.field_manager = field_manager
        # (kind, name) -> (live_key, manifest digest): known to be in sync.
        self._in_sync: dict[tuple[str, str], tuple[tuple[object, ...], str]] = {}
        self._label_diffs: dict[str, tuple[tuple[str, _Desired], diff.NodeLabelDiff]] = {}
        # Node -> (the resourceVersion its labels were planned from, when known; the node our
        # PATCH returned): while a node cache trails that write, the node is planned as the
        # PATCH returned it (issue 32: a trailing cache re-patched whole pools).
        self._written: dict[str, tuple[str | None, Obj]] = {}

    # -- plan -----------------------------------------------------------------------------------
    def _diff(self, manifest: Obj, live: Obj | None, pool: str | None) -> diff.ObjectDiff:
        key = (str(manifest["kind"]), str(manifest["metadata"]["name"]))
        digest = _digest(manifest)
        if live is not None and self._in_sync.get(key) == (live_key(live), digest):
            return diff.ObjectDiff(key[0], key[1], pool, diff.Action.UNCHANGED, (), manifest)
        dry = self._apply(manifest, dry_run=True, force=True)
        result = diff.diff_object(manifest, dry, live, pool)
        if live is not None and not result.drifted and not result.stale_commit:
            self._in_sync[key] = (live_key(live), digest)
        return result

    def _apply(self, manifest: Obj, **kw: Any) -> Obj:
        """Server-side apply; a namespaced object whose namespace is missing (the operator's,
        for the ConfigMaps) is said as that, with the fix."""
        try:
            return self.client.apply(manifest, field_manager=self.field_manager, **kw)
        except kube.NotFoundError as exc:
            namespace = manifest.get("metadata", {}).get("namespace")
            if not namespace or self.client.get("v1", "Namespace", namespace) is not None:
                raise
            raise KubeError(
                f"{manifest['kind']}/{manifest['metadata']['name']}: namespace {namespace} "
                "does not exist in the cluster",
                fix="install the GPU Operator there, or set clusters[].operatorNamespace in "
                "fleet.yaml to the namespace it runs in",
            ) from exc

    def _label_diff(self, node: Obj, desired: _Desired) -> diff.NodeLabelDiff:
        """diff_node_labels, memoised by the node's resourceVersion and the desired labels."""
        key = (str(node["metadata"].get("resourceVersion")), desired)
        name = str(node["metadata"]["name"])
        hit = self._label_diffs.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        result = diff.diff_node_labels(node, desired.labels, desired.pool, desired.keys)
        self._label_diffs[name] = (key, result)
        return result

    def plan(
        self,
        target: ClusterTarget,
        selection: Selection,
        commit: str,
        *,
        drivers: Mapping[str, Obj] | None = None,
        nodes: Sequence[Obj] | None = None,
    ) -> ClusterPlan:
        """Plan ``selection`` of ``target``; ``drivers``/``nodes`` let a caller planning many
        pools in one pass read each once."""
        if drivers is None:
            drivers = self.reader.managed(DRV_API, DRV_KIND)
        if nodes is None:
            nodes = self.reader.nodes()
        if self._written:
            nodes = self._as_written(nodes)
        cluster_objects: list[diff.ObjectDiff] = []
        if selection.pools or selection.cluster_scoped:
            # Before the ClusterPolicy that names them: the plugin pods mount them.
            for cm in target.config_maps:
                meta = cm["metadata"]
                live_cm = self.reader.get("v1", "ConfigMap", meta["name"], meta["namespace"])
                keep = (
                    mig_keys.desired
                    if meta["name"] == mig_layouts.CONFIGMAP_NAME
                    else sharing_keys.desired
                )
                want = keep(cm, live_cm, nodes, selection.pools, target.pools)
                cluster_objects.append(self._diff(want, live_cm, None))
        if selection.cluster_scoped:
            cp = target.cluster_policy
            live_cp = self.reader.get(CP_API, CP_KIND, str(cp["metadata"]["name"]))
            cluster_objects.append(self._diff(cp, live_cp, None))
        wanted = {str(p.driver["metadata"]["name"]) for p in target.pools.values()}
        for name, live in sorted(drivers.items()):
            if name not in wanted and self._prunes(selection, live):
                pool = (live["metadata"].get("annotations") or {}).get(names.POOL_ANNOTATION)
                cluster_objects.append(diff.pruned(live, pool))
        pools = []
        for name in sorted(selection.pools):
            pool = target.pools[name]
            drv_name = str(pool.driver["metadata"]["name"])
            obj = self._diff(pool.driver, drivers.get(drv_name), name)
            members = [
                n
                for n in nodes
                if selector_matches(pool.node_selector, n["metadata"].get("labels") or {})
            ]
            desired = _Desired.of(name, pool.node_labels)  # once a pool: each node's memo shares it
            node_diffs = [self._label_diff(n, desired) for n in members]
            pools.append(
                PoolPlan(
                    name,
                    (obj,),
                    tuple(d for d in node_diffs if d.changes),
                    len(members),
                    pool.max_unavailable,
                    dict(pool.node_selector),
                    _managed_driver(pool),
                )
            )
        orphans: list[diff.NodeLabelDiff] = []
        for node in nodes:
            node_labels = node["metadata"].get("labels") or {}
            owner = node_labels.get(names.POOL_LABEL)
            if not owner or not diff.managed_label_keys(node):
                continue
            if owner in target.pools:
                # Moved out of its pool (relabelled, or the selector changed) into none: it
                # leaves with its pool's stage; one another pool now selects relabels itself.
                if owner in selection.pools and not any(
                    selector_matches(p.node_selector, node_labels) for p in target.pools.values()
                ):
                    orphans.append(diff.diff_node_labels(node, {}, owner))
                continue
            held = drivers.get(owner)  # a pool's NVIDIADriver is named after it
            # Labels left without their NVIDIADriver (pruned by its stage in an earlier pass)
            # go with the ClusterPolicy's stage.
            mine = self._prunes(selection, held) if held else selection.cluster_scoped
            if mine:
                orphans.append(diff.diff_node_labels(node, {}, owner))
        return ClusterPlan(
            target.name,
            commit,
            tuple(cluster_objects),
            tuple(pools),
            tuple(o for o in orphans if o.changes),
        )

    def _as_written(self, nodes: Sequence[Obj]) -> list[Obj]:
        """``nodes`` with those the cache shows from before our last write replaced by what the
        write returned: a cached version older than the PATCH's (KEP-5504 order) has not seen
        it, whether it is the one we planned from or a change someone made in between (the
        operator labels nodes mid-rollout). Where versions do not compare, only the version we
        planned from is known to trail."""
        trailing: dict[str, tuple[str | None, Obj]] = {}
        out: list[Obj] = []
        for node in nodes:
            meta = node["metadata"]
            name = str(meta["name"])
            written = self._written.get(name)
            if written is not None and self._trails(str(meta.get("resourceVersion")), written):
                trailing[name] = written
                out.append(written[1])
            else:
                out.append(node)
        self._written = trailing
        return out

    @staticmethod
    def _trails(cached: str, written: tuple[str | None, Obj]) -> bool:
        order = kube.compare_resource_versions(
            cached, str(written[1]["metadata"].get("resourceVersion"))
        )
        return cached == written[0] if order is None else order < 0

    @staticmethod
    def _prunes(selection: Selection, live: Obj) -> bool:
        """Whether ``selection`` prunes the removed pool whose live NVIDIADriver is ``live``."""
        if selection.stage is None:
            return selection.cluster_scoped
        held = prune.pruning_stage(prune.held_by(live), list(selection.stages))
        return held == selection.stage

    # -- apply ----------------------------------------------------------------------------------
    def apply(
        self,
        plan: ClusterPlan,
        *,
        force_conflicts: bool = False,
        all_batches: bool = True,
        batch_timeout: float = 600,
        stamp_commit: bool = False,
    ) -> ApplyResult:
        """Write what drifted. ``stamp_commit`` also rewrites objects in sync whose commit
        annotation differs: a rollout stage adopting a commit records it on every pool object,
        even when the commit changed nothing for that pool."""
        result = ApplyResult()
        for obj in plan.objects:
            if not (obj.drifted or (stamp_commit and obj.stale_commit)):
                continue
            self.reader.wrote()
            if obj.action is diff.Action.PRUNED:
                api = DRV_API if obj.kind == DRV_KIND else CP_API
                self.client.delete(api, obj.kind, obj.name)
                result.applied.append(obj)
                continue
            assert obj.desired is not None
            try:
                self._apply(obj.desired, force=force_conflicts)
            except kube.ConflictError as exc:
                result.conflicts.append((obj, exc.managers))
                continue
            result.applied.append(obj)
        for orphan in plan.orphan_nodes:
            self._patch_node(orphan, plan.commit)
            result.label_batches.append([orphan.node])
        # Pools are independent (each waits only on its own nodes): label them side by side, so
        # a 125-pool stage is not 125 pools of round trips one after another.
        labelled = [p for p in plan.pools if p.nodes]
        with ThreadPoolExecutor(max_workers=max(1, min(POOLS_IN_FLIGHT, len(labelled)))) as ex:
            done = ex.map(
                lambda p: self._apply_pool_labels(p, plan.commit, all_batches, batch_timeout),
                labelled,
            )
            for batches, pending in done:  # in plan order: the result reads the same each run
                result.label_batches.extend(batches)
                result.nodes_pending += pending
        return result

    def _patch_node(self, d: diff.NodeLabelDiff, commit: str) -> None:
        done = self.client.patch(
            "v1", "Node", d.node, labels.label_patch(d, commit), field_manager=self.field_manager
        )
        planned = self._label_diffs.get(d.node)
        since = str(planned[0][0]) if planned is not None and planned[1] is d else None
        self._written[d.node] = (since, slim.node(done))  # as a cache keeps it

    def _pool_nodes(self, pool: PoolPlan) -> list[Obj]:
        return [
            n
            for n in self.reader.nodes()
            if selector_matches(pool.selector, n["metadata"].get("labels") or {})
        ]

    def _patch_nodes(self, batch: list[diff.NodeLabelDiff], commit: str) -> None:
        # Independent writes to different nodes: a few in flight at once.
        with ThreadPoolExecutor(max_workers=min(8, len(batch))) as pool:
            list(pool.map(lambda d: self._patch_node(d, commit), batch))

    def _apply_pool_labels(
        self, pool: PoolPlan, commit: str, all_batches: bool, timeout: float
    ) -> tuple[list[list[str]], int]:
        """The pool's label batches written, and its label changes left for a later pass."""
        batches: list[list[str]] = []
        # Bookkeeping-only changes (pool label, ownership) disrupt nothing: all nodes at once.
        gentle = [d for d in pool.nodes if not labels.is_disruptive(d)]
        if gentle:
            self._patch_nodes(gentle, commit)
            batches.append([d.node for d in gentle])
        pending = [d for d in pool.nodes if labels.is_disruptive(d)]
        deadline = time.monotonic() + timeout
        members = self._pool_nodes(pool) if pending else []
        while pending:
            batch = labels.next_batch(pending, members, pool.max_unavailable, pool.driver_version)
            if batch:
                self._patch_nodes(batch, commit)
                batches.append([d.node for d in batch])
                done = {d.node for d in batch}
                pending = [d for d in pending if d.node not in done]
            if not pending or not all_batches or time.monotonic() > deadline:
                break
            # Give the MIG manager/device plugin a moment to mark the batch busy; longer when
            # the budget is used up and we wait for nodes to finish.
            time.sleep(0.2 if batch else 1.0)
            members = self._pool_nodes(pool)
        return batches, len(pending)


def _managed_driver(pool: PoolTarget) -> str | None:
    """The driver version the operator installs on the pool, None for a pre-installed one."""
    if pool.node_labels.get(names.DEPLOY_LABEL_PREFIX + "driver") == "false":
        return None
    return pool.driver_version
