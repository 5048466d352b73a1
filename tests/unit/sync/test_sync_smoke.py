"""gate.smokeTest Jobs: manifests, results read back (pass, fail with reason and log, timeout),
cleanup, and the controller pass that drives them against a recording fake apiserver."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gitops_gpu.errors import KubeError
from gitops_gpu.fleet.compiled import GateSpec, SmokeTestSpec, StageSpec
from gitops_gpu.rollout.checks import SmokeState
from gitops_gpu.sync import smoke

SPEC = SmokeTestSpec("nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04", ("nvidia-smi",), 2, 120, None)
STAGE = StageSpec("canary", ("canary",), GateSpec(smoke_test=SPEC))
SHA = "a" * 40
NOW = 1_750_000_000.0
STAMP = "2025-06-15T15:06:40Z"  # NOW, as the apiserver writes it


class FakeClient:
    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, str] = {}
        self.calls: list[str] = []

    def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str = ""
    ) -> dict[str, Any]:
        self.calls.append(f"list {kind} {namespace} {label_selector}")
        store = self.jobs if kind == "Job" else self.pods
        return {"items": [copy.deepcopy(o) for o in store.values()]}

    def create(self, obj: dict[str, Any], *, field_manager: str | None = None) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.jobs:
            raise KubeError(f'POST jobs: jobs.batch "{name}" already exists')
        self.calls.append(f"create {name}")
        job = copy.deepcopy(obj)
        job["metadata"]["creationTimestamp"] = STAMP
        self.jobs[name] = job
        return job

    def request(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append(f"{method} {path} {kw.get('query')}")
        self.jobs.pop(path.rsplit("/", 1)[1], None)

    def pod_log(self, name: str, namespace: str, *, tail_lines: int = 5) -> str:
        self.calls.append(f"log {name}")
        if name not in self.logs:
            raise KubeError("no log")
        return self.logs[name]

    def finish(self, node: str, *, ok: bool, terminated: dict[str, Any] | None = None) -> None:
        name = smoke.job_name("canary", SHA, node)
        cond = {"type": "Complete" if ok else "Failed", "status": "True"}
        if not ok:
            cond["reason"] = "BackoffLimitExceeded"
        self.jobs[name]["status"] = {"conditions": [cond], "succeeded" if ok else "failed": 1}
        pod = f"{name}-x1"
        self.pods[pod] = {
            "metadata": {"name": pod, "labels": {"job-name": name}},
            "status": {
                "phase": "Succeeded" if ok else "Failed",
                "containerStatuses": [{"state": {"terminated": terminated or {}}}],
            },
        }


def test_job_manifest_pins_the_node_and_requests_gpus() -> None:
    job = smoke.job_manifest(SPEC, "canary", SHA, "gpu-node-1", "gitops-gpu")
    meta, spec = job["metadata"], job["spec"]
    assert meta["labels"] == {
        smoke.SMOKE_LABEL: "true",
        smoke.STAGE_LABEL: "canary",
        smoke.COMMIT_LABEL: SHA,
    }
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 120
    pod = spec["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = terms["nodeSelectorTerms"]
    assert term == {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]
    }
    assert "nodeName" not in pod and pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert container["command"] == ["nvidia-smi"]
    assert len(meta["name"]) <= 63


def test_selected_nodes() -> None:
    two = SmokeTestSpec("r.io/a:1", ("x",), nodes=2)
    assert smoke.selected_nodes(two, ["c", "a", "b"]) == ["a", "b"]
    assert smoke.selected_nodes(SPEC, ["c", "a", "b"]) == ["a", "b", "c"]


def test_run_results_and_cleanup() -> None:
    client = FakeClient()
    runner = smoke.SmokeRunner(client, "gitops-gpu")  # type: ignore[arg-type]
    nodes = {"canary": ["n1", "n2"]}
    assert runner.results([STAGE], nodes, NOW) == {}
    assert runner.run(STAGE, SHA, nodes["canary"]) == 2
    runner.results([STAGE], nodes, NOW)
    assert runner.run(STAGE, SHA, nodes["canary"]) == 0  # both exist: nothing rerun
    result = runner.results([STAGE], nodes, NOW)[("canary", SHA)]
    assert (result.state, result.nodes_total, result.nodes_passed) == (SmokeState.RUNNING, 2, 0)
    client.finish("n1", ok=True)
    client.finish("n2", ok=True)
    result = runner.results([STAGE], nodes, NOW)[("canary", SHA)]
    assert (result.state, result.nodes_passed) == (SmokeState.PASSED, 2)
    assert runner.finish({("canary", SHA)}) == []
    assert len(client.jobs) == 2  # still asked for: kept
    assert runner.finish(set()) == []
    assert client.jobs == {}
    assert any("propagationPolicy" in c and "Background" in c for c in client.calls)


def test_failed_pod_names_reason_and_last_log_lines() -> None:
    client = FakeClient()
    runner = smoke.SmokeRunner(client, "gitops-gpu")  # type: ignore[arg-type]
    nodes = {"canary": ["n1", "n2"]}
    runner.results([STAGE], nodes, NOW)
    runner.run(STAGE, SHA, nodes["canary"])
    client.finish("n1", ok=True)
    client.finish("n2", ok=False, terminated={"reason": "Error", "exitCode": 9})
    pod = smoke.job_name("canary", SHA, "n2") + "-x1"
    client.logs[pod] = (
        "line 1\nline 2\nline 3\nline 4\nline 5\nFailed to initialize NVML: Unknown Error\n"
    )
    result = runner.results([STAGE], nodes, NOW)[("canary", SHA)]
    assert result.state is SmokeState.FAILED
    assert result.failures == (
        "n2: Error (exit code 9): line 2 | line 3 | line 4 | line 5 | "
        "Failed to initialize NVML: Unknown Error",
    )
    (failure,) = runner.finish(set())
    assert (failure.node, failure.stage, failure.commit) == ("n2", "canary", SHA)


def test_job_not_finished_past_its_deadline_times_out() -> None:
    client = FakeClient()
    runner = smoke.SmokeRunner(client, "gitops-gpu")  # type: ignore[arg-type]
    nodes = {"canary": ["n1"]}
    runner.results([STAGE], nodes, NOW)
    runner.run(STAGE, SHA, nodes["canary"])
    assert runner.results([STAGE], nodes, NOW + 100)[("canary", SHA)].state is SmokeState.RUNNING
    late = runner.results([STAGE], nodes, NOW + 120 + smoke.DEADLINE_GRACE + 1)[("canary", SHA)]
    assert late.state is SmokeState.FAILED
    assert late.failures == ("n1: timed out after 120s",)


def test_create_error_other_than_exists_raises() -> None:
    client = FakeClient()

    def refuse(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        raise KubeError('jobs.batch is forbidden: User "x" cannot create')

    client.create = refuse  # type: ignore[method-assign]
    runner = smoke.SmokeRunner(client, "gitops-gpu")  # type: ignore[arg-type]
    with pytest.raises(KubeError, match="forbidden"):
        runner.run(STAGE, SHA, ["n1"])


def test_unschedulable_pod_then_deadline_names_the_scheduler_reason() -> None:
    client = FakeClient()
    runner = smoke.SmokeRunner(client, "gitops-gpu")  # type: ignore[arg-type]
    nodes = {"canary": ["n1"]}
    runner.results([STAGE], nodes, NOW)
    runner.run(STAGE, SHA, nodes["canary"])
    name = smoke.job_name("canary", SHA, "n1")
    message = "0/4 nodes are available: 1 Insufficient nvidia.com/gpu."
    client.pods["p"] = {
        "metadata": {"name": "p", "labels": {"job-name": name}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }
    running = runner.results([STAGE], nodes, NOW + 5)[("canary", SHA)]
    assert running.state is SmokeState.RUNNING
    assert running.waiting == (f"n1: pod Unschedulable: {message}",)  # said before the deadline
    del client.pods["p"]  # the deadline deleted it
    client.jobs[name]["status"] = {
        "failed": 1,
        "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}],
    }
    result = runner.results([STAGE], nodes, NOW + 125)[("canary", SHA)]
    assert result.failures == (f"n1: timed out after 120s, pod Unschedulable: {message}",)


def _advertising(**allocatable: str) -> dict[str, Any]:
    return {"status": {"allocatable": {"cpu": "96", **allocatable}}}


def test_the_pod_requests_the_gpu_resource_its_node_advertises() -> None:
    assert smoke.gpu_resource(_advertising(**{"nvidia.com/gpu": "8"})) == "nvidia.com/gpu"
    # time-slicing renamed, MIG devices under mig.strategy mixed
    renamed = _advertising(**{"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "16"})
    assert smoke.gpu_resource(renamed) == "nvidia.com/gpu.shared"
    mixed = _advertising(
        **{"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "8", "nvidia.com/mig-1g.10gb": "16"}
    )
    assert smoke.gpu_resource(mixed) == "nvidia.com/mig-1g.10gb"
    # a node that advertises nothing gets nvidia.com/gpu: its pod stays unschedulable
    assert smoke.gpu_resource(_advertising(**{"nvidia.com/mig-1g.10gb": "0"})) == "nvidia.com/gpu"
    assert smoke.gpu_resource(None) == "nvidia.com/gpu"


def test_run_writes_each_nodes_resource_into_its_job() -> None:
    client = FakeClient()
    runner = smoke.SmokeRunner(client, "gitops-gpu")  # type: ignore[arg-type]
    objects = {"n1": _advertising(**{"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "16"})}
    assert runner.run(STAGE, SHA, ["n1", "n2"], objects.get) == 2
    limits = {
        job["metadata"]["annotations"][smoke.NODE_ANNOTATION]: job["spec"]["template"]["spec"][
            "containers"
        ][0]["resources"]["limits"]
        for job in client.jobs.values()
    }
    gpus = str(SPEC.gpus)
    assert limits == {"n1": {"nvidia.com/mig-1g.10gb": gpus}, "n2": {"nvidia.com/gpu": gpus}}
