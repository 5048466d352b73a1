"""What a pass observes per pool: the commit its objects carry, whether they are in sync with
that commit, and the verification ladder's verdict on its nodes. ``Observer.judge`` is pure:
it judges the ``PassSnapshot`` that snapshot.py's ``Reader`` read (from informer caches, so an
idle pass LISTs nothing but drivers, and the engine's dry runs), with no client or engine."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gitops_gpu import names, timefmt
from gitops_gpu.components import evidence, ladder, nfd, operator_state, signals
from gitops_gpu.components.health import DEFAULT_OPTIONS, Health, NodeHealth, Options, PoolHealth
from gitops_gpu.fleet.compiled import CompiledFleet, PoolTarget
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.snapshot import PassSnapshot, Snapshot, holds
from gitops_gpu.sync import operands

Obj = dict[str, Any]


# A verdict is recomputed at least this often (spread over 1-2x by node name), whatever
# changed: a safety net; the times a verdict can change with no object changing (the report
# going stale, the NFD grace of a new node) end its validity exactly.
MEMO_MAX_AGE = 300.0
# An unavailable node's verdict names how long it has been so ("NotReady since 12m"): judged
# again at least this often (there are few such nodes).
UNAVAILABLE_MAX_AGE = 60.0


@dataclass(frozen=True, slots=True)
class _Verdict:
    key: tuple[object, ...]
    report: Obj | None  # the report it judged, to tell a heartbeat from a change
    fresh: bool  # the report was fresh when judged
    valid_until: datetime
    health: NodeHealth


def _rv(obj: Obj | None) -> str | None:
    return None if obj is None else str(obj["metadata"].get("resourceVersion"))


@dataclass(frozen=True)
class _PoolMemo:
    """A pool's last judgement: reused while its members and commit are the same and no
    verdict expired; a member that changed is judged again, the others are kept."""

    commit: str
    since: datetime | None  # evidence counted from (the pool's adoption of the commit)
    members: Sequence[Obj]  # the member list judged
    names: frozenset[str]
    verdicts: Mapping[str, _Verdict]  # by node name
    valid_until: datetime  # the earliest member verdict's
    health: PoolHealth


class Observer:
    """Judges a pass's snapshot (snapshot.py) into per-pool observations. A node's ladder
    verdict is reused while its node, report and pods are unchanged and the report cannot have
    gone stale: a memo keyed by its inputs, so ``judge`` answers as if it walked every node's
    ladder again. When the snapshot carries the informers' change logs, a pass looks only at
    the nodes that changed since the last one it judged, and a pool none of whose members
    changed (and none of whose verdicts expired) keeps its health: an idle pass at 5,000 nodes
    touches the few nodes whose report heartbeat arrived, not every node."""

    def __init__(self) -> None:
        self._verdicts: dict[str, _Verdict] = {}
        self._pools: dict[str, _PoolMemo] = {}
        self._last: Snapshot | None = None  # the informers' view last judged

    def pool_health(
        self,
        compiled: CompiledFleet,
        pool: str,
        snap: Snapshot,
        members: Sequence[Obj],
        changed: frozenset[str] | None = None,
        since: datetime | None = None,
    ) -> PoolHealth:
        """The pool's health; ``changed``: the nodes that changed since the last judge (None:
        unknown, every member is looked at); ``since``: Xids seen before it are history."""
        memo = self._pools.get(pool)
        target = compiled.pool(pool)
        if (
            changed is not None
            and memo is not None
            and memo.commit == compiled.commit
            and memo.since == since
            and (memo.members is members or memo.names == _names(members))
        ):
            touched = memo.names & changed
            if snap.now >= memo.valid_until:  # some verdicts expired: judge those again, only
                touched |= {n for n, v in memo.verdicts.items() if snap.now >= v.valid_until}
            if not touched:
                self._pools[pool] = replace(memo, members=members)
                return memo.health
            verdicts = dict(memo.verdicts)
            for node in members:
                name = node["metadata"]["name"]
                if name in touched:
                    verdicts[name] = self._node(compiled.commit, pool, target, node, snap, since)
            # A heartbeat keeps a node's health object, and an expired verdict judged again
            # mostly reads the same: then the pool's health is kept too.
            same = all(verdicts[n].health == memo.verdicts[n].health for n in touched)
            health = (
                memo.health
                if same
                else ladder.aggregate_pool(target, [v.health for v in verdicts.values()])
            )
        else:
            verdicts = {
                node["metadata"]["name"]: self._node(
                    compiled.commit, pool, target, node, snap, since
                )
                for node in members
            }
            health = ladder.aggregate_pool(target, [v.health for v in verdicts.values()])
        if verdicts:
            until = min(v.valid_until for v in verdicts.values())
            self._pools[pool] = _PoolMemo(
                compiled.commit, since, members, frozenset(verdicts), verdicts, until, health
            )
        return health

    def _node(
        self,
        commit: str,
        pool: str,
        target: PoolTarget,
        node: Obj,
        snap: Snapshot,
        since: datetime | None = None,
    ) -> _Verdict:
        name = node["metadata"]["name"]
        report = snap.reports.get(name)
        pods = snap.pods_by_node.get(name, [])
        key = (commit, pool, since, _rv(node), tuple(_rv(p) for p in pods))
        memo = self._verdicts.get(name)
        if memo is not None and memo.key == key and memo.report is not report:
            memo = _heartbeat(memo, node, report, snap.now)
        if memo is None or memo.key != key or snap.now >= memo.valid_until:
            ev = evidence.assemble([node], [report] if report else [], pods, snap.now)[0]
            until, fresh = _validity(node, report, snap.now)
            verdict = ladder.walk(ev, target, Options(since=since))
            if verdict.unavailable is not None:  # "NotReady since 12m" says the time
                until = min(until, snap.now + timedelta(seconds=UNAVAILABLE_MAX_AGE))
            memo = _Verdict(key, report, fresh, until, verdict)
        self._verdicts[name] = memo
        return memo

    def judge(
        self, snap: PassSnapshot, newest: CompiledFleet
    ) -> tuple[dict[str, PoolObservation], dict[str, PoolHealth]]:
        """Per pool of the newest good commit: its applied commit, sync and health (operand
        pods on their DaemonSet's current revision included, when the snapshot has operands).
        Pure: everything comes from ``snap``."""
        out: dict[str, PoolObservation] = {}
        health: dict[str, PoolHealth] = {}
        ops = snap.operands
        changed = snap.informers.changed_since(self._last)
        for cluster in newest.clusters.values():
            for pool in sorted(cluster.pools):
                live = snap.drivers.get(str(cluster.pools[pool].driver["metadata"]["name"]))
                if live is None:
                    continue  # no objects yet: the machine adopts
                ann = live["metadata"].get("annotations") or {}
                commit = ann.get(names.COMMIT_ANNOTATION)
                compiled = snap.compiled.get(commit) if commit else None
                if compiled is None or not holds(compiled, pool):
                    out[pool] = PoolObservation(pool, commit, False, 0, 0)
                    continue
                target_cluster = compiled.clusters[compiled.pool(pool).cluster]
                members = snap.members.get(pool, ())
                plan = snap.plans.get((pool, compiled.commit))
                ph = self.pool_health(
                    compiled, pool, snap.informers, members, changed, adopted_at(live)
                )
                health[pool] = ph
                version = compiled.pool(pool).driver_version
                refusals = [operator_state.refusal(live), ops.policy_refusal if ops else None]
                said = [r for r in (*refusals, ph.first_failure) if r]
                out[pool] = PoolObservation(
                    pool=pool,
                    commit=commit,
                    objects_in_sync=plan is not None and plan.in_sync,
                    nodes_total=ph.total,
                    nodes_healthy=ph.count(Health.HEALTHY),
                    nodes_unhealthy=ph.count(Health.DEGRADED),
                    nodes_progressing=ph.count(Health.PROGRESSING),
                    nodes_unavailable=ph.unavailable,
                    unavailable_kinds=ph.unavailable_kinds,
                    # The operator's own refusal first: the cause the nodes only show as symptoms.
                    first_failure="; ".join(said) or None,
                    summary=f"on {version}" if version else "",
                )
                if ops is not None and ops.operands.daemonsets:
                    live_spec = ops.live_policy_specs.get(target_cluster.name)
                    expects = live_spec == target_cluster.cluster_policy["spec"]
                    # A skipped node's operand pods are caught up when it returns, not waited for.
                    available = _without_skipped(members, ph)
                    state, _ = operands.pool_state(ops.operands, available, expects, ops.refused)
                    just_applied = ops.settling and commit == ops.live_commit
                    if expects and just_applied and not state.behind:
                        waiting = "operands: the operator is reconciling the ClusterPolicy"
                        state = operands.PoolOperands(len(members), 0, 0, waiting)
                    out[pool] = fold_operands(out[pool], state)
        # A pool not judged now would miss this pass's changes: its memo goes.
        for gone in self._pools.keys() - health.keys():
            del self._pools[gone]
        self._last = snap.informers
        return out, health


def adopted_at(driver: Obj) -> datetime | None:
    """When the pool adopted the commit its NVIDIADriver carries: our last apply of it (the
    commit annotation changes on every adoption, a revert to equal objects included). Evidence
    from before it (Xids) belongs to an earlier commit."""
    when = operands.applied_at(driver, names.FIELD_MANAGER)
    return datetime.fromtimestamp(when, UTC) if when is not None else None


def _names(members: Sequence[Obj]) -> frozenset[str]:
    return frozenset(n["metadata"]["name"] for n in members)


def _without_skipped(members: Sequence[Obj], ph: PoolHealth) -> Sequence[Obj]:
    if not ph.unavailable:
        return members
    skipped = {n.node for n in ph.nodes if n.health is Health.SKIPPED}
    return [n for n in members if n["metadata"]["name"] not in skipped]


def fold_operands(obs: PoolObservation, pool: operands.PoolOperands) -> PoolObservation:
    """Fold the pool's operand revisions into its observation: nodes behind are progressing
    (not yet on the commit), stale pods leave the pool out of sync so its stage re-adopts and
    the next batch is evicted; nodes ahead of stage are said in the summary."""
    if pool.behind:
        moved = min(pool.behind, obs.nodes_healthy)
        obs = replace(
            obs,
            nodes_healthy=obs.nodes_healthy - moved,
            nodes_progressing=obs.nodes_progressing + moved,
            objects_in_sync=obs.objects_in_sync and pool.stale_pods == 0,
            first_failure=obs.first_failure or pool.first,
        )
    if pool.ahead:
        nodes = "node" if pool.ahead == 1 else "nodes"
        note = f"{pool.ahead} {nodes} ahead of stage"
        obs = replace(obs, summary=f"{obs.summary}, {note}" if obs.summary else note)
    return obs


def _heartbeat(memo: _Verdict, node: Obj, report: Obj | None, now: datetime) -> _Verdict | None:
    """The memo still holds when the report only moved its observedAt (the agent's heartbeat,
    every node every couple of minutes) and was and is fresh: the ladder reads observedAt only
    to tell fresh from stale. None: judge again."""
    if memo.report is None or report is None or not memo.fresh:
        return None
    if memo.health.unavailable is not None:
        return None  # its reason names a time ("NotReady since 12m"): judge it again
    if _without_time(memo.report) != _without_time(report):
        return None
    until, fresh = _validity(node, report, now)
    return replace(memo, report=report, valid_until=until) if fresh else None


def _without_time(report: Obj) -> dict[str, Any]:
    return {k: v for k, v in (report.get("status") or {}).items() if k != "observedAt"}


def _validity(node: Obj, report: Obj | None, now: datetime) -> tuple[datetime, bool]:
    """Until when a verdict holds with no object changing, and whether the report is fresh."""
    name = str(node["metadata"].get("name", ""))
    spread = 1 + (zlib.crc32(name.encode()) % 1000) / 1000  # so verdicts do not expire at once
    until = now + timedelta(seconds=MEMO_MAX_AGE * spread)
    created = timefmt.parse(node["metadata"].get("creationTimestamp"))
    if created is not None:
        graced = created + timedelta(seconds=nfd.NEW_NODE_GRACE_SECONDS)
        if graced > now:
            until = min(until, graced)
    # The same window the ladder judges by (signals.report_problem), so the verdict ends
    # exactly when the report becomes trusted or goes stale.
    window = signals.report_window(report, DEFAULT_OPTIONS)
    if window is None:
        return until, False
    trusted_from, stale_at = window
    if now < trusted_from:
        return min(until, trusted_from), False
    if now > stale_at:
        return until, False
    return min(until, stale_at), True
