"""Carrying out one pass's actions: apply a stage's pools (or roll them back), write a status,
run a smoke test. Every write first checks the leader fence; the controller decides, this acts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import replace
from typing import TYPE_CHECKING, Any, assert_never

from gitops_gpu import events, names
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet.compiled import ClusterTarget, StageSpec
from gitops_gpu.ledger import Ledger
from gitops_gpu.metrics import Metrics
from gitops_gpu.operand_rollout import OperandRoller
from gitops_gpu.rollout.actions import (
    Action,
    AdoptCommit,
    HoldUpgrades,
    Rollback,
    RunSmokeTest,
    SetStatus,
    Wait,
)
from gitops_gpu.sealed import SealedRecord
from gitops_gpu.snapshot import PassSnapshot
from gitops_gpu.sync import engine, prune, upgrade_holds
from gitops_gpu.sync.live import Informer, selector_matches
from gitops_gpu.sync.smoke import SmokeRunner
from gitops_gpu.verdicts import Verdicts

if TYPE_CHECKING:
    from gitops_gpu.pass_types import Config, PassReport

log = logging.getLogger("gitops_gpu.controller")


class NotLeaderError(GitopsGpuError):
    """This replica lost the Lease mid-pass; the rest of the pass is not written."""


def cluster_error(listed: Sequence[str], chosen: str | None) -> GitopsGpuError | None:
    """Why a controller for ``chosen`` cannot manage a fleet listing ``listed``, if it cannot."""
    if chosen is None and len(listed) > 1:
        return GitopsGpuError(
            f"the fleet lists clusters {', '.join(sorted(listed))}: one controller runs per "
            "cluster and must be told which",
            fix="start each cluster's controller with --cluster NAME (docs/multi-cluster.md)",
        )
    if chosen is not None and chosen not in listed:
        return GitopsGpuError(
            f"--cluster {chosen}: the fleet lists only {', '.join(sorted(listed))}",
            fix="pass one of those names, or add the cluster to spec.clusters in fleet.yaml",
        )
    return None


class Executor:
    def __init__(
        self,
        cfg: Config,
        *,
        engine: engine.Engine,
        record: SealedRecord,
        ledger: Ledger,
        verdicts: Verdicts,
        operands: OperandRoller,
        smoke: SmokeRunner,
        nodes: Informer,
        recorder: events.EventRecorder,
        metrics: Metrics,
        clock: Callable[[], float],
        may_write: Callable[[], bool],
    ) -> None:
        self.cfg, self.engine, self.record, self.verdicts = cfg, engine, record, verdicts
        self.ledger = ledger
        self.operands, self.smoke, self.nodes = operands, smoke, nodes
        self.recorder, self.metrics, self.clock = recorder, metrics, clock
        self.may_write = may_write  # the fence (leader election's holds()), asked before writes
        # Nodes judged Skipped this pass (unavailableNodes: skip): no smoke Job, no query.
        self.skipped: frozenset[str] = frozenset()
        # Each pool's node selector at the newest commit: a node labelled for a pool it no
        # longer matches gets no smoke Job and is in no query.
        self.selectors: Mapping[str, Mapping[str, str]] | None = None

    def stage_nodes(self, stages: tuple[StageSpec, ...]) -> dict[str, list[str]]:
        """Node names per stage (what smoke tests and metric queries cover), but the nodes this
        pass skips as unavailable (``skipped``, set by the controller's pass)."""
        return nodes_by_stage(self.nodes.items(), stages, self.skipped, self.selectors)

    def hold_upgrades(
        self, actions: Sequence[object], stages: tuple[StageSpec, ...], snap: PassSnapshot
    ) -> int:
        """Hold the driver upgrade of the not-started nodes of every stage the pass held, and
        release our hold everywhere else (sync/upgrade_holds.py); returns nodes written."""
        reasons = {a.stage: a.reason for a in actions if isinstance(a, HoldUpgrades)}
        holds = {
            str(node["metadata"]["name"]): reasons[stage.name]
            for stage in stages
            if stage.name in reasons
            for pool in stage.pools
            for node in snap.members.get(pool, ())
        }
        changes = upgrade_holds.decide(snap.informers.nodes, holds, snap.informers.marks)
        if not changes:
            return 0
        self._fence()
        return upgrade_holds.apply(self.engine.client, changes)

    def finish_smoke_tests(self, actions: Sequence[object]) -> None:
        """Smoke Jobs the machine did not ask for this pass are done: an Event per failed node,
        then the Jobs go (their result is in the record by now)."""
        keep = {(a.stage, a.commit) for a in actions if isinstance(a, RunSmokeTest)}
        for failure in self.smoke.finish(keep):
            self.recorder.record(
                "v1",
                "Node",
                failure.node,
                "SmokeTestFailed",
                f"stage {failure.stage} at {failure.commit[:12]}: {failure.message}"[:1000],
                warning=True,
            )

    def execute(
        self,
        action: Action,
        report: PassReport,
        stages: tuple[StageSpec, ...] = (),
        snap: PassSnapshot | None = None,
    ) -> None:
        """Carry out ``action``; ``snap`` is what the pass read (its pools' plans are reused)."""
        if not isinstance(action, Wait):
            self._fence()
        match action:
            case AdoptCommit(stage=stage, commit=commit):
                report.applied += self.apply_stage(stage, commit, snap=snap)
            case Rollback(stage=stage, to_commit=commit):
                report.applied += self.apply_stage(stage, commit, rollback=True, snap=snap)
            case SetStatus():
                self._write_status(action, report)
            case RunSmokeTest():
                spec = next(s for s in stages if s.name == action.stage)
                nodes = self.stage_nodes(stages).get(spec.name, [])
                report.applied += self.smoke.run(spec, action.commit, nodes, self.nodes.get)
            case HoldUpgrades():
                pass  # carried out once per pass, all stages together (hold_upgrades)
            case Wait():
                log.debug("waiting: %s", action.reason)
            case _:
                assert_never(action)

    def _fence(self) -> None:
        if not self.may_write():
            # Fenced: another replica may lead by now; this pass stops writing.
            raise NotLeaderError(
                "lost the Lease during the pass; stopping before the next write",
                fix="nothing to do: the replica that leads now carries on",
            )

    def _write_status(self, action: SetStatus, report: PassReport) -> None:
        status = action.to_status(self.clock())
        if self.record.write(status):
            report.statuses_written += 1
            report.written.append(status)
            self.metrics.status_writes.labels(action.context, action.state).inc()
            log.info(
                "status %s %s on %s: %s",
                action.context,
                action.state,
                action.commit[:12],
                action.description,
            )
        if action.context.count("/") == 2 and action.context.startswith("gitops-gpu/stage/"):
            self.metrics.set_gate(action.context.rsplit("/", 1)[1], action.state)

    def apply_stage(
        self,
        stage: str,
        commit: str,
        *,
        rollback: bool = False,
        snap: PassSnapshot | None = None,
    ) -> int:
        """Apply every pool of ``stage`` at ``commit``: one label batch per pool per pass.
        Pools ``snap`` (this pass's read) planned at ``commit`` are not planned again."""
        checked = self.verdicts.checked(commit)
        if checked is None or not checked.ok or checked.compiled is None:
            # The state machine never asks for this; refuse loudly if it ever does.
            raise GitopsGpuError(
                f"refusing to apply {commit[:12]}: it failed preflight",
                fix="fix the commit; nothing was applied",
            )
        compiled = checked.compiled
        problem = cluster_error(list(compiled.clusters), self.cfg.cluster)
        if problem is not None:  # one client, one cluster (`rollback` of a multi-cluster fleet)
            raise problem
        # Before anything is written: this controller vouches it judged the commit good.
        self.ledger.admit(commit)
        written = 0
        live_pools = self.engine.reader.managed(*names.NVIDIA_DRIVER_API)
        for cluster in compiled.clusters.values():
            if self.cfg.cluster is not None and cluster.name != self.cfg.cluster:
                continue  # another cluster's controller applies there
            refused = prune.refusal(cluster, live_pools, compiled.allow_mass_pool_removal)
            if refused is not None:
                raise GitopsGpuError(
                    f"refusing to apply {commit[:12]}: {refused}",
                    fix="set spec.allowMassPoolRemoval: true in fleet.yaml if that is meant",
                )
            sel = engine.select(compiled, cluster, stage=stage)
            if not sel.pools and not sel.cluster_scoped:
                continue
            plan = self._plan(cluster, sel, commit, live_pools, snap)
            self.metrics.drifted.labels(cluster.name).set(sum(o.drifted for o in plan.objects))
            result = self.engine.apply(plan, all_batches=False, stamp_commit=True)
            api = {k: a for a, k in (names.CLUSTER_POLICY_API, names.NVIDIA_DRIVER_API)}
            self._flag_cluster_wide(result, cluster.name, list(cluster.pools), stage, commit)
            for obj in result.applied:
                verb = "RolledBack" if rollback else "Applied"
                self.recorder.record(
                    api.get(obj.kind, "v1"),
                    obj.kind,
                    obj.name,
                    verb,
                    f"{obj.action.value} at commit {commit[:12]} by stage {stage}",
                )
            for obj, managers in result.conflicts:
                self.recorder.record(
                    api.get(obj.kind, "v1"),
                    obj.kind,
                    obj.name,
                    "Conflict",
                    f"fields owned by {', '.join(managers)}",
                    warning=True,
                )
            written += len(result.applied) + sum(len(b) for b in result.label_batches)
            # Operand pods of this stage's nodes move to the live revision, one batch a pass.
            written += self.operands.roll(cluster, sel.pools, self.verdicts.compiled_for)
        self.metrics.set_stage_commit(stage, commit)
        return written

    def _plan(
        self,
        cluster: ClusterTarget,
        sel: engine.Selection,
        commit: str,
        drivers: Mapping[str, Any],
        snap: PassSnapshot | None,
    ) -> engine.ClusterPlan:
        """The stage's plan, computed once a pass: a pool whose objects already carry
        ``commit`` (a stage re-adopting it to heal drift or label its next batch of nodes) was
        planned by the pass's read, and that plan is applied unless its NVIDIADriver changed
        since. Only the other pools, the ClusterPolicy and the prunes are planned here (which
        of those a plan holds does not depend on its pools). A pool is in one stage of a
        commit and the machine applies a stage at most once a pass, so no plan is applied
        twice; node batches still count busy nodes as they are at apply time (engine.py)."""
        reused = {
            p: found
            for p in sel.pools
            if snap is not None and (found := snap.planned(p, commit, drivers)) is not None
        }
        rest = replace(sel, pools=sel.pools - reused.keys())
        plan = self.engine.plan(cluster, rest, commit, drivers=drivers)
        if not reused:
            return plan
        pools = sorted((*plan.pools, *reused.values()), key=lambda p: p.pool)
        return replace(plan, pools=tuple(pools))

    def _flag_cluster_wide(
        self, result: engine.ApplyResult, cluster: str, pools: list[str], stage: str, commit: str
    ) -> None:
        """A ClusterPolicy change reaches every pool of the cluster at once, whatever their
        stage: say so where people look (log, Event, metric) when a stage carries one."""
        for obj in result.applied:
            if obj.kind != names.CLUSTER_POLICY_API[1] or obj.action.value != "configured":
                continue  # creation (first rollout) and commit-annotation moves are not changes
            fields = ", ".join(sorted({c.path for c in obj.changes})[:5])
            message = (
                f"stage {stage} carries a cluster-wide change at {commit[:12]}: "
                f"{len(obj.changes)} fields ({fields}) now apply to all pools of cluster "
                f"{cluster} ({', '.join(sorted(pools))})"
            )
            log.warning("%s", message)
            self.recorder.record(
                *names.CLUSTER_POLICY_API, obj.name, "ClusterWideChange", message, warning=True
            )
            self.metrics.cluster_wide_changes.labels(stage).inc()


def nodes_by_stage(
    nodes: Iterable[Mapping[str, Any]],
    stages: Sequence[StageSpec],
    skipped: Set[str] = frozenset(),
    selectors: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, list[str]]:
    """Node names per stage, from the pool label; ``skipped`` nodes left out (a NotReady node
    would never run its smoke Job, and a skipped node is not judged), and nodes that no longer
    match their labelled pool's ``selectors`` entry (moved out of the pool; their labels are
    removed by the engine) too."""
    pool_stage = {p: s.name for s in stages for p in s.pools}
    out: dict[str, list[str]] = {s.name: [] for s in stages}
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        pool = labels.get(names.POOL_LABEL, "")
        stage = pool_stage.get(pool)
        if stage is None or meta["name"] in skipped:
            continue
        selector = (selectors or {}).get(pool)
        if selector is not None and not selector_matches(selector, labels):
            continue
        out[stage].append(meta["name"])
    return out
