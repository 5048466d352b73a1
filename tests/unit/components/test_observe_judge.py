"""observe.py judges a pass's snapshot with no apiserver and no engine: a hand-built
``PassSnapshot`` goes in, the pools' observations and health come out. Also the executor's
reuse of the read's plans (snapshot.py ``planned``, execute.py ``_plan``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, cast

from components_builders import DRIVER, NOW, edit, healthy, node_obj, pool, status_for

from gitops_gpu import names
from gitops_gpu.components import ladder, operator_state
from gitops_gpu.components.evidence import NodeEvidence
from gitops_gpu.components.health import Health
from gitops_gpu.execute import Executor
from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet, PoolTarget, StageSpec
from gitops_gpu.observe import Observer
from gitops_gpu.rollout.inputs import PoolObservation
from gitops_gpu.snapshot import OperandContext, PassSnapshot, Reader, Snapshot
from gitops_gpu.sync import diff, engine, live, operands, slim
from gitops_gpu.sync.live import ChangeLog, Informer

Obj = dict[str, Any]
OLD, NEW = "a" * 40, "b" * 40
POLICY = {"kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}, "spec": {"x": 1}}
G = "nvidia.com/"


def fleet(commit: str, *pools: PoolTarget, policy: Obj = POLICY) -> CompiledFleet:
    stage = StageSpec("canary", tuple(p.name for p in pools))
    cluster = ClusterTarget("lab", None, policy, {p.name: p for p in pools})
    return CompiledFleet(commit, "fleet", (stage,), {"lab": cluster})


def driver(name: str, commit: str | None, rv: str = "1") -> Obj:
    ann = {names.COMMIT_ANNOTATION: commit} if commit else {}
    return {"metadata": {"name": name, "annotations": ann, "resourceVersion": rv}}


def pool_plan(name: str, members: int, *, drifted: bool = False, nodes: int = 0) -> engine.PoolPlan:
    action = diff.Action.CONFIGURED if drifted else diff.Action.UNCHANGED
    labels = tuple(diff.NodeLabelDiff(f"n{i}", name, {"x": "y"}, (), ()) for i in range(nodes))
    obj = diff.ObjectDiff("NVIDIADriver", name, name, action)
    return engine.PoolPlan(name, (obj,), labels, members)


def node(ev: NodeEvidence, rv: str = "1") -> Obj:
    obj = dict(ev.node)
    obj["metadata"] = {**obj["metadata"], "resourceVersion": rv}
    return obj


def snapshot(
    nodes: Sequence[Obj],
    *,
    drivers: Mapping[str, Obj],
    compiled: Sequence[CompiledFleet],
    members: Mapping[str, Sequence[Obj]],
    plans: Mapping[tuple[str, str], engine.PoolPlan],
    reports: Sequence[Obj] = (),
) -> PassSnapshot:
    by_name = {r["metadata"]["name"]: r for r in reports}
    informers = Snapshot(list(nodes), 1, by_name, {}, NOW)
    return PassSnapshot(informers, drivers, {c.commit: c for c in compiled}, members, plans)


def report(name: str, **overrides: Any) -> Obj:
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "status": status_for(name, **overrides),
    }


TRAIN = pool(name="train")
NEWEST = fleet(NEW, TRAIN)


def two_healthy(plan: engine.PoolPlan | None = None) -> PassSnapshot:
    nodes = [node(healthy("gpu-1")), node(healthy("gpu-2"))]
    return snapshot(
        nodes,
        drivers={"train": driver("train", NEW)},
        compiled=[NEWEST],
        members={"train": nodes},
        plans={("train", NEW): plan or pool_plan("train", 2)},
        reports=[report("gpu-1"), report("gpu-2")],
    )


def test_pool_in_sync_and_healthy() -> None:
    pools, health = Observer().judge(two_healthy(), NEWEST)
    assert pools == {"train": PoolObservation("train", NEW, True, 2, 2, summary=f"on {DRIVER}")}
    assert health["train"].health is Health.HEALTHY
    assert health["train"].total == 2


def test_drifted_object_or_pending_labels_are_out_of_sync() -> None:
    drifted = Observer().judge(two_healthy(pool_plan("train", 2, drifted=True)), NEWEST)[0]
    labels = Observer().judge(two_healthy(pool_plan("train", 2, nodes=1)), NEWEST)[0]
    assert not drifted["train"].objects_in_sync
    assert not labels["train"].objects_in_sync
    assert drifted["train"].nodes_healthy == 2  # sync and health are separate findings


def test_no_plan_read_is_not_pool_plan() -> None:
    snap = replace(two_healthy(), plans={})
    assert not Observer().judge(snap, NEWEST)[0]["train"].objects_in_sync


def test_health_counts_and_first_failure() -> None:
    ok = node(healthy("gpu-1"))
    broken = node(edit(healthy("gpu-2"), labels={G + "gpu-driver-upgrade-state": "upgrade-failed"}))
    upgrading = node(
        edit(healthy("gpu-3"), labels={G + "gpu-driver-upgrade-state": "validation-required"})
    )
    nodes = [ok, broken, upgrading]
    snap = snapshot(
        nodes,
        drivers={"train": driver("train", NEW)},
        compiled=[NEWEST],
        members={"train": nodes},
        plans={("train", NEW): pool_plan("train", 3)},
        reports=[report(n) for n in ("gpu-1", "gpu-2", "gpu-3")],
    )
    pools, health = Observer().judge(snap, NEWEST)
    obs = pools["train"]
    assert (obs.nodes_total, obs.nodes_healthy, obs.nodes_unhealthy, obs.nodes_progressing) == (
        3,
        1,
        1,
        1,
    )
    # the degraded node is named before the one still upgrading
    assert obs.first_failure == (
        f"gpu-2 driver: NVML reports {DRIVER}, desired {DRIVER}, upgrade-state upgrade-failed"
    )
    assert health["train"].health is Health.DEGRADED


def test_pool_judged_at_the_commit_its_objects_carry() -> None:
    """The pool runs OLD (whose driver version differs): it is judged against OLD's target."""
    old = fleet(OLD, pool(name="train", driver_version="570.86.10"))
    nodes = [node(edit(healthy("gpu-1"), labels={G + "cuda.driver-version.full": "570.86.10"}))]
    snap = snapshot(
        nodes,
        drivers={"train": driver("train", OLD)},
        compiled=[old, NEWEST],
        members={"train": nodes},
        plans={
            ("train", OLD): pool_plan("train", 1),
            ("train", NEW): pool_plan("train", 1, drifted=True),
        },
        reports=[report("gpu-1", driver_version="570.86.10")],
    )
    obs = Observer().judge(snap, NEWEST)[0]["train"]
    assert (obs.commit, obs.objects_in_sync, obs.summary) == (OLD, True, "on 570.86.10")
    assert obs.nodes_healthy == 1, obs.first_failure


