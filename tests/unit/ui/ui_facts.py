"""One pass's facts for the web view's and the notifier's unit tests: the example fleet at NEW,
every pool running OLD, the canary rolling NEW out with ``sick`` nodes degraded."""

from __future__ import annotations

from gitops_gpu.components.health import Health, NodeHealth, PoolHealth, RungResult
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.rollout.actions import Wait
from gitops_gpu.rollout.authentic import Ignored, Judged
from gitops_gpu.rollout.inputs import Commit, PoolObservation
from gitops_gpu.rollout.status import CommitStatus, stage_context
from gitops_gpu.ui.facts import PassFacts
from gitops_gpu_dev import paths

OLD, NEW = "a" * 40, "b" * 40
T0 = 1_800_000_000.0


def node(name: str, health: Health, reason: str = "") -> NodeHealth:
    rungs = (
        RungResult("driver", Health.HEALTHY, "580.126.20"),
        RungResult("device-plugin", health, reason),
    )
    return NodeHealth(name, health, reason, rungs)


def pool(pool: str, nodes: list[NodeHealth]) -> PoolHealth:
    counts: dict[Health, int] = {}
    for n in nodes:
        counts[n.health] = counts.get(n.health, 0) + 1
    worst = max((n.health for n in nodes), default=Health.HEALTHY)
    return PoolHealth(pool, worst, counts, tuple(nodes))


def facts(seq: int = 1, sick: int = 1, reason: str = "plugin pod CrashLoopBackOff") -> PassFacts:
    compiled = compile_fleet(load_repo(paths.fleet_example()), NEW)
    pools = [p for c in compiled.clusters.values() for p in c.pools]
    canary = [node(f"canary-{i:03d}", Health.DEGRADED, reason) for i in range(sick)]
    canary.append(node("canary-ok", Health.HEALTHY))
    health = {p: pool(p, [node(f"{p}-0", Health.HEALTHY)]) for p in pools}
    health["canary"] = pool("canary", canary)
    obs = {p: PoolObservation(p, OLD, True, 1, 1) for p in pools}
    statuses = [
        CommitStatus(OLD, stage_context("canary"), "success", "canary: 4/4 healthy", "", T0),
        CommitStatus(
            NEW,
            stage_context("canary"),
            "pending",
            "canary: rolling out",
            "",
            T0 + 60,
            seal="gg1.ctl-key.1800000060000.sig",
        ),
    ]
    forged = CommitStatus(NEW, stage_context("training"), "success", "skip it", creator="mallory")
    return PassFacts(
        seq=seq,
        at=T0 + 120,
        result="ok",
        head=NEW,
        commits=(Commit(NEW, True, "clean"), Commit(OLD, True)),
        compiled=compiled,
        judged=Judged(statuses, [Ignored(forged, "not sealed by a trusted controller")]),
        pools=obs,
        health=health,
        actions=(Wait(f"training: {OLD[:7]} awaiting approval"),),
    )
