"""gate.smokeTest I/O: one Job per selected node, read back into a SmokeResult, cleaned up.

A stage's smoke test for a commit is the set of Jobs labelled with the stage and the commit in
one namespace (``--smoke-namespace``, the controller's own by default). Each Job runs one pod
pinned to its node the way DaemonSets are (node affinity on ``metadata.name``, tolerating
``nvidia.com/gpu`` taints), so the scheduler checks the node really offers the requested
``nvidia.com/gpu``: a node whose device plugin lost its GPUs leaves the pod unschedulable, and
the test fails at its timeout with the scheduler's reason. No retries (``backoffLimit: 0``); the
gate's timeout is ``activeDeadlineSeconds``.

The controller keeps no memory of them: ``results`` reads the Jobs each pass, the state machine
decides (rollout/checks.py), and Jobs of any (stage, commit) the machine no longer asks for are
deleted at the end of the pass, with an Event per failed node. Calls: list/create/delete Jobs and
list pods in that namespace, and get pods/log there for a failed pod's last lines.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet.compiled import SmokeTestSpec, StageSpec
from gitops_gpu.rollout.checks import SmokeResult, SmokeState

log = logging.getLogger(__name__)

SMOKE_LABEL = f"{names.GROUP}/smoke-test"
STAGE_LABEL = f"{names.GROUP}/smoke-stage"
COMMIT_LABEL = f"{names.GROUP}/smoke-commit"
NODE_ANNOTATION = f"{names.GROUP}/smoke-node"
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
LOG_LINES = 5
# A Job the job controller has not finished this long after its deadline counts as timed out
# (a controller-manager that is down must not hold a stage forever).
DEADLINE_GRACE = 60.0

Key = tuple[str, str]  # (stage, commit)


def job_name(stage: str, commit: str, node: str) -> str:
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"gg-smoke-{stage[:30]}-{commit[:7]}-{digest}"


def selected_nodes(spec: SmokeTestSpec, nodes: Iterable[str]) -> list[str]:
    """Every node of the stage, or the first N by name."""
    ordered = sorted(set(nodes))
    return ordered if spec.nodes is None else ordered[: spec.nodes]


def gpu_resource(node: Mapping[str, Any] | None) -> str:
    """The GPU resource to request on ``node``: nvidia.com/gpu, or the one its device plugin
    advertises instead (time-slicing renamed to nvidia.com/gpu.shared, MIG devices under
    mig.strategy mixed). A node advertising none gets nvidia.com/gpu: its pod stays
    unschedulable and the check fails, as it should."""
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}

    def has(resource: str) -> bool:
        try:
            return int(str(allocatable.get(resource, "0"))) > 0
        except ValueError:
            return False

    if has(GPU_RESOURCE):
        return GPU_RESOURCE
    others = sorted(
        r for r in allocatable if (r == SHARED_RESOURCE or r.startswith(MIG_PREFIX)) and has(r)
    )
    return others[0] if others else GPU_RESOURCE


def job_manifest(
    spec: SmokeTestSpec,
    stage: str,
    commit: str,
    node: str,
    namespace: str,
    resource: str = GPU_RESOURCE,
) -> dict[str, Any]:
    labels = {SMOKE_LABEL: "true", STAGE_LABEL: stage, COMMIT_LABEL: commit}
    meta = {
        "name": job_name(stage, commit, node),
        "namespace": namespace,
        "labels": labels,
        "annotations": {NODE_ANNOTATION: node},
    }
    container = {
        "name": "smoke",
        "image": spec.image,
        "command": list(spec.command),
        "resources": {"limits": {resource: str(spec.gpus)}},
        # Pod Security "restricted" (the chart's namespace): nothing here needs more.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65534,
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, int(spec.timeout_seconds)),
            "template": {
                "metadata": {"labels": labels, "annotations": {NODE_ANNOTATION: node}},
                "spec": {
                    "restartPolicy": "Never",
                    # Pinned the way DaemonSets are: the scheduler still checks that the node
                    # advertises the GPUs, so a node whose device plugin lost them fails here.
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchFields": [
                                            {
                                                "key": "metadata.name",
                                                "operator": "In",
                                                "values": [node],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists"}],
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                },
            },
        },
    }


@dataclass(frozen=True)
class NodeFailure:
    stage: str
    commit: str
    node: str
    message: str  # "Error (exit code 1): <last log lines>"


def _condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _created(obj: Mapping[str, Any]) -> float | None:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return None
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


class SmokeRunner:
    def __init__(self, client: kube.Client, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self._jobs: list[dict[str, Any]] = []
        self._failures: dict[Key, list[NodeFailure]] = {}
        # Why a Job's pod is still pending (unschedulable), remembered for the failure message:
        # the pod is deleted when the deadline fails the Job. Only wording depends on it.
        self._waiting: dict[str, str] = {}

    # -- read -----------------------------------------------------------------------------------
    def _list(self, api_version: str, kind: str) -> list[dict[str, Any]]:
        found = self.client.list(
            api_version, kind, namespace=self.namespace, label_selector=f"{SMOKE_LABEL}=true"
        )
        return [
            o
            for o in found.get("items") or []
            if not (o.get("metadata") or {}).get("deletionTimestamp")
        ]

    def results(
        self,
        stages: Iterable[StageSpec],
        stage_nodes: Mapping[str, list[str]],
        now: float,
    ) -> dict[Key, SmokeResult]:
        """Every (stage, commit) with smoke Jobs, judged over the stage's selected nodes."""
        self._jobs = self._list("batch/v1", "Job")
        self._failures = {}
        specs = {s.name: s.gate.smoke_test for s in stages if s.gate.smoke_test is not None}
        groups: dict[Key, dict[str, dict[str, Any]]] = {}
        for job in self._jobs:
            meta = job["metadata"]
            labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
            key = (labels.get(STAGE_LABEL, ""), labels.get(COMMIT_LABEL, ""))
            groups.setdefault(key, {})[notes.get(NODE_ANNOTATION, "")] = job
        pods: dict[str, dict[str, Any]] | None = None
        if any(not _finished(j) for j in self._jobs):
            pods = self._pods()
            self._remember_waiting(pods)
        out: dict[Key, SmokeResult] = {}
        for key, by_node in groups.items():
            spec = specs.get(key[0])
            if spec is None:
                continue  # the stage has no smoke test any more: cleaned up after the pass
            want = selected_nodes(spec, stage_nodes.get(key[0], []))
            passed, failures = 0, []
            for node in want:
                found = by_node.get(node)
                if found is None:
                    continue  # not started yet: RunSmokeTest creates it
                job = found
                if _condition(job, "Complete") or (job.get("status") or {}).get("succeeded"):
                    passed += 1
                    continue
                failed = (
                    _condition(job, "Failed")
                    or _condition(job, "FailureTarget")
                    or (job.get("status") or {}).get("failed")
                )
                created = _created(job)
                late = created is not None and now - created > spec.timeout_seconds + DEADLINE_GRACE
                if not failed and not late:
                    continue
                if pods is None:
                    pods = self._pods()
                message = self._explain(job, pods.get(job["metadata"]["name"]), spec, late)
                failures.append(NodeFailure(key[0], key[1], node, message))
            self._failures[key] = failures
            if failures:
                state = SmokeState.FAILED
            elif passed == len(want):
                state = SmokeState.PASSED
            else:
                state = SmokeState.RUNNING
            waiting = tuple(
                f"{node}: pod {self._waiting[name]}"
                for node in want
                if node in by_node
                and (name := str(by_node[node]["metadata"]["name"])) in self._waiting
                and not _finished(by_node[node])
            )
            out[key] = SmokeResult(
                state,
                len(want),
                passed,
                tuple(f"{f.node}: {f.message}" for f in failures),
                waiting,
            )
        return out

    def _pods(self) -> dict[str, dict[str, Any]]:
        """Smoke pods by the name of their Job."""
        return {
            ((p.get("metadata") or {}).get("labels") or {}).get("job-name", ""): p
            for p in self._list("v1", "Pod")
        }

    def _remember_waiting(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        for job, pod in pods.items():
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    self._waiting[job] = f"{cond.get('reason')}: {cond.get('message')}"
        live = {j["metadata"]["name"] for j in self._jobs}
        for job in [j for j in self._waiting if j not in live]:
            del self._waiting[job]

    def _explain(
        self,
        job: Mapping[str, Any],
        pod: Mapping[str, Any] | None,
        spec: SmokeTestSpec,
        late: bool,
    ) -> str:
        """The pod's reason (exit code) and the last lines of its log, on one line."""
        # Since Kubernetes 1.31 the job controller says FailureTarget first, Failed later.
        cond = _condition(job, "Failed") or _condition(job, "FailureTarget") or {}
        reason = str(cond.get("reason") or "")
        if reason == "DeadlineExceeded" or (late and not reason):
            reason = f"timed out after {int(spec.timeout_seconds)}s"
            waiting = self._waiting.get(str(job["metadata"]["name"]))
            if waiting:
                reason += f", pod {waiting}"
        logs = ""
        if pod is not None:
            status = pod.get("status") or {}
            for cs in status.get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated") or {}
                if term:
                    reason = f"{term.get('reason') or 'Error'} (exit code {term.get('exitCode')})"
                    if term.get("message"):
                        logs = str(term["message"])
            if not reason and status.get("reason"):
                reason = str(status["reason"])
            if not logs:
                try:
                    name = pod["metadata"]["name"]
                    logs = self.client.pod_log(name, self.namespace, tail_lines=LOG_LINES)
                except KubeError as exc:
                    log.debug("no log for smoke pod: %s", exc)
        lines = [line.strip() for line in logs.splitlines() if line.strip()][-LOG_LINES:]
        text = reason or "failed"
        return f"{text}: {' | '.join(lines)}" if lines else text

    # -- write ----------------------------------------------------------------------------------
    def run(
        self,
        stage: StageSpec,
        commit: str,
        nodes: Iterable[str],
        node: Callable[[str], Mapping[str, Any] | None] | None = None,
    ) -> int:
        """Create the Jobs still missing for ``stage`` at ``commit``; returns how many. Each
        requests the GPU resource its node (looked up by ``node``) advertises
        (:func:`gpu_resource`)."""
        spec = stage.gate.smoke_test
        if spec is None:
            return 0
        have = {
            (j["metadata"].get("annotations") or {}).get(NODE_ANNOTATION)
            for j in self._jobs
            if (j["metadata"].get("labels") or {}).get(STAGE_LABEL) == stage.name
            and (j["metadata"].get("labels") or {}).get(COMMIT_LABEL) == commit
        }
        created = 0
        for name in selected_nodes(spec, nodes):
            if name in have:
                continue
            resource = gpu_resource(node(name) if node else None)
            job = job_manifest(spec, stage.name, commit, name, self.namespace, resource)
            try:
                self.client.create(job)
            except KubeError as exc:
                if "already exists" not in str(exc).lower():
                    raise
                continue  # an older Job of that name is still being deleted: next pass
            created += 1
            log.info("smoke test for stage %s at %s started on %s", stage.name, commit[:12], name)
        return created

    def finish(self, keep: set[Key]) -> list[NodeFailure]:
        """Delete the smoke Jobs (and their pods) of every (stage, commit) not in ``keep``;
        returns the failures found in them (for Events)."""
        failures: list[NodeFailure] = []
        done: set[Key] = set()
        for job in self._jobs:
            labels = job["metadata"].get("labels") or {}
            key = (labels.get(STAGE_LABEL, ""), labels.get(COMMIT_LABEL, ""))
            if key in keep:
                continue
            path = kube.resource("batch/v1", "Job").path(job["metadata"]["name"], self.namespace)
            with contextlib.suppress(kube.NotFoundError):
                self.client.request("DELETE", path, query={"propagationPolicy": "Background"})
            if key not in done:
                done.add(key)
                failures.extend(self._failures.get(key, []))
        self._jobs = [j for j in self._jobs if _key(j) in keep]
        return failures


def _finished(job: Mapping[str, Any]) -> bool:
    return bool(
        _condition(job, "Complete") or _condition(job, "Failed") or _condition(job, "FailureTarget")
    )


def _key(job: Mapping[str, Any]) -> Key:
    labels = (job.get("metadata") or {}).get("labels") or {}
    return (labels.get(STAGE_LABEL, ""), labels.get(COMMIT_LABEL, ""))