def test_unknown_commit_missing_pool_and_no_objects() -> None:
    infer, serve, fresh = pool(name="infer"), pool(name="serve"), pool(name="fresh")
    newest = fleet(NEW, infer, serve, fresh, TRAIN)
    old = fleet(OLD, pool(name="train"))  # knows nothing of "infer"
    snap = snapshot(
        [],
        drivers={
            "infer": driver("infer", OLD),  # OLD compiled, but without this pool
            "serve": driver("serve", "c" * 40),  # a commit that does not compile (or unjudged)
            "train": driver("train", None),  # objects without a commit annotation
        },
        compiled=[old],
        members={},
        plans={},
    )
    pools, health = Observer().judge(snap, newest)
    assert pools == {
        "infer": PoolObservation("infer", OLD, False, 0, 0),
        "serve": PoolObservation("serve", "c" * 40, False, 0, 0),
        "train": PoolObservation("train", None, False, 0, 0),
    }  # "fresh" has no objects yet: absent, the machine adopts
    assert health == {}


# -- operands -----------------------------------------------------------------------------------
TK_OWNER = [{"kind": "ClusterPolicy", "name": "cluster-policy", "uid": "cp"}]
TOOLKIT = {
    "metadata": {
        "name": "nvidia-container-toolkit-daemonset",
        "uid": "tk",
        "ownerReferences": TK_OWNER,
    },
    "spec": {"template": {"spec": {"nodeSelector": {G + "gpu.deploy.container-toolkit": "true"}}}},
}
REVS = [
    {
        "metadata": {
            "name": f"nvidia-container-toolkit-daemonset-{h}",
            "labels": {"controller-revision-hash": h},
            "ownerReferences": [{"kind": "DaemonSet", "uid": "tk"}],
        },
        "revision": n,
    }
    for n, h in ((1, "old"), (2, "new"))
]


