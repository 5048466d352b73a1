"""Gate smoke tests and metric analysis in the state machine (pure: results come as input)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rollout_sim import PASS, Fleet, sha, stages

from gitops_gpu.fleet.compiled import GateSpec, MetricSpec, SmokeTestSpec
from gitops_gpu.rollout.actions import RunSmokeTest
from gitops_gpu.rollout.checks import AnalysisResult, AnalysisState, SmokeResult, SmokeState
from gitops_gpu.rollout.inputs import RolloutInput
from gitops_gpu.rollout.phases import Phase, read_mark
from gitops_gpu.rollout.status import FAILURE, PENDING, SUCCESS

A, B = sha(1), sha(2)
SMOKE = SmokeTestSpec("nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04", ("nvidia-smi",))
XID = MetricSpec("xid", 'sum(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"})', max=0)


@dataclass
class GateFleet(Fleet):
    smoke: dict[tuple[str, str], SmokeResult] = field(default_factory=dict)
    analysis: dict[tuple[str, str], AnalysisResult] = field(default_factory=dict)

    def input(self) -> RolloutInput:
        return replace(super().input(), smoke=dict(self.smoke), analysis=dict(self.analysis))

    def smoke_runs(self, stage: str = "canary") -> int:
        return sum(1 for _, a in self.actions if isinstance(a, RunSmokeTest) and a.stage == stage)

    def phases(self, commit: str, stage: str = "canary") -> list[str]:
        out = []
        for s in self.history(commit, stage):
            mark = read_mark(s)
            out.append(mark.phase.value if mark is not None else s.state)
        return out


def smoke_fleet(soak: float = 600, **gate: object) -> GateFleet:
    spec = GateSpec(soak_seconds=soak, smoke_test=SMOKE, **gate)  # type: ignore[arg-type]
    return GateFleet(stage_specs=stages(canary=spec))


def test_smoke_test_runs_after_convergence_then_soak() -> None:
    fleet = smoke_fleet()
    fleet.push(A)
    fleet.run_until(lambda: fleet.smoke_runs() > 0)
    # Only once converged: the pools took 2 passes, the pending status says so.
    assert fleet.phases(A) == ["rolling out", "smoke testing"]
    assert "smoke test on every node" in fleet.history(A, "canary")[-1].description
    fleet.run(3)
    assert fleet.state(A, "production") is None  # not promoted while the test runs
    fleet.smoke[("canary", A)] = SmokeResult(SmokeState.RUNNING, 2, 1)
    fleet.run(2)
    fleet.smoke[("canary", A)] = SmokeResult(SmokeState.PASSED, 2, 2)
    fleet.run_pass()
    assert fleet.phases(A) == ["rolling out", "smoke testing", "soaking"]
    runs = fleet.smoke_runs()
    # The Jobs are gone (cleaned up) and a restarted controller sees no result: no rerun.
    fleet.smoke.clear()
    fleet.run_until(lambda: fleet.state(A, "canary") == SUCCESS)
    assert fleet.smoke_runs() == runs
    assert fleet.latest(A, "canary").description.endswith("smoke test passed, soaked 10m")  # type: ignore[union-attr]


def test_failed_smoke_pod_fails_the_stage_naming_node_and_log() -> None:
    fleet = smoke_fleet()
    fleet.push(A)
    fleet.run_until(lambda: fleet.smoke_runs() > 0)
    failure = "canary-1: Error (exit code 1): CUDA error: no CUDA-capable device is detected"
    fleet.smoke[("canary", A)] = SmokeResult(SmokeState.FAILED, 2, 1, (failure,))
    fleet.run_pass()
    latest = fleet.latest(A, "canary")
    assert latest is not None and latest.state == FAILURE
    assert latest.description.startswith("canary: smoke test failed on 1/2 nodes: canary-1: Error")
    fleet.run(5)
    assert fleet.state(A, "production") is None


def test_a_smoke_pod_that_cannot_start_is_said_once_before_its_timeout() -> None:
    fleet = smoke_fleet()
    fleet.push(A)
    fleet.run_until(lambda: fleet.smoke_runs() > 0)
    started = fleet.latest(A, "canary")
    assert started is not None
    pending = "canary-1: pod Unschedulable: 0/4 nodes are available: 1 Insufficient nvidia.com/gpu"
    fleet.smoke[("canary", A)] = SmokeResult(SmokeState.RUNNING, 2, 1, (), (pending,))
    fleet.run(3)
    said = [s for s in fleet.history(A, "canary") if "Unschedulable" in s.description]
    assert len(said) == 1, [s.description for s in fleet.history(A, "canary")]
    assert said[0].state == PENDING and "; canary-1: pod Unschedulable" in said[0].description
    mark, first = read_mark(said[0]), read_mark(started)
    assert mark is not None and first is not None
    assert mark.phase is Phase.SMOKE_TESTING and mark.since == first.since  # same phase, same T


def test_relapse_after_a_passed_smoke_test_does_not_rerun_it() -> None:
    fleet = smoke_fleet()
    fleet.push(A)
    fleet.run_until(lambda: fleet.smoke_runs() > 0)
    fleet.smoke[("canary", A)] = SmokeResult(SmokeState.PASSED, 2, 2)
    fleet.run_pass()
    fleet.smoke.clear()
    runs = fleet.smoke_runs()
    fleet.pools["canary"].passes_since_apply = 0  # nodes progress again: a relapse
    fleet.run_until(lambda: fleet.state(A, "canary") == SUCCESS)
    assert fleet.smoke_runs() == runs
    assert "rolling out" in fleet.phases(A)[2:]


def metric_fleet(**gate: object) -> GateFleet:
    spec = GateSpec(soak_seconds=300, metrics=(XID,), **gate)  # type: ignore[arg-type]
    return GateFleet(stage_specs=stages(canary=spec))


def test_metric_violation_fails_the_stage_with_value_and_bound() -> None:
    fleet = metric_fleet()
    fleet.push(A)
    fleet.run_until(lambda: fleet.phases(A)[-1:] == ["soaking"])
    fleet.analysis[("canary", A)] = AnalysisResult(AnalysisState.VIOLATED, "xid: 3 > max 0")
    fleet.run_pass()
    assert fleet.latest(A, "canary").description == "canary: metric xid: 3 > max 0"  # type: ignore[union-attr]
    assert fleet.state(A, "canary") == FAILURE


def test_query_error_fails_with_prometheus_text() -> None:
    fleet = metric_fleet()
    fleet.push(A)
    fleet.run_until(lambda: fleet.phases(A)[-1:] == ["soaking"])
    error = "xid: bad_data: 1:5: parse error: unexpected end of input"
    fleet.analysis[("canary", A)] = AnalysisResult(AnalysisState.ERROR, error)
    fleet.run_pass()
    assert fleet.latest(A, "canary").description == f"canary: metric {error}"  # type: ignore[union-attr]


def test_no_data_holds_the_soak_end_until_the_timeout() -> None:
    fleet = metric_fleet(timeout_seconds=1200)
    fleet.push(A)
    fleet.analysis[("canary", A)] = AnalysisResult(AnalysisState.NO_DATA, "xid: no data")
    fleet.run(12)  # soak (5m) long over, but no data: pending
    assert fleet.state(A, "canary") == PENDING
    assert fleet.phases(A)[-1] == "soaking"
    fleet.run_until(lambda: fleet.state(A, "canary") == FAILURE, max_passes=30)
    assert fleet.latest(A, "canary").description == "canary: no metric data after 20m: xid: no data"  # type: ignore[union-attr]


def test_no_data_then_data_passes() -> None:
    fleet = metric_fleet()
    fleet.push(A)
    fleet.analysis[("canary", A)] = AnalysisResult(AnalysisState.NO_DATA, "xid: no data")
    fleet.run(10)
    assert fleet.state(A, "canary") == PENDING
    fleet.analysis[("canary", A)] = AnalysisResult(AnalysisState.OK)
    fleet.run_pass()
    assert fleet.state(A, "canary") == SUCCESS


def test_on_no_data_fail() -> None:
    fleet = metric_fleet(on_no_data="fail")
    fleet.push(A)
    fleet.analysis[("canary", A)] = AnalysisResult(AnalysisState.NO_DATA, "xid: no data")
    fleet.run_until(lambda: fleet.state(A, "canary") == FAILURE)
    assert fleet.latest(A, "canary").description == "canary: metric xid: no data"  # type: ignore[union-attr]
    assert fleet.now - fleet.history(A, "canary")[0].created_at >= 300 - PASS  # after the soak


def test_smoke_then_metrics_phase_order() -> None:
    spec = GateSpec(soak_seconds=120, smoke_test=SMOKE, metrics=(XID,))
    fleet = GateFleet(stage_specs=stages(canary=spec))
    fleet.push(A)
    fleet.analysis[("canary", A)] = AnalysisResult(
        AnalysisState.OK, "xid 0 (max 0)", (("xid", 0.0),)
    )
    fleet.run_until(lambda: fleet.smoke_runs() > 0)
    fleet.smoke[("canary", A)] = SmokeResult(SmokeState.PASSED, 2, 2)
    fleet.run_until(lambda: fleet.state(A, "canary") == SUCCESS)
    assert fleet.phases(A) == ["rolling out", "smoke testing", "soaking", SUCCESS]
    done = fleet.latest(A, "canary")
    assert done is not None and done.description.endswith("; metrics xid 0 (max 0)")
    assert Phase.SMOKE_TESTING.value == "smoke testing"
