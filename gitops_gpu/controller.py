"""The controller loop. One pass = load → check → compile → read live (one snapshot value:
informers, managed objects, dry-run plans; snapshot.py) → judge it (observe.py) → rollout step →
apply (reusing the read's plans) → report. It keeps no state that matters: which commit runs
where is read back from the objects' annotations, and what each stage concluded from the commit
statuses, so a controller killed at any point resumes from the cluster and the record.

Caches (preflight results and compiled fleets by commit sha, informers for nodes, NodeGPUReports
and operator pods, the engine's in-sync memo) only save work; dropping them changes no decision.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gitops_gpu import events, heap, kube, names, sealed, waits
from gitops_gpu.analysis import Analyzer
from gitops_gpu.components.health import Health, PoolHealth
from gitops_gpu.components.holders import NodeWait
from gitops_gpu.errors import GitopsGpuError, SourceError
from gitops_gpu.execute import Executor, cluster_error
from gitops_gpu.fleet import loader, mig_layouts, sharing
from gitops_gpu.fleet.compiled import CompiledFleet, StageSpec
from gitops_gpu.history_guard import HistoryGuard
from gitops_gpu.leader import LeaseLock
from gitops_gpu.ledger import Ledger, ledger_name
from gitops_gpu.metrics import Metrics
from gitops_gpu.observe import Observer
from gitops_gpu.operand_rollout import OperandRoller
from gitops_gpu.pass_types import Config, PassReport
from gitops_gpu.pull_requests import PullRequestChecker
from gitops_gpu.rollout import line, machine, record
from gitops_gpu.rollout.authentic import Authenticator
from gitops_gpu.rollout.backends import make_backend
from gitops_gpu.rollout.checks import AnalysisResult
from gitops_gpu.rollout.forge import ForgeBackend
from gitops_gpu.rollout.gate import applied_commit
from gitops_gpu.rollout.gitnotes import NOTES_REF, GitNotesBackend
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.line import LineStop
from gitops_gpu.rollout.seal import Keyring, SealKey
from gitops_gpu.rollout.span import own_contexts
from gitops_gpu.rollout.status import (
    PENDING,
    CommitStatus,
    StatusBackend,
    stage_context,
)
from gitops_gpu.sealed import SealedRecord, stage_approvers
from gitops_gpu.snapshot import PassSnapshot, Reader
from gitops_gpu.sync import engine, verify_nodes
from gitops_gpu.sync.live import MANAGED_SELECTOR, Informer, LiveReader, NamedKey, pod_node
from gitops_gpu.sync.smoke import SmokeRunner
from gitops_gpu.sync.source import GitSource, credentials_env
from gitops_gpu.ui.facts import PassFacts
from gitops_gpu.verdicts import CommitVerdict, Verdicts, first_line

log = logging.getLogger(__name__)
CONTROL_CONFIGMAP = "gitops-gpu-control"  # data.paused: "true" is the emergency brake
FOLLOW_UP_SECONDS = 2.0


def _pool_clusters(compiled: CompiledFleet | None) -> dict[str, str]:
    clusters = compiled.clusters.values() if compiled is not None else ()
    return {pool: c.name for c in clusters for pool in c.pools}


class Controller:
    def __init__(
        self,
        cfg: Config,
        client: kube.Client,
        backend: StatusBackend | None = None,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg, self.client = cfg, client
        self.metrics = metrics or Metrics()
        self.metrics.node_wait_alert.set(cfg.node_wait_alert_after)
        self.clock = clock
        tags = cfg.verifier is not None and cfg.verifier.mode != "head"
        self.source = GitSource(cfg.repo, cfg.cache_dir, cfg.branch, tags=tags)
        refused = self.metrics.peer_refused
        self.source.on_refused = lambda reason: refused.labels("git", reason).inc()
        # Default record: git notes in the controller's mirror, pushed to the fleet remote.
        self.backend = backend or make_backend(
            cfg.status_backend,
            str(self.source.repo.git_dir),
            token_file=cfg.status_token_file,
            git_env=credentials_env(cfg.repo)[0],
        )
        if isinstance(self.backend, GitNotesBackend) and self.backend.remote == "origin":
            # The poll's ls-remote also reports the notes ref: an idle pass fetches nothing.
            self.source.watched = (NOTES_REF,)
            self.backend.remote_ref = self._remote_notes
        self.nodes = Informer(client, "v1", "Node")
        self.reports = Informer(client, *names.NODE_GPU_REPORT_API)
        self.pods = Informer(client, "v1", "Pod", namespace=cfg.operator_namespace, log_by=pod_node)
        self.operands = OperandRoller(client, cfg.operator_namespace, self.nodes, self.pods)
        # Managed NVIDIADrivers: watched only to know when to LIST them again (sync/live.py).
        # No coalescing: the pass after our own apply must see it.
        self.drivers = Informer(
            client, *names.NVIDIA_DRIVER_API, label_selector=MANAGED_SELECTOR, coalesce=0.0
        )
        # The brake, watched: an idle pass reads it from memory, not with a GET (issue 32).
        self.control = Informer(
            client,
            "v1",
            "ConfigMap",
            namespace=cfg.namespace,
            field_selector=f"metadata.name={CONTROL_CONFIGMAP}",
            coalesce=0.0,
        )
        watches = {names.NVIDIA_DRIVER_API: self.drivers}
        # The repo-built ConfigMaps (device plugin, MIG layouts): each pass plans them from
        # these watches instead of two GETs (a fleet naming another namespace still GETs).
        self.built: dict[NamedKey, Informer] = {
            ("v1", "ConfigMap", name, cfg.operator_namespace): Informer(
                client,
                "v1",
                "ConfigMap",
                namespace=cfg.operator_namespace,
                field_selector=f"metadata.name={name}",
                coalesce=0.0,
            )
            for name in (sharing.CONFIGMAP_NAME, mig_layouts.CONFIGMAP_NAME)
        }
        self.engine = engine.Engine(
            client, LiveReader(client, self.nodes, watches, named=self.built)
        )
        self.reader = Reader(self.nodes, self.reports, self.pods)
        self.observer = Observer()
        self._metered: dict[str, PoolHealth] = {}  # the pool health the gauges show
        # Events about cluster-scoped objects must live in "default" (the apiserver insists).
        self.recorder = events.EventRecorder(client, "default")
        extra = [*cfg.trusted, *sealed.load_trusted_file(cfg.record_trusted_keys)]
        self.keyring = Keyring(extra)  # the own key joins it once loaded (SealedRecord)

        def load() -> SealKey:
            create = cfg.record_key_create
            return sealed.load_key(client, cfg.namespace, cfg.record_key, create=create)

        key: SealKey | Callable[[], SealKey] = cfg.seal_key or load
        if cfg.record_key is not None and cfg.seal_key is None:
            key = load()  # a file: a bad one refuses the start
        # The ledger, watched like the brake: an idle pass re-reads it from memory.
        self.ledger_watch = Informer(
            client,
            "v1",
            "ConfigMap",
            namespace=cfg.namespace,
            field_selector=f"metadata.name={ledger_name(cfg.cluster)}",
            coalesce=0.0,
        )
        self.ledger = Ledger(
            client, cfg.namespace, cfg.cluster, keys=self.keyring, watch=self.ledger_watch
        )
        self.record = SealedRecord(
            self.backend,
            key,
            Authenticator(self.keyring),
            self.ledger,
            metrics=self.metrics,
            recorder=self.recorder,
        )
        self.smoke = SmokeRunner(client, cfg.smoke_namespace or cfg.namespace)
        self.analyzer = Analyzer(cfg.prometheus_url)
        self.history = HistoryGuard(
            cfg.branch,
            self.ledger,
            self.record,
            self.source.is_ancestor,
            metrics=self.metrics,
            recorder=self.recorder,
            clock=lambda: self.clock(),  # noqa: PLW0108
        )
        self.verdicts = Verdicts(cfg, client, self.source, self.ledger, self.metrics, self.recorder)
        self.executor = Executor(
            cfg,
            engine=self.engine,
            record=self.record,
            ledger=self.ledger,
            verdicts=self.verdicts,
            operands=self.operands,
            smoke=self.smoke,
            nodes=self.nodes,
            recorder=self.recorder,
            metrics=self.metrics,
            # late-bound: run() sets may_write to the Lease's fence; tests replace the clock
            clock=lambda: self.clock(),  # noqa: PLW0108
            may_write=lambda: self.may_write(),  # noqa: PLW0108
        )
        self.pulls: PullRequestChecker | None = None
        if cfg.pull_requests:
            if not isinstance(self.backend, ForgeBackend):
                raise GitopsGpuError(
                    f"--pull-requests needs a forge status backend, not {self.backend.name}",
                    fix="pass --status-backend github:..., gitea:... or gitlab:...",
                )
            self.pulls = PullRequestChecker(
                self.backend,
                self.source,
                self.checked,
                self.record,
                cfg.branch,
                self.nodes.items,
                lambda: self.clock(),  # noqa: PLW0108
            )
        self._wake = threading.Event()
        # The fence (leader election's holds()); always True without leader election.
        self.may_write: Callable[[], bool] = lambda: True
        self.last_report = PassReport()
        # --ui: each pass's facts go here (ui/app.py); None: nothing is kept for a view.
        self.publish: Callable[[PassFacts], None] | None = None
        self._published = 0
        self._waits: dict[str, list[NodeWait]] = {}
        self._draft: PassFacts | None = None  # what the pass decided from, before its result

    # -- lifecycle ------------------------------------------------------------------------------
    def start_informers(self) -> None:
        for inf in self._informers():
            inf.start()
        for inf in self._informers():
            inf.wait_synced()

    def stop_informers(self) -> None:
        for inf in self._informers():
            inf.stop()

    def _informers(self) -> tuple[Informer, ...]:
        return (
            self.nodes,
            self.reports,
            self.pods,
            self.drivers,
            self.control,
            self.ledger_watch,
            *self.built.values(),
            *self.operands.informers,
        )

    def check_cluster(self) -> None:
        """At start: refuse a --cluster the fleet does not list (or a multi-cluster fleet without
        one). A head that cannot be fetched or loaded is left to the passes to report."""
        try:
            self.source.poll()
            head = self.source.local_head()
            if head is None:
                return
            refs = loader.load_repo(self.source.checkout(head)).fleet.cluster_refs()
        except (GitopsGpuError, OSError) as exc:
            log.warning("could not read the fleet's clusters at start: %s", first_line(str(exc)))
            return
        problem = cluster_error([c.name for c in refs], self.cfg.cluster)
        if problem is not None:
            raise problem

    def _remote_notes(self) -> str | None:
        refs = self.source.remote_refs
        return None if refs is None else refs.get(NOTES_REF)

    def trigger(self) -> None:
        """A webhook or a person asked for a pass now."""
        self._wake.set()

    # -- preflight verdicts (verdicts.py) -------------------------------------------------------
    def checked(self, sha: str) -> CommitVerdict | None:
        return self.verdicts.checked(sha)

    def compiled_for(self, sha: str) -> CompiledFleet | None:
        return self.verdicts.compiled_for(sha)

    def apply_stage(self, stage: str, commit: str, *, rollback: bool = False) -> int:
        return self.executor.apply_stage(stage, commit, rollback=rollback)

    def line_stop(self) -> LineStop | None:
        """Who stopped the line and why (rollout/line.py), or None while it runs. From the
        watch while it runs (the controller's loop), else one GET (a CLI command)."""
        if self.control.synced:
            cm = self.control.get(CONTROL_CONFIGMAP)
        else:
            cm = self.client.get("v1", "ConfigMap", CONTROL_CONFIGMAP, self.cfg.namespace)
        return line.from_data((cm or {}).get("data"))

    def paused(self) -> bool:
        return self.line_stop() is not None

    # -- one pass -------------------------------------------------------------------------------
    def run_pass(self) -> PassReport:
        start = time.monotonic()
        report = PassReport()
        try:
            self._pass(report)
        except (GitopsGpuError, OSError) as exc:
            report.result, report.error = "error", str(exc)
            log.error("pass failed: %s", exc)
        except Exception as exc:  # a bug must cost one pass, never the controller
            report.result, report.error = "error", f"{type(exc).__name__}: {exc}"
            self.metrics.pass_exceptions.labels("pass").inc()
            log.exception("pass raised unexpectedly; the loop carries on")
        elapsed = time.monotonic() - start
        self.metrics.pass_duration.labels(report.result).observe(elapsed)
        self.metrics.passes.labels(report.result).inc()
        self.last_report = report
        if self.publish is not None:
            self._published += 1
            draft, self._draft = self._draft or PassFacts(0, 0.0, "", None), None
            self.publish(
                replace(
                    draft,
                    seq=self._published,
                    at=self.clock(),
                    result=report.result,
                    head=report.head,
                    error=report.error,
                    held=report.held,
                    cluster=self.cfg.cluster,
                    actions=tuple(report.actions),
                    written=tuple(report.written),
                )
            )
        return report

    def _pass(self, report: PassReport) -> None:
        stop = self.line_stop()  # first: the brake must work whatever the commits hold
        paused = stop is not None
        self.metrics.line_stopped.set(1 if paused else 0)
        _ = self.record.key  # read from its Secret at the first pass: the ledger is sealed by it
        try:
            poll = self.source.poll()
            self.metrics.last_fetch.set(self.clock())
            if poll.rewritten:
                log.warning("fleet repo history was rewritten (force-push) to %s", poll.head[:12])
        except SourceError as exc:
            if self.source.local_head() is None:
                raise
            log.error("fleet repo unreachable, keeping the last fetched commits: %s", exc)
        history = self.source.commits(self.cfg.history)
        report.head = history[0].sha if history else None
        shas = [c.sha for c in history]
        self.ledger.refresh()
        self.ledger.forget_except(set(shas))
        self.verdicts.first_seen = self.ledger.first_seen(shas, self.clock())
        self.verdicts.forget_except(set(shas))
        verdicts = {c.sha: self.checked(c.sha) for c in history}
        commits = [
            Commit(c.sha, v.ok, v.summary) if v is not None else Commit(c.sha)
            for c in history
            for v in (verdicts[c.sha],)
        ]
        newest = next(
            (v.compiled for v in verdicts.values() if v is not None and v.compiled is not None),
            None,
        )
        if newest is not None:
            # One client, one cluster: applying another cluster's objects here would be wrong.
            problem = cluster_error(list(newest.clusters), self.cfg.cluster)
            if problem is not None:
                raise problem
        stages: tuple[StageSpec, ...] = newest.stages if newest is not None else ()
        pool_clusters = _pool_clusters(newest) if self.cfg.cluster else {}
        self.record.own = own_contexts(stages, self.cfg.cluster, pool_clusters)
        self.record.set_approvers(stage_approvers(stages))
        judged = self.record.read(shas)
        statuses = judged.trusted
        held = self.history.check(report.head, paused=paused)
        report.held = held or ""
        if paused:
            report.result = "paused"
        elif held:
            report.result = "held"
        pools: dict[str, PoolObservation] = {}
        health: dict[str, PoolHealth] = {}
        snap: PassSnapshot | None = None
        if newest is not None:
            # Read once (informers, managed objects, dry runs), then judge the value read.
            drivers = self.engine.reader.managed(*names.NVIDIA_DRIVER_API)
            ops = self.operands.context(self.compiled_for)
            snap = self.reader.read(self.engine, drivers, newest, self.compiled_for, ops)
            pools, health = self.observer.judge(snap, newest)
            self._pool_metrics(health)
            self.executor.skipped = frozenset(
                n.node
                for ph in health.values()
                if ph.unavailable  # a count: most pools have no node to walk here
                for n in ph.nodes
                if n.health is Health.SKIPPED
            )
            self.executor.selectors = {
                p: t.node_selector for c in newest.clusters.values() for p, t in c.pools.items()
            }
            pools = self._workload_waits(snap, pools)
            self._verify_new_nodes(snap, pools, health)
        smoking = any(s.gate.smoke_test is not None for s in stages)
        smoke = (
            self.smoke.results(stages, self.executor.stage_nodes(stages), self.clock())
            if smoking and not held
            else {}
        )
        inp = RolloutInput(
            commits=commits,
            statuses=statuses,
            pools=pools,
            stages=stages,
            now=self.clock(),
            approvals=judged.approvals(),
            paused=paused,
            stop=stop,
            smoke=smoke,
            analysis=self._analysis(stages, pools, statuses),
            cluster=self.cfg.cluster,
            pool_clusters=pool_clusters,
            held=held,
        )
        actions = machine.step(inp)
        report.actions = list(actions)
        if self.publish is not None:  # what this pass decided from, for the web view
            self._draft = PassFacts(
                0,
                0.0,
                "",
                None,
                commits=tuple(commits),
                compiled=newest,
                judged=judged,
                stop=stop,
                pools=pools,
                health=health,
                snap=snap,
                waits=self._waits,
                subjects={c.sha: c.subject for c in history},
            )
        for action in actions:
            self.executor.execute(action, report, stages, snap)
        if snap is not None:
            self.executor.hold_upgrades(actions, stages, snap)
        if smoking and not paused and not held:
            self.executor.finish_smoke_tests(actions)
        if self.pulls is not None and self.may_write():  # the leader's, like every write
            self.pulls.step(statuses)

    def _analysis(
        self,
        stages: tuple[StageSpec, ...],
        pools: dict[str, PoolObservation],
        statuses: Sequence[CommitStatus],
    ) -> dict[tuple[str, str], AnalysisResult]:
        """gate.metrics for each stage whose pools run a commit still pending there."""
        judged = record.Record(statuses)
        out: dict[tuple[str, str], AnalysisResult] = {}
        nodes: dict[str, list[str]] | None = None
        for stage in stages:
            commit = applied_commit(stage, pools) if stage.gate.metrics else None
            if commit is None or judged.state(commit, stage_context(stage.name)) != PENDING:
                continue
            nodes = nodes if nodes is not None else self.executor.stage_nodes(stages)
            # compareTo: baseline: the other stages' nodes still running another commit.
            behind = [
                s
                for s in stages
                if s is not stage and applied_commit(s, pools) not in (None, commit)
            ]
            base = [n for s in behind for n in nodes[s.name]]
            base_pools = [p for s in behind for p in s.pools]
            result = self.analyzer.evaluate(stage, nodes[stage.name], base, base_pools)
            out[(stage.name, commit)] = result
            for metric, value in result.values:  # what the gate saw last, for dashboards
                self.metrics.gate_metric.labels(stage.name, metric).set(value)
        return out

    def _workload_waits(
        self, snap: PassSnapshot, pools: dict[str, PoolObservation]
    ) -> dict[str, PoolObservation]:
        """Who holds the nodes the driver upgrade waits on (waits.py): kept on the nodes,
        in the metric, and said by the pool's observation (the stage's pending status)."""
        now = self.clock()
        found = waits.read_pass(self.client, snap, pools, now)
        waits.write(self.client, found)
        self._waits = found.by_pool()
        self.metrics.set_node_waits({(w.pool, w.node, w.state): w.waited(now) for w in found.waits})
        held = {
            p: next((w.hold() for w in ws if w.hold()), "") for p, ws in found.by_pool().items()
        }
        return {p: replace(o, waiting_on=held.get(p, "")) for p, o in pools.items()}

    def _verify_new_nodes(
        self,
        snap: PassSnapshot,
        pools: dict[str, PoolObservation],
        health: dict[str, PoolHealth],
    ) -> None:
        """Taint the pools' unverified nodes NoSchedule, untaint them once verified
        (sync/verify_nodes.py); every pool, so one that stops verifying sheds the taint."""
        targets = snap.live_targets({p: o.commit for p, o in pools.items()})
        changes = [
            change
            for pool in pools
            for change in verify_nodes.decide(
                targets.get(pool),
                pools[pool].commit,
                health.get(pool),
                snap.members.get(pool, ()),
                snap.informers.marks,
            )
        ]
        if changes:
            verify_nodes.apply(self.client, changes)

    def _pool_metrics(self, health: dict[str, PoolHealth]) -> None:
        for pool, ph in health.items():
            if self._metered.get(pool) is ph:
                continue  # the observer kept the pool's health: the gauges already say it
            for h in Health:
                self.metrics.pool_nodes.labels(pool, str(h)).set(ph.count(h))
        self._metered = dict(health)

    # -- the loop -------------------------------------------------------------------------------
    def run(
        self,
        stop: threading.Event,
        *,
        lease: LeaseLock | None = None,
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> None:
        self.start_informers()
        if lease is not None:
            lease.start()  # renews on its own timer, whatever a pass costs
            self.may_write = lease.holds
        while not stop.is_set():
            if lease is not None and not lease.holds():
                self.metrics.leader.set(0)
                self.last_report = PassReport(result="standby")
                if on_pass is not None:
                    on_pass(self.last_report)
                lease.wait_changed(lease.retry_period)
                continue
            self.metrics.leader.set(1)
            report = self.run_pass()
            if on_pass is not None:
                on_pass(report)
            if stop.is_set():
                break
            heap.trim()  # what the pass freed goes back to the OS (once a minute at most)
            # A pass that applied something looks again soon: the pools' new state (and the
            # stage's first status) should not wait a whole poll interval.
            pause = min(self.cfg.interval, FOLLOW_UP_SECONDS) if report.applied else None
            self._wake.wait(pause if pause is not None else self.cfg.interval)
            self._wake.clear()
        if lease is not None:
            lease.release()
            self.metrics.leader.set(0)
        self.stop_informers()