def toolkit_pod(node_name: str, hashed: str) -> Obj:
    return {
        "metadata": {
            "name": f"toolkit-{node_name}",
            "namespace": "gpu-operator",
            "resourceVersion": "1",
            "labels": {"controller-revision-hash": hashed},
            "ownerReferences": [{"kind": "DaemonSet", "uid": "tk"}],
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running"},
    }


def with_operands(
    live_spec: object,
    *,
    settling: bool = False,
    live_commit: str | None = None,
    revisions: tuple[str, str] = ("old", "new"),
) -> PassSnapshot:
    base = two_healthy()
    pods = [toolkit_pod(f"gpu-{i}", h) for i, h in enumerate(revisions, 1)]
    ops = OperandContext(
        operands.read([TOOLKIT], REVS, pods),
        {"lab": live_spec},
        settling=settling,
        live_commit=live_commit,
    )
    return replace(base, operands=ops)


def test_operand_pods_behind_fold_into_progressing_and_out_of_sync() -> None:
    obs = Observer().judge(with_operands(POLICY["spec"]), NEWEST)[0]["train"]
    assert (obs.nodes_healthy, obs.nodes_progressing, obs.objects_in_sync) == (1, 1, False)
    assert obs.first_failure == (
        "operands: node gpu-1: nvidia-container-toolkit-daemonset at an old revision"
    )


def test_a_skipped_node_behind_on_operands_does_not_hold_the_pool() -> None:
    """gpu-1 is NotReady (skipped: unavailableNodes defaults to skip) with its toolkit pod at
    the old revision: it is caught up when it returns, the pool is not held for it."""
    snap = with_operands(POLICY["spec"])
    down = node(edit(healthy("gpu-1"), ready="Unknown"))
    members = [down, snap.members["train"][1]]
    snap = replace(snap, members={"train": members})
    obs = Observer().judge(snap, NEWEST)[0]["train"]
    assert (obs.nodes_healthy, obs.nodes_unavailable, obs.nodes_progressing) == (1, 1, 0)
    assert obs.objects_in_sync


def test_pool_keeping_the_previous_policy_counts_nodes_ahead() -> None:
    obs = Observer().judge(with_operands({"x": 0}), NEWEST)[0]["train"]
    assert (obs.nodes_healthy, obs.nodes_progressing, obs.objects_in_sync) == (2, 0, True)
    assert obs.summary == f"on {DRIVER}, 1 node ahead of stage"


def test_operator_settling_after_this_commit_was_applied_holds_every_node() -> None:
    """Every pod on the current revision, but the operator may not have moved its DaemonSets to
    the policy just applied: the pool waits rather than passing on the previous revision."""
    obs = Observer().judge(
        with_operands(POLICY["spec"], settling=True, live_commit=NEW, revisions=("new", "new")),
        NEWEST,
    )[0]["train"]
    assert (obs.nodes_healthy, obs.nodes_progressing) == (0, 2)
    assert obs.first_failure == "operands: the operator is reconciling the ClusterPolicy"


def test_judging_is_repeatable_and_follows_changed_nodes() -> None:
    """The ladder memo is keyed by its inputs: the same snapshot gives the same answer, and a
    node that changed (new resourceVersion) is judged again."""
    observer = Observer()
    first = observer.judge(two_healthy(), NEWEST)
    assert observer.judge(two_healthy(), NEWEST) == first
    down = node(edit(healthy("gpu-2"), ready="Unknown"), rv="2")
    nodes = [node(healthy("gpu-1")), down]
    changed = snapshot(
        nodes,
        drivers={"train": driver("train", NEW)},
        compiled=[NEWEST],
        members={"train": nodes},
        plans={("train", NEW): pool_plan("train", 2)},
        reports=[report("gpu-1"), report("gpu-2")],
    )
    again = observer.judge(changed, NEWEST)[0]["train"]
    assert (again.nodes_healthy, again.nodes_unavailable) == (1, 1)  # unavailableNodes: skip


# -- the executor applies the read's plans --------------------------------------------------------
def test_planned_only_while_the_pool_object_is_unchanged() -> None:
    snap = two_healthy()
    plan = snap.plans[("train", NEW)]
    assert snap.planned("train", NEW, {"train": driver("train", NEW)}) is plan
    assert snap.planned("train", NEW, {"train": driver("train", NEW, rv="2")}) is None
    assert snap.planned("train", NEW, {}) is None
    assert snap.planned("train", OLD, {"train": driver("train", NEW)}) is None


class _Engine:
    def __init__(self) -> None:
        self.selections: list[engine.Selection] = []

    def plan(
        self, target: ClusterTarget, sel: engine.Selection, commit: str, **_: Any
    ) -> engine.ClusterPlan:
        self.selections.append(sel)
        pools = tuple(pool_plan(p, 0, drifted=True) for p in sorted(sel.pools))
        policy = (diff.ObjectDiff("ClusterPolicy", "cluster-policy", None, diff.Action.UNCHANGED),)
        return engine.ClusterPlan(
            target.name, commit, policy if sel.cluster_scoped else (), pools, ()
        )


def test_executor_plans_only_the_pools_the_read_did_not() -> None:
    infer = pool(name="infer")
    compiled = fleet(NEW, infer, TRAIN)
    fake = _Engine()
    none = cast(Any, None)
    executor = Executor(
        none,
        engine=cast(Any, fake),
        record=none,
        ledger=none,
        verdicts=none,
        operands=none,
        smoke=none,
        nodes=none,
        recorder=none,
        metrics=none,
        clock=none,
        may_write=none,
    )
    sel = engine.select(compiled, compiled.clusters["lab"], stage="canary")
    live = {"train": driver("train", NEW), "infer": driver("infer", OLD)}
    plan = executor._plan(compiled.clusters["lab"], sel, NEW, live, two_healthy())
    assert [s.pools for s in fake.selections] == [frozenset({"infer"})]
    assert fake.selections[0].cluster_scoped and fake.selections[0].stage == "canary"
    assert [p.pool for p in plan.pools] == ["infer", "train"]
    assert plan.pools[0].objects[0].drifted  # planned now (the fake says drifted)
    assert plan.pools[1] == pool_plan("train", 2)  # the read's plan
    assert [o.kind for o in plan.cluster_objects] == ["ClusterPolicy"]
    fake.selections.clear()
    executor._plan(compiled.clusters["lab"], sel, NEW, live, None)
    assert [s.pools for s in fake.selections] == [frozenset({"infer", "train"})]


# -- the read -------------------------------------------------------------------------------------
class _Informer:
    def __init__(self, items: Sequence[Obj]) -> None:
        self._items, self.version = list(items), 1

    def items(self) -> list[Obj]:
        return list(self._items)

    def by_name(self) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o for o in self._items}

    def change_log(self) -> ChangeLog:
        return ChangeLog(self, self.version, [], 0, self.version)


