"""A tiny simulated fleet for driving the rollout state machine pass by pass.

Pools adopt what the machine says at once (their commit annotation changes), their nodes
progress for ``converge_passes`` passes and then turn healthy, or degraded for a bad commit.
Statuses go through a MemoryBackend, so the record is read back exactly like in production.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gitops_gpu.fleet.compiled import GateSpec, StageSpec
from gitops_gpu.rollout.actions import Action, AdoptCommit, Rollback, SetStatus
from gitops_gpu.rollout.inputs import Commit, PoolObservation, RolloutInput
from gitops_gpu.rollout.line import LINE_CONTEXT, LineStop
from gitops_gpu.rollout.machine import step
from gitops_gpu.rollout.status import CommitStatus, MemoryBackend, read_record, stage_context

T0 = 1_750_000_000.0
PASS = 60.0


def sha(n: int | str) -> str:
    """A recognisable 40-hex sha: sha(1) -> '1111111...'."""
    digit = str(n)
    return (digit * 40)[:40] if len(digit) == 1 else f"{digit:0>40}"


def stages(
    canary: GateSpec | None = None,
    production: GateSpec | None = None,
    canary_on_failure: str = "hold",
) -> tuple[StageSpec, ...]:
    return (
        StageSpec("canary", ("canary",), canary or GateSpec(soak_seconds=600), canary_on_failure),
        StageSpec("production", ("train", "infer"), production or GateSpec()),
    )


@dataclass
class SimPool:
    name: str
    nodes: int
    commit: str | None = None
    passes_since_apply: int = 0
    stuck: bool = False  # never converges
    broken_nodes: int = 0  # degraded regardless of commit (a bad node)
    in_sync: bool = True


@dataclass
class Fleet:
    stage_specs: tuple[StageSpec, ...] = field(default_factory=stages)
    nodes: dict[str, int] = field(default_factory=lambda: {"canary": 2, "train": 3, "infer": 2})
    converge_passes: int = 2
    now: float = T0
    backend: MemoryBackend = field(default_factory=MemoryBackend)
    commits: list[Commit] = field(default_factory=list)  # newest first
    bad: set[str] = field(default_factory=set)
    approvals: set[tuple[str, str]] = field(default_factory=set)
    paused: bool = False
    stop: LineStop | None = None
    waiting_on: dict[str, str] = field(default_factory=dict)  # pool -> who holds a node
    pools: dict[str, SimPool] = field(default_factory=dict)
    actions: list[tuple[float, Action]] = field(default_factory=list)
    written: list[CommitStatus] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.pools:
            self.pools = {name: SimPool(name, n) for name, n in self.nodes.items()}

    # --- inputs -------------------------------------------------------------------------------
    def push(self, commit: str, *, preflight: bool = True, bad: bool = False) -> None:
        self.commits.insert(0, Commit(commit, preflight))
        if bad:
            self.bad.add(commit)

    def observe(self) -> dict[str, PoolObservation]:
        out = {}
        for pool in self.pools.values():
            if pool.commit is None:
                continue
            settled = not pool.stuck and pool.passes_since_apply >= self.converge_passes
            bad = pool.commit in self.bad
            degraded = pool.nodes if settled and bad else min(pool.broken_nodes, pool.nodes)
            progressing = 0 if settled else pool.nodes - degraded
            out[pool.name] = PoolObservation(
                pool=pool.name,
                commit=pool.commit,
                objects_in_sync=pool.in_sync,
                nodes_total=pool.nodes,
                nodes_healthy=pool.nodes - degraded - progressing,
                nodes_unhealthy=degraded,
                nodes_progressing=progressing,
                first_failure="driver: upgrade-failed" if degraded else None,
                summary=f"on {pool.commit[:4]}",
                waiting_on="" if settled else self.waiting_on.get(pool.name, ""),
            )
        return out

    def input(self) -> RolloutInput:
        record = read_record(self.backend, [c.sha for c in self.commits])
        return RolloutInput(
            commits=tuple(self.commits),
            statuses=record,
            pools=self.observe(),
            stages=self.stage_specs,
            now=self.now,
            approvals=frozenset(self.approvals),
            paused=self.paused,
            stop=self.stop,
        )

    # --- one pass -----------------------------------------------------------------------------
    def run_pass(self) -> list[Action]:
        actions = step(self.input())
        for action in actions:
            self.actions.append((self.now, action))
            if isinstance(action, AdoptCommit | Rollback):
                commit = action.commit if isinstance(action, AdoptCommit) else action.to_commit
                for name in self.stage(action.stage).pools:
                    self.apply(name, commit)
            elif isinstance(action, SetStatus):
                status = action.to_status(self.now)
                if self.backend.set_status(status):
                    self.written.append(status)
        self.now += PASS
        for pool in self.pools.values():
            pool.passes_since_apply += 1
        return actions

    def run(self, passes: int) -> None:
        for _ in range(passes):
            self.run_pass()

    def apply(self, pool_name: str, commit: str) -> None:
        pool = self.pools[pool_name]
        if pool.commit != commit:
            pool.commit, pool.passes_since_apply = commit, 0
        pool.in_sync = True

    # --- reading the outcome ------------------------------------------------------------------
    def stage(self, name: str) -> StageSpec:
        return next(s for s in self.stage_specs if s.name == name)

    def state(self, commit: str, stage: str) -> str | None:
        found = self.backend.latest(commit, stage_context(stage))
        return found.state if found else None

    def latest(self, commit: str, stage: str) -> CommitStatus | None:
        return self.backend.latest(commit, stage_context(stage))

    def history(self, commit: str, stage: str) -> list[CommitStatus]:
        return self.context_history(commit, stage_context(stage))

    def line(self, commit: str) -> list[CommitStatus]:
        return self.context_history(commit, LINE_CONTEXT)

    def context_history(self, commit: str, context: str) -> list[CommitStatus]:
        return [s for s in self.backend.list_statuses(commit) if s.context == context]

    def adopted(self, stage: str) -> list[str]:
        return [
            a.commit for _, a in self.actions if isinstance(a, AdoptCommit) and a.stage == stage
        ]

    def writes_per_context(self) -> Counter[tuple[str, str]]:
        return Counter((s.sha, s.context) for s in self.written)

    def run_until(self, done: Callable[[], bool], max_passes: int = 200) -> int:
        """Run until ``done()`` is true; return the passes it took."""
        for n in range(max_passes):
            if done():
                return n
            self.run_pass()
        raise AssertionError(f"not done after {max_passes} passes")
