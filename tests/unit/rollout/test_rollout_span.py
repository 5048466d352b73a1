"""Stages that span clusters: one state machine per cluster, one shared record.

Cluster a holds the canary pool and one pool of the fleet stage, cluster b the other. Each
"controller" is ``step`` with its ``cluster``; it adopts only its own pools (as the real one
only has its own cluster's client), and both write to the same MemoryBackend.
"""

from __future__ import annotations

from typing import ClassVar

from rollout_sim import PASS, Fleet, sha

from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout import span
from gitops_gpu.rollout.actions import Action, AdoptCommit, Rollback, SetStatus
from gitops_gpu.rollout.inputs import RolloutInput
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.record import Record
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    SUCCESS,
    CommitStatus,
    stage_context,
)

A, B, C = sha(1), sha(2), sha(3)
POOL_CLUSTERS = {"canary": "a", "train": "a", "infer": "b"}


def two_cluster_stages(
    fleet_gate: GateSpec | None = None, on_failure: str = "hold"
) -> tuple[StageSpec, ...]:
    return (
        StageSpec("canary", ("canary",), GateSpec(soak_seconds=600)),
        StageSpec("fleet", ("train", "infer"), fleet_gate or GateSpec(), on_failure),
    )


class Clusters(Fleet):
    """The simulated fleet, driven by one controller per cluster."""

    down: set[str]
    pool_clusters: ClassVar[dict[str, str]] = POOL_CLUSTERS

    def run_pass(self) -> list[Action]:
        out: list[Action] = []
        for cluster in sorted(set(self.pool_clusters.values())):
            if cluster not in getattr(self, "down", set()):
                out += self.cluster_pass(cluster)
        self.now += PASS
        for pool in self.pools.values():
            pool.passes_since_apply += 1
        return out

    def cluster_pass(self, cluster: str) -> list[Action]:
        inp = self.input()
        inp = RolloutInput(
            commits=inp.commits,
            statuses=inp.statuses,
            pools={p: o for p, o in inp.pools.items() if self.pool_clusters[p] == cluster},
            stages=inp.stages,
            now=inp.now,
            approvals=inp.approvals,
            cluster=cluster,
            pool_clusters=self.pool_clusters,
        )
        actions = step(inp)
        for action in actions:
            self.actions.append((self.now, action))
            if isinstance(action, AdoptCommit | Rollback):
                commit = action.commit if isinstance(action, AdoptCommit) else action.to_commit
                for name in self.stage(action.stage).pools:
                    if self.pool_clusters[name] == cluster:
                        self.apply(name, commit)
            elif isinstance(action, SetStatus):
                status = action.to_status(self.now)
                if self.backend.set_status(status):
                    self.written.append(status)
        return actions

    def part(self, commit: str, stage: str, cluster: str) -> CommitStatus | None:
        return self.backend.latest(commit, span.cluster_context(stage, cluster))


def test_commit_flows_canary_in_a_then_fleet_in_both_clusters() -> None:
    fleet = Clusters(stage_specs=two_cluster_stages())
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "fleet") == SUCCESS)
    # canary lives in one cluster: recorded as in a single-cluster fleet, no part contexts
    assert fleet.state(A, "canary") == SUCCESS
    assert fleet.part(A, "canary", "a") is None
    parts = [fleet.part(A, "fleet", "a"), fleet.part(A, "fleet", "b")]
    assert [p.state if p else None for p in parts] == [SUCCESS, SUCCESS]
    verdicts = fleet.history(A, "fleet")
    assert [s.state for s in verdicts] == [PENDING, SUCCESS]
    assert verdicts[-1].description == "fleet: passed in clusters a, b"
    # b adopted only after the canary's success was recorded
    canary_ok = fleet.latest(A, "canary")
    assert canary_ok is not None
    first_b = min(t for t, a in fleet.actions if isinstance(a, AdoptCommit) and a.stage == "fleet")
    assert first_b >= canary_ok.created_at  # same pass: a wrote it, b read it right after
    # one derived verdict, however many controllers saw it
    assert fleet.writes_per_context()[(A, stage_context("fleet"))] == 2
    before = len(fleet.written)
    fleet.run(3)
    assert len(fleet.written) == before


def test_canary_failure_in_a_leaves_b_untouched() -> None:
    fleet = Clusters(stage_specs=two_cluster_stages())
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "fleet") == SUCCESS)
    fleet.push(B, bad=True)
    fleet.run_until(lambda: fleet.state(B, "canary") == FAILURE)
    fleet.run(10)
    assert fleet.pools["infer"].commit == A and fleet.pools["train"].commit == A
    assert fleet.part(B, "fleet", "b") is None and fleet.state(B, "fleet") is None


def test_failure_in_one_cluster_fails_the_stage_naming_it_and_stops_the_other_part() -> None:
    fleet = Clusters(stage_specs=two_cluster_stages(GateSpec(soak_seconds=1800)))
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "fleet") == SUCCESS)
    fleet.push(B)
    fleet.run_until(lambda: fleet.pools["infer"].commit == B)
    fleet.pools["infer"].broken_nodes = 1  # a node of b goes bad; a's part is still soaking
    fleet.run_until(lambda: fleet.state(B, "fleet") == FAILURE)
    verdict = fleet.latest(B, "fleet")
    assert verdict is not None
    assert verdict.description.startswith("fleet: failed in cluster b: ")
    fleet.run(2)
    part_a = fleet.part(B, "fleet", "a")
    assert part_a is not None and part_a.state == ERROR
    assert part_a.description.startswith("fleet: stopped, failed in cluster b")