class _PlanningEngine:
    def __init__(self) -> None:
        self.planned: list[tuple[frozenset[str], str, int]] = []

    def plan(
        self, target: ClusterTarget, sel: engine.Selection, commit: str, **kw: Any
    ) -> engine.ClusterPlan:
        self.planned.append((sel.pools, commit, len(kw["nodes"])))
        pools = tuple(pool_plan(p, len(kw["nodes"])) for p in sorted(sel.pools))
        return engine.ClusterPlan(target.name, commit, (), pools, ())


def test_read_plans_each_pool_at_its_commit_and_judge_observes_it() -> None:
    """Reader.read, then Observer.judge (a pass; also status's one-shot path)."""
    infer = pool(name="infer")
    newest = fleet(NEW, infer, TRAIN, pool(name="serve"))
    old = fleet(OLD, pool(name="infer"), pool(name="train", driver_version="570.86.10"))
    gpu1, gpu9 = node_obj("gpu-1"), node_obj("gpu-9", pool_name="infer")
    nodes, reports = _Informer([gpu1, gpu9]), _Informer([report("gpu-1"), report("gpu-9")])
    asked: list[str] = []

    def compiled_for(sha: str) -> CompiledFleet | None:
        asked.append(sha)
        return {OLD: old, NEW: newest}.get(sha)

    drivers = {"infer": driver("infer", NEW), "train": driver("train", OLD)}
    fake = _PlanningEngine()
    reader = Reader(cast(Any, nodes), cast(Any, reports), cast(Any, _Informer([])))
    snap = reader.read(cast(Any, fake), drivers, newest, compiled_for)
    assert sorted(fake.planned) == [(frozenset({"infer"}), NEW, 1), (frozenset({"train"}), OLD, 1)]
    assert sorted(asked) == [OLD, NEW]  # once per commit
    assert set(snap.compiled) == {OLD, NEW} and set(snap.plans) == {("infer", NEW), ("train", OLD)}
    assert [n["metadata"]["name"] for n in snap.members["infer"]] == ["gpu-9"]
    pools, _ = Observer().judge(snap, newest)
    assert pools["train"].commit == OLD and pools["train"].summary == "on 570.86.10"
    assert pools["infer"].objects_in_sync and pools["infer"].nodes_total == 1
    assert "serve" not in pools  # no objects yet


def test_an_idle_read_plans_nothing_and_a_change_plans_that_pool_again() -> None:
    infer = pool(name="infer")
    newest = fleet(NEW, infer, TRAIN)
    nodes = _Informer([node_obj("gpu-1"), node_obj("gpu-9", pool_name="infer")])
    reader = Reader(cast(Any, nodes), cast(Any, _Informer([])), cast(Any, _Informer([])))
    drivers = {"infer": driver("infer", NEW), "train": driver("train", NEW)}
    for d in drivers.values():
        d["metadata"].update(uid="u", generation=1)
    fake = _PlanningEngine()

    def read() -> list[str]:
        before = len(fake.planned)
        reader.read(cast(Any, fake), drivers, newest, {NEW: newest}.get)
        return sorted(p for pools, _c, _n in fake.planned[before:] for p in pools)

    assert read() == ["infer", "train"]
    drivers["train"]["metadata"]["resourceVersion"] = "2"  # a status write
    assert read() == []
    drivers["train"]["metadata"]["generation"] = 2  # someone edited its spec
    assert read() == ["train"]
    drivers["infer"]["metadata"]["annotations"][names.COMMIT_ANNOTATION] = OLD
    assert read() == []  # OLD does not compile here: nothing to plan
    drivers["infer"]["metadata"]["annotations"][names.COMMIT_ANNOTATION] = NEW
    nodes.version = 2  # a node changed
    assert read() == ["infer", "train"]


# --- the verdict memo: judged again exactly when a verdict can change ----------------------


