"""What people do to a rollout, as plain functions: read its status, approve a stage, pause or
resume, roll a stage back. The CLI renders what they return; nothing here prints.

Each works on a ``Controller`` opened for one shot (``connect``): the same source, record,
verdicts and executor the controller's own passes use, so a person's action and a pass can
never disagree about what a commit is or where the record lives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gitops_gpu import history_guard, kube, names
from gitops_gpu import waits as waits_reader
from gitops_gpu.components import drift, evidence, operator_state
from gitops_gpu.components.health import PoolHealth
from gitops_gpu.components.holders import NodeWait
from gitops_gpu.controller import CONTROL_CONFIGMAP, Controller
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.execute import cluster_error
from gitops_gpu.fleet.compiled import CompiledFleet, StageSpec
from gitops_gpu.observe import Observer
from gitops_gpu.pass_types import Config
from gitops_gpu.rollout import line, span
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.seal import SealKey
from gitops_gpu.rollout.status import (
    FAILURE,
    SUCCESS,
    CommitStatus,
    approval_context,
    stage_context,
)
from gitops_gpu.sealed import stage_approvers
from gitops_gpu.snapshot import OperandContext, Reader
from gitops_gpu.stage_view import stage_entry
from gitops_gpu.sync import engine, prune
from gitops_gpu.sync.live import Informer, LiveReader, pod_node
from gitops_gpu.sync.operands import Operands
from gitops_gpu.sync.source import BranchCommit


class NothingToActOnError(GitopsGpuError):
    """The operation found nothing it could act on (no commit passes preflight, no earlier
    good commit): not a usage error, the command fails (exit 1)."""


def connect(cfg: Config, client: kube.Client) -> Controller:
    """A controller for one operation: the fleet fetched, the record read. It seals with the
    controller's key (its Secret must exist: a person never mints a new one by accident)."""
    cfg.record_key_create = False
    ctl = Controller(cfg, client)
    ctl.source.poll()
    ctl.backend.refresh()
    _ = ctl.record.key  # before the ledger, whose verdicts it sealed
    ctl.ledger.refresh(force=True)
    return ctl


def trusted_record(ctl: Controller, shas: Sequence[str], compiled: CompiledFleet) -> Record:
    """The record as the controller's passes count it (sealed, approvers, the ledger)."""
    pool_clusters = {p: c.name for c in compiled.clusters.values() for p in c.pools}
    if len(compiled.clusters) > 1 and ctl.cfg.cluster is None:
        # Read across clusters: no one controller's ledger speaks for them; seals decide.
        ctl.record.own = lambda _context: False
    else:
        ctl.record.own = span.own_contexts(compiled.stages, ctl.cfg.cluster, pool_clusters)
    ctl.record.set_approvers(stage_approvers(compiled.stages))
    return Record(ctl.record.read(shas).trusted)


def newest(ctl: Controller) -> tuple[list[BranchCommit], CompiledFleet]:
    """The history window and the newest commit in it that passes preflight."""
    history = ctl.source.commits(ctl.cfg.history)
    found = next((ctl.compiled_for(c.sha) for c in history if ctl.compiled_for(c.sha)), None)
    if found is None:
        raise NothingToActOnError("no commit of the fleet repo passes preflight yet")
    return history, found


# -- status -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StatusReport:
    stop: line.LineStop | None  # the line is stopped (gitops-gpu pause): every stage holds
    many_clusters: bool  # stages and pools carry their clusters
    stages: list[dict[str, Any]]
    # Record statuses that decide nothing (forged, unsigned, not by an approver), and why.
    ignored: list[dict[str, str]] = field(default_factory=list)
    held: str = ""  # "history rewritten: ..." while the rollout holds

    @property
    def paused(self) -> bool:
        return self.stop is not None

    def as_json(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "stopped": self.stop.describe() if self.stop else "",
            "held": self.held,
            "stages": self.stages,
            "ignored": self.ignored,
        }