def test_rollback_in_one_cluster_touches_only_its_pools() -> None:
    fleet = Clusters(stage_specs=two_cluster_stages(GateSpec(soak_seconds=1800), "rollback"))
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "fleet") == SUCCESS)
    fleet.push(B)
    fleet.run_until(lambda: fleet.pools["infer"].commit == B and fleet.pools["train"].commit == B)
    fleet.pools["infer"].broken_nodes = 1  # only cluster b's part fails
    fleet.run_until(lambda: fleet.state(B, "fleet") == FAILURE)
    fleet.run(4)
    rollbacks = [a for _, a in fleet.actions if isinstance(a, Rollback)]
    assert rollbacks and all(a.to_commit == A for a in rollbacks)
    assert fleet.pools["infer"].commit == A  # b rolled its own pool back
    assert fleet.pools["train"].commit == B  # a's part stopped and kept what it runs
    part_a = fleet.part(B, "fleet", "a")
    assert part_a is not None and part_a.state == ERROR


def test_a_silent_cluster_never_lets_the_stage_succeed_and_fails_it_at_the_timeout() -> None:
    fleet = Clusters(stage_specs=two_cluster_stages(GateSpec(timeout_seconds=3600)))
    fleet.down = {"b"}  # cluster b's controller is gone
    fleet.push(A)
    fleet.run_until(lambda: fleet.part(A, "fleet", "a") is not None)
    fleet.run_until(lambda: fleet.state(A, "fleet") == FAILURE, max_passes=80)
    part_a = fleet.part(A, "fleet", "a")
    assert part_a is not None and part_a.state == SUCCESS
    verdict = fleet.latest(A, "fleet")
    assert verdict is not None
    assert verdict.description == (
        "fleet: no word from cluster b within 1h (its controller is down or cut off)"
    )
    assert fleet.pools["infer"].commit is None
    fleet.down = set()  # b comes back: it does not adopt a commit the stage failed
    fleet.run(5)
    assert fleet.pools["infer"].commit is None
    part_b = fleet.part(A, "fleet", "b")
    assert part_b is not None and part_b.state == ERROR


def test_superseded_parts_close_the_stage_verdict_with_error() -> None:
    fleet = Clusters(stage_specs=two_cluster_stages(GateSpec(soak_seconds=3600)))
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "fleet") == PENDING)
    fleet.push(B)
    fleet.run_until(lambda: fleet.state(A, "fleet") == ERROR)
    verdict = fleet.latest(A, "fleet")
    assert verdict is not None and "superseded by" in verdict.description


def test_derive_is_the_same_whoever_derives_it() -> None:
    stage = StageSpec("fleet", ("train", "infer"))
    statuses = [
        CommitStatus(A, span.cluster_context("fleet", "a"), SUCCESS, "fleet: ok", created_at=1),
        CommitStatus(
            A, span.cluster_context("fleet", "b"), FAILURE, "fleet: 1 node down", created_at=2
        ),
    ]
    one = span.derive(stage, ("a", "b"), [A], Record(statuses), now=10)
    two = span.derive(stage, ("a", "b"), [A], Record(list(reversed(statuses))), now=99)
    assert (
        one
        == two
        == [
            SetStatus(A, stage_context("fleet"), FAILURE, "fleet: failed in cluster b: 1 node down")
        ]
    )
    # a verdict in the record is final
    done = [*statuses, CommitStatus(A, stage_context("fleet"), FAILURE, "x")]
    assert span.derive(stage, ("a", "b"), [A], Record(done), now=10) == []


def test_single_cluster_stage_in_a_multi_cluster_fleet_keeps_its_own_context() -> None:
    stage = StageSpec("canary", ("canary",))
    assert span.local_part(stage, "a", POOL_CLUSTERS) is stage
    assert span.local_part(stage, "b", POOL_CLUSTERS) is None
    part = span.local_part(StageSpec("fleet", ("train", "infer")), "b", POOL_CLUSTERS)
    assert part is not None and part.pools == ("infer",)
    assert span.part_context(part) == "gitops-gpu/stage/fleet/b"


def test_three_controllers_write_each_verdict_once() -> None:
    class Three(Clusters):
        pool_clusters: ClassVar[dict[str, str]] = {"canary": "a", "train": "b", "infer": "c"}

    fleet = Three(stage_specs=two_cluster_stages())  # fleet now spans b and c
    fleet.push(A)
    fleet.run_until(lambda: fleet.state(A, "fleet") == SUCCESS)
    writes = fleet.writes_per_context()
    assert writes[(A, stage_context("fleet"))] == 2  # pending once, success once
    assert writes[(A, span.cluster_context("fleet", "b"))] <= 3
    assert writes[(A, span.cluster_context("fleet", "c"))] <= 3
    assert fleet.part(A, "fleet", "a") is None  # a holds no pool of the stage


def test_one_approval_releases_every_cluster_part() -> None:
    fleet = Clusters(stage_specs=two_cluster_stages(GateSpec(approval_required=True)))
    fleet.push(A)
    fleet.run_until(lambda: fleet.part(A, "fleet", "b") is not None)
    fleet.run(3)
    assert fleet.pools["train"].commit is None and fleet.pools["infer"].commit is None
    parts = [fleet.part(A, "fleet", c) for c in ("a", "b")]
    assert all(p is not None and "awaiting approval to roll out" in p.description for p in parts)
    fleet.approvals.add((A, "fleet"))  # gitops-gpu approve A --stage fleet
    fleet.run_until(lambda: fleet.state(A, "fleet") == SUCCESS)
    assert fleet.pools["train"].commit == A and fleet.pools["infer"].commit == A
