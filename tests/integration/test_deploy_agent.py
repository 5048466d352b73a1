"""The node agent's identity: a token bound to its pod on a (KWOK) node, RBAC that allows only
NodeGPUReport writes, and a ValidatingAdmissionPolicy that narrows those to its own node's.
The pod is the DaemonSet's own template, so Pod Security "restricted" is enforced on it too."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
from test_deploy_grants import (
    NS,
    Obj,
    client_for,
    eventually,
    installed,
    refused,
    rendered,
    report_obj,
    token_for,
)

from gitops_gpu import kube, names
from gitops_gpu.agent import publish
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration
__all__ = ["installed"]  # a fixture, used by name


@pytest.fixture
def agent_pod(installed: Testbed, clean_cluster: Testbed) -> Iterator[Obj]:
    """The DaemonSet's own pod template on KWOK node agent-a (kwok runs it)."""
    admin = installed.client
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    admin.apply(runtime_class, field_manager="gitops-gpu-test")
    for name in ("agent-a", "agent-b"):
        admin.create(nodes.node_manifest(name, {"test": "deploy-agent"}, "NVIDIA-H100-80GB-HBM3"))
    nodes.wait_ready(admin, ["agent-a", "agent-b"])
    ds = next(d for d in rendered() if d["kind"] == "DaemonSet")
    template = ds["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "agent-test",
            "namespace": NS,
            "labels": template["metadata"]["labels"],
        },
        "spec": {**template["spec"], "nodeName": "agent-a"},
    }
    _force_delete(admin, "agent-test")
    # Created in the chart's namespace: Pod Security "restricted" is enforced on it for real.
    created = admin.create(pod)
    yield created
    _force_delete(admin, "agent-test")


def _force_delete(admin: kube.Client, pod: str) -> None:
    # No kubelet confirms a graceful delete on a node that is gone: delete at once.
    path = kube.resource("v1", "Pod").path(pod, NS)
    try:
        admin.request("DELETE", path, body={"gracePeriodSeconds": 0})
    except kube.NotFoundError:
        return
    eventually(lambda: _absent(admin, pod), 30)


def _absent(admin: kube.Client, pod: str) -> None:
    assert admin.get("v1", "Pod", pod, NS) is None


def test_the_agent_writes_only_its_own_nodes_report(installed: Testbed, agent_pod: Obj) -> None:
    admin = installed.client
    eventually(lambda: _phase_is(admin, "Running"), 30)
    token = token_for(admin, "gitops-gpu-agent", agent_pod)
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["node"]["name"] == "agent-a"
    agent = client_for(installed, token)
    status = {"driverVersion": "580.126.20", "gpuCount": 0, "gpus": []}
    # The agent's own publishing code, with its own identity.
    eventually(lambda: _publishes(agent, "agent-a", status))
    report = admin.get(*names.NODE_GPU_REPORT_API, "agent-a")
    assert report is not None and report["status"]["driverVersion"] == "580.126.20"
    denied = refused(lambda: _publishes(agent, "agent-b", status))
    assert "gitops-gpu-agent-own-node" in denied and 'not "agent-b"' in denied
    assert admin.get(*names.NODE_GPU_REPORT_API, "agent-b") is None
    refused(lambda: agent.delete(*names.NODE_GPU_REPORT_API, "agent-a"))
    refused(lambda: agent.patch("v1", "Node", "agent-a", {"metadata": {"labels": {"x": "y"}}}))
    refused(lambda: agent.list("v1", "Secret", namespace=NS))
    refused(lambda: agent.list(*names.NODE_GPU_REPORT_API))
    # A token of the same account but bound to no pod carries no node: it may write nothing.
    unbound = client_for(installed, token_for(admin, "gitops-gpu-agent"))
    assert 'on node ""' in refused(lambda: _publishes(unbound, "agent-a", status))
    # And the controller may read reports but never write them.
    ctl = client_for(installed, token_for(admin, "gitops-gpu-controller"))
    refused(lambda: ctl.apply(report_obj("agent-b"), field_manager="x"))


def _phase_is(admin: kube.Client, phase: str) -> None:
    pod = admin.get("v1", "Pod", "agent-test", NS)
    assert pod is not None and (pod.get("status") or {}).get("phase") == phase


def _publishes(client: kube.Client, node: str, status: Obj) -> None:
    assert publish.KubePublisher(client, node, heartbeat_seconds=60).publish(status)