def status(ctl: Controller, kubeconfig: str | None) -> StatusReport:
    """Per stage: the commit its pools run, its verdict, and per pool node health. A fleet of
    several clusters is read through each cluster's kubeconfig context, with every pool's
    cluster and a spanning stage's per-cluster parts."""
    _history, compiled = newest(ctl)
    pools: dict[str, PoolObservation] = {}
    health: dict[str, PoolHealth] = {}
    waits: dict[str, list[NodeWait]] = {}
    many = len(compiled.clusters) > 1
    for cluster in compiled.clusters.values():
        if many:
            client = kube.Client.from_kubeconfig(kubeconfig, context=cluster.context)
        else:
            client = ctl.client
        try:
            seen, healthy, waiting = _observe(ctl, client, compiled)
        finally:
            if many:
                client.close()
        pools |= {p: o for p, o in seen.items() if p in cluster.pools}
        health |= {p: h for p, h in healthy.items() if p in cluster.pools}
        waits |= {p: w for p, w in waiting.items() if p in cluster.pools}
    pool_clusters = {p: c.name for c in compiled.clusters.values() for p in c.pools}
    history = [c.sha for c in _history]
    trusted = trusted_record(ctl, history, compiled)
    now = ctl.clock()
    stop = ctl.line_stop()
    stages = [
        stage_entry(
            now, trusted, stage, pools, health, pool_clusters if many else None, stop, waits
        )
        for stage in compiled.stages
    ]
    ignored = [
        {
            "commit": i.status.sha,
            "context": i.status.context,
            "state": str(i.status.state),
            "reason": i.reason,
            "creator": i.status.creator,
        }
        for i in ctl.record.ignored
    ]
    head = history[0] if history else None
    held = ctl.history.reason(head) if head else None
    return StatusReport(stop, many, stages, ignored, held or "")


def _observe(
    ctl: Controller, client: kube.Client, compiled: CompiledFleet
) -> tuple[dict[str, PoolObservation], dict[str, PoolHealth], dict[str, list[NodeWait]]]:
    """What one cluster's pools run, how healthy they are and which of their nodes the driver
    upgrade waits on (read only: the controller keeps the wait times), through ``client``."""
    nodes = Informer(client, "v1", "Node")
    reports = Informer(client, *names.NODE_GPU_REPORT_API)
    pods = Informer(client, "v1", "Pod", namespace=ctl.cfg.operator_namespace, log_by=pod_node)
    informers = (nodes, reports, pods)
    for inf in informers:
        inf.start()
    try:
        for inf in informers:
            inf.wait_synced()
        eng = engine.Engine(client, LiveReader(client, nodes))
        drivers = eng.reader.managed(*names.NVIDIA_DRIVER_API)
        policy = client.get(*names.CLUSTER_POLICY_API, names.CLUSTER_POLICY_NAME)
        # Only what status shows of the operator: its refusal of the ClusterPolicy, if any.
        ops = OperandContext(Operands.empty(), {}, policy_refusal=operator_state.refusal(policy))
        snap = Reader(nodes, reports, pods).read(eng, drivers, compiled, ctl.compiled_for, ops)
        seen, healthy = Observer().judge(snap, compiled)
        return seen, healthy, waits_reader.read_pass(client, snap, seen, ctl.clock()).by_pool()
    finally:
        for inf in informers:
            inf.stop()


# -- plan and apply -----------------------------------------------------------------------------
def plan(
    compiled: CompiledFleet,
    kubeconfig: str | None,
    pool: str | None = None,
    stage: str | None = None,
) -> list[tuple[engine.Engine, engine.ClusterPlan]]:
    """What applying ``compiled`` (or one pool or stage of it) would change in each cluster,
    read through the cluster's kubeconfig context. An unknown pool or stage is a KeyError."""
    if pool:
        compiled.pool(pool)
    out = []
    for cluster in compiled.clusters.values():
        if pool and pool not in cluster.pools:
            continue
        client = kube.Client.from_kubeconfig(kubeconfig, context=cluster.context)
        eng = engine.Engine(client)
        sel = engine.select(compiled, cluster, pool=pool, stage=stage)
        out.append((eng, eng.plan(cluster, sel, compiled.commit)))
    return out


def nvml_drift(
    plans: Sequence[tuple[engine.Engine, engine.ClusterPlan]], compiled: CompiledFleet
) -> list[drift.NvmlDrift]:
    """Nodes whose NVML state (NodeGPUReport) differs from their pool's desired state."""
    out: list[drift.NvmlDrift] = []
    for eng, cluster_plan in plans:
        targets = [compiled.pool(p.pool) for p in cluster_plan.pools]
        out += drift.fleet_drift(targets, evidence.read_evidence(eng.client, targets))
    return out


class RefusedError(GitopsGpuError):
    """A commit the guards refuse to apply: nothing of it was written."""