def _at(snap: PassSnapshot, seconds: float, reports: Sequence[Obj] | None = None) -> PassSnapshot:
    """``snap`` ``seconds`` after NOW, with ``reports`` (new objects) in place of its reports."""
    by_name = snap.informers.reports
    if reports is not None:
        by_name = {r["metadata"]["name"]: r for r in reports}
    informers = replace(snap.informers, reports=by_name, now=NOW + timedelta(seconds=seconds))
    return replace(snap, informers=informers)


def _walks(monkeypatch: Any) -> list[str]:
    walked: list[str] = []
    real = ladder.walk

    def counting(ev: NodeEvidence, target: PoolTarget, *a: Any) -> Any:
        walked.append(ev.name)
        return real(ev, target, *a)

    monkeypatch.setattr(ladder, "walk", counting)
    return walked


def _looks(monkeypatch: Any, obs: Observer) -> list[str]:
    """The names of the nodes ``obs`` looks at from now on (its per-node memo lookups)."""
    looked: list[str] = []
    real_node = obs._node
    monkeypatch.setattr(
        obs,
        "_node",
        lambda c, p, t, n, s, since: (
            looked.append(n["metadata"]["name"]) or real_node(c, p, t, n, s, since)
        ),
    )
    return looked


def _beat(name: str, age: float = 0.0, rv: str = "2", **overrides: Any) -> Obj:
    """A report as the informer keeps it (sync/slim.py's projection)."""
    return slim.report(
        {
            "metadata": {"name": name, "resourceVersion": rv},
            "status": status_for(name, age=age, **overrides),
        }
    )


def test_a_report_heartbeat_keeps_the_verdict_and_its_freshness(monkeypatch: Any) -> None:
    walked = _walks(monkeypatch)
    snap = two_healthy()  # reports observed 30 s before NOW
    snap = _at(snap, 0, [_beat("gpu-1", age=30, rv="1"), _beat("gpu-2", age=30, rv="1")])
    obs = Observer()
    assert obs.judge(snap, NEWEST)[1]["train"].health is Health.HEALTHY
    assert sorted(walked) == ["gpu-1", "gpu-2"]
    beats = [_beat("gpu-1"), _beat("gpu-2")]  # observed at NOW: only observedAt moved
    assert obs.judge(_at(snap, 60, beats), NEWEST)[1]["train"].health is Health.HEALTHY
    # 285 s on, the first reports would be stale (limit 300 s) but the heartbeats are not.
    assert obs.judge(_at(snap, 285, beats), NEWEST)[1]["train"].health is Health.HEALTHY
    assert len(walked) == 2
    # Without another heartbeat the report does go stale: judged again, and unknown.
    assert obs.judge(_at(snap, 301, beats), NEWEST)[1]["train"].health is Health.UNKNOWN
    assert len(walked) == 4


def test_a_heartbeat_after_a_stale_report_is_judged_again(monkeypatch: Any) -> None:
    walked = _walks(monkeypatch)
    obs, snap = Observer(), two_healthy()
    stale = _at(snap, 0, [_beat("gpu-1", age=3600, rv="1"), _beat("gpu-2", age=3600, rv="1")])
    assert obs.judge(stale, NEWEST)[1]["train"].health is Health.UNKNOWN
    fresh = _at(snap, 5, [_beat("gpu-1", age=-5), _beat("gpu-2", age=-5)])
    assert obs.judge(fresh, NEWEST)[1]["train"].health is Health.HEALTHY
    assert len(walked) == 4


def test_a_report_that_changed_is_judged_again(monkeypatch: Any) -> None:
    walked = _walks(monkeypatch)
    obs = Observer()
    snap = _at(two_healthy(), 0, [_beat("gpu-1", age=30, rv="1"), _beat("gpu-2", age=30, rv="1")])
    obs.judge(snap, NEWEST)
    xid = _at(snap, 5, [_beat("gpu-1", xid_events=[(0, 79)]), _beat("gpu-2")])
    assert obs.judge(xid, NEWEST)[1]["train"].health is Health.DEGRADED
    assert walked[2:] == ["gpu-1"]


def test_a_new_node_is_judged_again_when_its_nfd_grace_ends(monkeypatch: Any) -> None:
    walked = _walks(monkeypatch)
    created = (NOW - timedelta(seconds=590)).strftime("%Y-%m-%dT%H:%M:%SZ")
    new = edit(healthy("gpu-1"), labels={"feature.node.kubernetes.io/pci-10de.present": None})
    obj = node(new)
    obj["metadata"]["labels"].pop(names.GPU_PRESENT_LABEL, None)
    obj["metadata"]["creationTimestamp"] = created
    snap = snapshot(
        [obj],
        drivers={"train": driver("train", NEW)},
        compiled=[NEWEST],
        members={"train": [obj]},
        plans={("train", NEW): pool_plan("train", 1)},
        reports=[report("gpu-1")],
    )
    obs = Observer()
    assert obs.judge(snap, NEWEST)[1]["train"].health is Health.PROGRESSING
    assert obs.judge(_at(snap, 5), NEWEST)[1]["train"].health is Health.PROGRESSING
    assert len(walked) == 1
    assert obs.judge(_at(snap, 11), NEWEST)[1]["train"].health is Health.DEGRADED
    assert len(walked) == 2


