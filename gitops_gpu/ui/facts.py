"""What one pass held, published for the web view: plain references to the pass's own values,
never copied and never changed after publishing (the next pass publishes anew)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gitops_gpu.components.health import PoolHealth
from gitops_gpu.components.holders import NodeWait
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.rollout.authentic import Judged
from gitops_gpu.rollout.inputs import Commit, PoolObservation
from gitops_gpu.rollout.line import LineStop
from gitops_gpu.rollout.status import CommitStatus
from gitops_gpu.snapshot import PassSnapshot


@dataclass(frozen=True)
class PassFacts:
    seq: int  # passes published so far: what an event stream announces
    at: float  # the pass's clock, seconds since the epoch
    result: str  # ok | error | paused | held | standby
    head: str | None
    error: str = ""
    held: str = ""
    cluster: str | None = None  # --cluster: this controller's cluster of a multi-cluster fleet
    commits: Sequence[Commit] = ()  # newest first, with this pass's preflight verdicts
    compiled: CompiledFleet | None = None  # the newest commit that compiles
    judged: Judged | None = None  # the record as the pass counted it
    stop: LineStop | None = None
    pools: Mapping[str, PoolObservation] = field(default_factory=dict)
    health: Mapping[str, PoolHealth] = field(default_factory=dict)
    waits: Mapping[str, Sequence[NodeWait]] = field(default_factory=dict)
    snap: PassSnapshot | None = None
    actions: Sequence[object] = ()  # the rollout step's actions, in order
    written: Sequence[CommitStatus] = ()  # the statuses this pass wrote to the record
    subjects: Mapping[str, str] = field(default_factory=dict)  # commit -> its first line
