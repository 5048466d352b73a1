"""What a gate's own tests found, as plain values for the state machine.

Smoke tests (``gate.smokeTest``): one pod per selected node, run by the controller once a stage
converged on a commit (gitops_gpu/sync/smoke.py does the Job I/O). Metric analysis
(``gate.metrics``): PromQL against ``--prometheus-url`` during the soak (gitops_gpu/analysis.py).
The controller gathers both per (stage, commit) before ``step``; the machine only decides.

Whether a smoke test passed is kept in the record, not in the cluster: the stage's pending status
moves past "smoke testing" (to "soaking", "awaiting approval" or a verdict) only once every pod
succeeded, so a restarted controller never reruns a finished test for the same commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class SmokeState(StrEnum):
    ABSENT = "absent"  # no pods for this (stage, commit): start them
    RUNNING = "running"
    PASSED = "passed"  # every selected node's pod succeeded
    FAILED = "failed"  # at least one pod failed or timed out


@dataclass(frozen=True)
class SmokeResult:
    state: SmokeState = SmokeState.ABSENT
    nodes_total: int = 0
    nodes_passed: int = 0
    # Per failed node: "node-a: Error (exit code 1): <last log lines>".
    failures: tuple[str, ...] = ()
    # Per node whose pod cannot start yet: "node-a: pod Unschedulable: 0/5 nodes are ...".
    waiting: tuple[str, ...] = ()


class AnalysisState(StrEnum):
    OK = "ok"  # every metric within its bounds
    VIOLATED = "violated"  # a metric out of bounds: fail the stage
    NO_DATA = "no data"  # Prometheus unreachable or a query returned nothing
    ERROR = "error"  # Prometheus refused a query (its error text in detail)


@dataclass(frozen=True)
class AnalysisResult:
    state: AnalysisState = AnalysisState.OK
    # "xid: 3 > max 0" / "xid: no data" / "xid: bad_data: 1:5: parse error: ..."; when OK,
    # each metric's latest value: "xid 0 (max 0)".
    detail: str = ""
    values: tuple[tuple[str, float], ...] = ()  # (metric, latest value) for those read