# --- judging only what changed: the informers' change logs ------------------------------------


def _informer(kind: str = "Node", **kw: Any) -> Informer:
    """A real Informer fed by hand (its watch thread is not started)."""
    inf = Informer(cast(Any, None), "v1", kind, **kw)
    inf._synced.set()
    return inf


def _event(inf: Informer, obj: Obj, kind: str = "MODIFIED") -> None:
    inf._apply_event({"type": kind, "object": obj}, "1")


def _obj(name: str, rv: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": labels}}


def test_change_log_names_what_changed_since_an_earlier_view(monkeypatch: Any) -> None:
    inf = _informer()
    _event(inf, _obj("a", "1"), "ADDED")
    first = inf.change_log()
    _event(inf, _obj("b", "2"), "ADDED")
    _event(inf, _obj("a", "3", x="1"))
    _event(inf, _obj("a", "4", x="1"))  # a heartbeat: same facts, not a change
    now = inf.change_log()
    assert now.since(first) == {"a", "b"}
    assert now.since(now) == frozenset()
    assert first.since(first) == frozenset()  # a view never grows
    assert now.since(None) is None
    assert now.since(_informer().change_log()) is None  # another informer's log
    _event(inf, _obj("b", "5"), "DELETED")
    assert inf.change_log().since(now) == {"b"}
    # Trimmed past an old view: that view is told "unknown"; a recent one is not.
    monkeypatch.setattr("gitops_gpu.sync.live.LOG_MAX", 4)
    for i in range(6):
        _event(inf, _obj("c", str(10 + i), n=str(i)))
    recent = inf.change_log()
    _event(inf, _obj("d", "20"), "ADDED")
    assert inf.change_log().since(first) is None
    assert inf.change_log().since(recent) == {"d"}
    assert len(inf.change_log().entries) <= 4


def test_pod_changes_are_logged_by_the_nodes_they_left_and_joined() -> None:
    pods = _informer("Pod", log_by=live.pod_node)
    before = pods.change_log()
    pod = {"metadata": {"name": "p", "resourceVersion": "1"}, "spec": {"nodeName": "gpu-1"}}
    _event(pods, pod, "ADDED")
    mid = pods.change_log()
    moved = {**pod, "metadata": {"name": "p", "resourceVersion": "2"}, "spec": {"nodeName": "x"}}
    _event(pods, moved)
    assert mid.since(before) == {"gpu-1"}
    assert pods.change_log().since(mid) == {"gpu-1", "x"}


class _Clock:
    """The report informer's clock: ``at`` seconds after NOW."""

    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self) -> datetime:
        return NOW + timedelta(seconds=self.at)


class _Logged:
    """Nodes, reports and pods informers (real, fed by hand) and a pass's snapshot of them;
    the reports are observed ``age`` seconds before NOW and seen at ``clock`` (NOW, settable)."""

    def __init__(self, names_: Sequence[str], *, age: float = 30) -> None:
        self.clock = _Clock()
        self.nodes, self.reports = _informer(), _informer("NodeGPUReport", clock=self.clock)
        self.pods = _informer("Pod", log_by=live.pod_node)
        for i, name in enumerate(names_):
            _event(self.nodes, node(healthy(name), rv=str(i)), "ADDED")
            _event(self.reports, _beat(name, age=age, rv=str(i)), "ADDED")

    def snap(self, seconds: float = 0, *, with_driver: bool = True) -> PassSnapshot:
        logs = (self.nodes.change_log(), self.reports.change_log(), self.pods.change_log())
        nodes = self.nodes.items()
        informers = Snapshot(
            nodes,
            self.nodes.version,
            self.reports.by_name(),
            {},
            NOW + timedelta(seconds=seconds),
            logs,
        )
        return PassSnapshot(
            informers,
            {"train": driver("train", NEW)} if with_driver else {},
            {NEW: NEWEST},
            {"train": nodes},
            {("train", NEW): pool_plan("train", len(nodes))},
        )


