"""What one rollout pass looks at: plain values the controller gathers before calling ``step``.

Everything time- or IO-dependent comes in here (``now`` included), so the state machine is a pure
function of this value and replays identically in tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.rollout.checks import AnalysisResult, SmokeResult
from gitops_gpu.rollout.line import LineStop
from gitops_gpu.rollout.status import CommitStatus


@dataclass(frozen=True)
class Commit:
    """One commit of the tracked branch.

    ``preflight`` is this pass's check result (True/False) when the controller ran it; None means
    "not checked this pass": the recorded ``gitops-gpu/preflight`` status decides (success only).
    """

    sha: str
    preflight: bool | None = None
    # One line for the preflight status, e.g. "2 errors: driver 550 does not support B200".
    preflight_summary: str = ""


@dataclass(frozen=True)
class PoolObservation:
    """The observed state of one pool, from the live reader and the verification ladder."""

    pool: str
    # The gitops-gpu.io/commit annotation on the pool's objects; None when they do not agree or
    # do not exist yet.
    commit: str | None
    objects_in_sync: bool
    nodes_total: int
    nodes_healthy: int
    nodes_unhealthy: int = 0  # degraded: a rung of the ladder failed
    nodes_progressing: int = 0  # on its way (driver upgrade, MIG relabel, validator running)
    first_failure: str | None = None  # "driver: NVML reports 570.86.10, desired 580.126.20"
    # Short per-pool summary for descriptions, e.g. "on 580.126.20".
    summary: str = ""
    # Not available (NotReady, cordoned by someone else) and skipped (unavailableNodes: skip,
    # within maxUnavailable): counted in nodes_total, in none of healthy, unhealthy, progressing.
    nodes_unavailable: int = 0
    unavailable_kinds: tuple[str, ...] = ()  # what made them so: "NotReady", "cordoned"
    # A node the driver upgrade waits on, and who holds it (components/holders.py): "gpu-7
    # waits on pod research/train-7 (Job, PDB train-pdb allows 0)"; "" when none waits.
    waiting_on: str = ""


@dataclass(frozen=True)
class RolloutInput:
    # Newest first.
    commits: Sequence[Commit]
    # The record, as read back from the status backend (oldest first per commit).
    statuses: Sequence[CommitStatus]
    # Keyed by pool name; a pool missing here has no objects yet.
    pools: Mapping[str, PoolObservation]
    stages: Sequence[StageSpec]
    now: float
    # (commit sha, stage name) pairs a person approved.
    approvals: Set[tuple[str, str]] = field(default_factory=frozenset)
    paused: bool = False
    # Who stopped the line, when and why (rollout/line.py), while ``paused``.
    stop: LineStop | None = None
    # Keyed by (stage, commit): the gate's smoke tests and metric analysis (rollout/checks.py).
    smoke: Mapping[tuple[str, str], SmokeResult] = field(default_factory=dict)
    analysis: Mapping[tuple[str, str], AnalysisResult] = field(default_factory=dict)
    # `controller --cluster`: the cluster this controller manages, and every pool's cluster.
    # It runs only its cluster's part of each stage (rollout/span.py); None: the whole fleet.
    cluster: str | None = None
    pool_clusters: Mapping[str, str] = field(default_factory=dict)
    # Why nothing may be adopted or recorded this pass (the branch's history was rewritten).
    held: str | None = None