def apply(
    plans: Sequence[tuple[engine.Engine, engine.ClusterPlan]],
    compiled: CompiledFleet,
    *,
    force_conflicts: bool = False,
    all_batches: bool = True,
) -> list[tuple[engine.ClusterPlan, engine.ApplyResult]]:
    """Server-side apply each cluster's plan (what preflight has already passed), once no
    cluster refuses it: the controller's guard against removing most of a cluster's pools
    holds for a person's ``apply`` too, checked in every cluster before anything is written."""
    for eng, p in plans:
        cluster = compiled.clusters[p.cluster]
        live_pools = eng.reader.managed(*names.NVIDIA_DRIVER_API)
        refused = prune.refusal(cluster, live_pools, compiled.allow_mass_pool_removal)
        if refused is not None:
            raise RefusedError(
                f"refusing to apply {compiled.commit[:12]}: {refused}; nothing was applied",
                fix="set spec.allowMassPoolRemoval: true in fleet.yaml if that is meant",
            )
    return [
        (p, eng.apply(p, force_conflicts=force_conflicts, all_batches=all_batches))
        for eng, p in plans
    ]


# -- steering -----------------------------------------------------------------------------------
def approve(
    ctl: Controller, rev: str, stage: str, who: str, now: float, key: SealKey | None = None
) -> tuple[str, bool]:
    """Record ``who``'s approval of ``rev`` for ``stage``, sealed with the approver's ``key``
    (else the controller's): (the commit, whether it was new)."""
    sha = ctl.source.resolve(rev)
    history, compiled = newest(ctl)
    # Judge the record as the passes do (the stage's approvers), so an approval that would not
    # count never makes this one look redundant.
    trusted_record(ctl, [c.sha for c in history], compiled)
    status = CommitStatus(sha, approval_context(stage), SUCCESS, f"approved by {who}", "", now)
    return sha, ctl.record.write(status, key=key)


def accept_history(ctl: Controller, rev: str, who: str, now: float) -> tuple[str, str]:
    """``who`` accepts ``rev`` as the branch head to follow though it does not descend from
    the last one: (the commit, the head it replaces)."""
    sha = ctl.source.resolve(rev)
    head = ctl.source.local_head()
    if head != sha:
        raise NothingToActOnError(
            f"{sha[:12]} is not the head of {ctl.cfg.branch} ({(head or 'none')[:12]}): only the "
            "head the controller holds at can be accepted"
        )
    return sha, history_guard.accept(ctl.ledger, ctl.record, sha, who, now)


def set_paused(client: kube.Client, namespace: str, stop: line.LineStop | None) -> None:
    """Stop the line (``stop``: who, when, why) or let it run (None): every controller reads
    it at its next pass (rollout/line.py)."""
    client.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONTROL_CONFIGMAP, "namespace": namespace},
            "data": line.to_data(stop),
        },
        field_manager=names.FIELD_MANAGER,
        force=True,
    )


def rollback(
    ctl: Controller, stage_name: str, to: str | None, who: str, now: float
) -> tuple[str, int]:
    """Mark the stage's current commits failed (so they are not re-adopted) and apply the
    target: ``to``, or the stage's newest earlier success. (target, objects/nodes written)."""
    history, compiled = newest(ctl)
    problem = cluster_error(list(compiled.clusters), ctl.cfg.cluster)
    if problem is not None:  # before any status is written
        raise problem
    stage = compiled.stage(stage_name)
    drivers = ctl.engine.reader.managed(*names.NVIDIA_DRIVER_API)
    current = {
        (drivers.get(p) or {})
        .get("metadata", {})
        .get("annotations", {})
        .get(names.COMMIT_ANNOTATION)
        for p in stage.pools
    }
    target = ctl.source.resolve(to) if to else _last_success(ctl, stage, history, current, compiled)
    if target is None:
        raise NothingToActOnError(
            f"stage {stage.name} has no earlier successful commit to roll back to"
        )
    for sha in sorted(c for c in current if c and c != target):
        text = f"rolled back by {who} to {target[:7]}"
        ctl.record.write(CommitStatus(sha, stage_context(stage.name), FAILURE, text, "", now))
    ctl.start_informers()
    try:
        written = ctl.apply_stage(stage.name, target, rollback=True)
    finally:
        ctl.stop_informers()
    return target, written


def _last_success(
    ctl: Controller,
    stage: StageSpec,
    history: Sequence[BranchCommit],
    current: set[str | None],
    compiled: CompiledFleet,
) -> str | None:
    trusted = trusted_record(ctl, [c.sha for c in history], compiled)
    for c in history:
        st = trusted.latest(c.sha, stage_context(stage.name))
        if st is not None and st.state == SUCCESS and c.sha not in current:
            return c.sha
    return None