def test_an_idle_pass_looks_at_no_node_and_a_change_at_that_node_only(monkeypatch: Any) -> None:
    walked = _walks(monkeypatch)
    fleet_ = _Logged(["gpu-1", "gpu-2", "gpu-3"])
    obs = Observer()
    first = obs.judge(fleet_.snap(), NEWEST)
    assert sorted(walked) == ["gpu-1", "gpu-2", "gpu-3"]
    assert first[1]["train"].health is Health.HEALTHY
    looked = _looks(monkeypatch, obs)
    assert obs.judge(fleet_.snap(5), NEWEST) == first  # idle: the pool's health as it was
    assert looked == []
    _event(fleet_.reports, _beat("gpu-2", xid_events=[(0, 79)], rv="9"))
    degraded = obs.judge(fleet_.snap(10), NEWEST)[1]["train"]
    assert degraded.health is Health.DEGRADED and degraded.count(Health.DEGRADED) == 1
    assert walked[3:] == ["gpu-2"]  # only the node that changed walked its ladder again
    assert looked == ["gpu-2"]  # and only it was looked at
    # A heartbeat (only observedAt moved) looks at that node, walks nothing, and the pool
    # keeps its very health (the gauges are not even set again).
    _event(fleet_.reports, _beat("gpu-1", rv="10"))
    assert obs.judge(fleet_.snap(15), NEWEST)[1]["train"] is degraded
    assert len(walked) == 4 and looked == ["gpu-2", "gpu-1"]
    # Time alone: the reports not heartbeated go stale (observed 30 s before NOW, 300 s limit).
    assert obs.judge(fleet_.snap(280), NEWEST)[1]["train"].health is Health.UNKNOWN


def test_an_expired_verdict_looks_at_that_node_only_and_keeps_the_pools_health(
    monkeypatch: Any,
) -> None:
    """Verdicts expire one by one (MEMO_MAX_AGE spread by name): the pool whose member's verdict
    ran out judges that member again, not all of them, and an equal verdict keeps its health."""
    monkeypatch.setattr("gitops_gpu.observe.MEMO_MAX_AGE", 20.0)  # well before the reports' 300 s
    names_ = [f"gpu-{i}" for i in range(6)]
    fleet_ = _Logged(names_)
    obs = Observer()
    first = obs.judge(fleet_.snap(), NEWEST)[1]["train"]
    until = {n: v.valid_until for n, v in obs._verdicts.items()}
    soonest = min(until, key=until.__getitem__)
    at = (until[soonest] - NOW).total_seconds()
    assert 20 <= at < 40
    looked = _looks(monkeypatch, obs)
    assert obs.judge(fleet_.snap(at - 1), NEWEST)[1]["train"] is first and looked == []
    again = obs.judge(fleet_.snap(at), NEWEST)[1]["train"]
    assert looked == [n for n in names_ if until[n] == until[soonest]]
    assert again is first  # judged again, read the same: the pool's health is kept
    assert obs._verdicts[soonest].valid_until > until[soonest]


def test_a_pool_left_out_of_a_pass_is_judged_afresh_when_it_returns() -> None:
    fleet_ = _Logged(["gpu-1", "gpu-2"])
    obs = Observer()
    assert obs.judge(fleet_.snap(), NEWEST)[1]["train"].health is Health.HEALTHY
    gone = obs.judge(fleet_.snap(5, with_driver=False), NEWEST)  # no objects: not judged
    assert "train" not in gone[1]
    _event(fleet_.nodes, node(edit(healthy("gpu-2"), ready="Unknown"), rv="7"))
    obs.judge(fleet_.snap(6, with_driver=False), NEWEST)  # the change falls in a skipped pass
    back = obs.judge(fleet_.snap(10), NEWEST)[1]["train"]
    assert back.count(Health.SKIPPED) == 1, back.reason  # NotReady, skipped


# --- a report cannot keep itself fresh (components/signals.py report_window) ----------------


def test_a_report_that_stopped_changing_goes_stale_from_when_it_was_seen(monkeypatch: Any) -> None:
    """observedAt 25 s ahead (within the skew): the report would be fresh until 325 s, but the
    controller saw it change at 0 and at 200 only, so it is stale after 200 + 300 s; a heartbeat
    keeps the verdict (no walk) and its validity ends there too."""
    walked = _walks(monkeypatch)
    fleet_ = _Logged(["gpu-1"], age=-25)
    obs = Observer()
    assert obs.judge(fleet_.snap(), NEWEST)[1]["train"].health is Health.HEALTHY
    fleet_.clock.at = 200
    _event(fleet_.reports, _beat("gpu-1", age=-225, rv="9"))  # a heartbeat, 25 s ahead again
    assert obs.judge(fleet_.snap(200), NEWEST)[1]["train"].health is Health.HEALTHY
    assert obs.judge(fleet_.snap(490), NEWEST)[1]["train"].health is Health.HEALTHY
    assert walked == ["gpu-1"]
    stale = obs.judge(fleet_.snap(501), NEWEST)[1]["train"]
    assert stale.health is Health.UNKNOWN
    assert stale.first_failure == "gpu-1 driver: NodeGPUReport is stale: 301s old (limit 300s)"
    assert walked == ["gpu-1", "gpu-1"]


def test_a_heartbeat_that_dates_the_report_ahead_is_judged_again(monkeypatch: Any) -> None:
    walked = _walks(monkeypatch)
    fleet_ = _Logged(["gpu-1"])
    obs = Observer()
    assert obs.judge(fleet_.snap(), NEWEST)[1]["train"].health is Health.HEALTHY
    year = 365 * 24 * 3600
    _event(fleet_.reports, _beat("gpu-1", age=-year, rv="9"))  # only observedAt moved
    ahead = obs.judge(fleet_.snap(5), NEWEST)[1]["train"]
    assert ahead.health is Health.UNKNOWN and len(walked) == 2
    assert ahead.first_failure == (
        "gpu-1 driver: NodeGPUReport observedAt 2027-11-29T12:00:00Z is 31535995s ahead of the "
        "controller's clock (max skew 30s): untrusted"
    )


def test_an_untrusted_verdict_ends_when_the_report_comes_within_the_skew(
    monkeypatch: Any,
) -> None:
    walked = _walks(monkeypatch)
    fleet_ = _Logged(["gpu-1"], age=-60)  # 60 s ahead: trusted from 30 s on
    obs = Observer()
    assert obs.judge(fleet_.snap(), NEWEST)[1]["train"].health is Health.UNKNOWN
    assert obs.judge(fleet_.snap(29), NEWEST)[1]["train"].health is Health.UNKNOWN
    assert len(walked) == 1
    assert obs.judge(fleet_.snap(30), NEWEST)[1]["train"].health is Health.HEALTHY
    assert len(walked) == 2


# -- evidence window ----------------------------------------------------------------------------
def _adopted(commit: str, at: datetime | None) -> Obj:
    obj = driver("train", commit)
    if at is not None:
        entry = {"manager": names.FIELD_MANAGER, "operation": "Apply"}
        obj["metadata"]["managedFields"] = [{**entry, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    return obj


def _xid_pool(adopted: datetime | None) -> PoolObservation:
    """One node whose agent saw Xid 79 at NOW-30s; the pool's NVIDIADriver applied at
    ``adopted``."""
    nodes = [node(healthy("gpu-1"))]
    snap = snapshot(
        nodes,
        drivers={"train": _adopted(NEW, adopted)},
        compiled=[NEWEST],
        members={"train": nodes},
        plans={("train", NEW): pool_plan("train", 1)},
        reports=[report("gpu-1", xid_events=[(0, 79)])],
    )
    return Observer().judge(snap, NEWEST)[0]["train"]


def test_an_xid_after_the_pool_adopted_its_commit_fails_it() -> None:
    obs = _xid_pool(NOW - timedelta(seconds=60))
    assert obs.nodes_unhealthy == 1 and obs.first_failure is not None
    assert "Xid 79" in obs.first_failure


def test_an_xid_from_before_the_adoption_is_history_even_for_a_revert() -> None:
    """A revert to objects equal to the running ones still re-applies the NVIDIADriver (its
    commit annotation moves), so an Xid seen before that is not the revert's."""
    obs = _xid_pool(NOW - timedelta(seconds=10))
    assert obs.nodes_healthy == 1, obs.first_failure


def test_without_our_apply_time_every_xid_counts() -> None:
    assert _xid_pool(None).nodes_unhealthy == 1


# -- the operator's side ------------------------------------------------------------------------
def _error(reason: str, message: str) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "Error"},
            {"type": "Error", "status": "True", "reason": reason, "message": message},
        ]
    }


def test_the_operators_refusal_comes_first_in_the_pools_failure() -> None:
    refused = {**driver("train", NEW), "kind": "NVIDIADriver"}
    refused["status"] = _error("ReconcileFailed", "failed to get image path from crd:\n  invalid")
    policy = {
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "status": _error(
            "ReconcileFailed",
            "Failed to reconcile state-operator-validation: empty image path provided through "
            "both ClusterPolicy CR and ENV VALIDATOR_IMAGE",
        ),
    }
    ops = OperandContext(
        operands.Operands.empty(), {}, policy_refusal=operator_state.refusal(policy)
    )
    snap = replace(two_healthy(), drivers={"train": refused}, operands=ops)
    obs = Observer().judge(snap, NEWEST)[0]["train"]
    assert obs.first_failure == (
        "operator: NVIDIADriver train refused: ReconcileFailed: failed to get image path from "
        "crd: invalid; operator: ClusterPolicy cluster-policy refused: ReconcileFailed: Failed "
        "to reconcile state-operator-validation: empty image path provided through both "
        "ClusterPolicy CR and ENV VALIDATOR_IMAGE"
    )


def test_operands_still_coming_up_are_not_a_refusal() -> None:
    waiting = {"kind": "NVIDIADriver", "metadata": {"name": "train"}}
    waiting["status"] = _error("DriverNotReady", "Waiting for driver pod to be ready")
    assert operator_state.refusal(waiting) is None
    assert operator_state.refusal({"status": {"conditions": []}}) is None
    long = {"kind": "ClusterPolicy", "metadata": {"name": "cp"}}
    long["status"] = _error("ReconcileFailed", "x" * 1000)
    text = operator_state.refusal(long)
    assert text is not None and text.endswith("...") and len(text) < 400
