"""kwok's Stages as API objects, so a testbed fault can change how pods behave while it runs.

kwok v0.8 reads Stages either from ``--config`` files or, with ``--enable-crds=Stage``, from
Stage objects in the apiserver (not both). The testbed uses the objects: the default stages
(copied from kwok's source at build time) are created before kwok starts, and the fault
``smoke-fail`` adds one more. A stage with weight 1 wins over the default weight-0 stages that
match the same pod (kwok's lifecycle drops weight-0 candidates when any weight is positive).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu import kube
from gitops_gpu.sync import smoke

from . import crds

API = "kwok.x-k8s.io/v1alpha1"
SMOKE_FAIL_STAGE = "testbed-smoke-fail"
SMOKE_FAIL_MESSAGE = "GPU health check failed: CUDA error 999 (testbed fault smoke-fail)"
# Known to the testbed only: the product never reads kwok's objects.
kube.RESOURCES[(API, "Stage")] = kube.Resource(API, "Stage", "stages", False)

# Ours, not kwok's (which is generated and 600 lines): kwok decodes what it needs.
STAGE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "stages.kwok.x-k8s.io"},
    "spec": {
        "group": "kwok.x-k8s.io",
        "names": {
            "kind": "Stage",
            "listKind": "StageList",
            "plural": "stages",
            "singular": "stage",
        },
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def install(client: kube.Client, stage_dir: Path) -> list[str]:
    """Create the Stage CRD and the default stages from ``stage_dir``; return their names."""
    crds.install_objects(client, [STAGE_CRD])
    yaml = YAML(typ="safe")
    names = []
    for path in sorted(stage_dir.glob("*.yaml")):
        for doc in yaml.load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Stage":
                client.apply(doc, field_manager="gitops-gpu-testbed", force=True)
                names.append(doc["metadata"]["name"])
    return names


def smoke_fail_stage(nodes: list[str]) -> dict[str, Any]:
    """The stage that makes a running smoke-test pod on one of ``nodes`` exit 1."""
    template = (
        "{{ $now := Now }}\n"
        "containerStatuses:\n"
        "{{ range $index, $item := .spec.containers }}\n"
        "- image: {{ $item.image | Quote }}\n"
        "  name: {{ $item.name | Quote }}\n"
        "  ready: false\n"
        "  restartCount: 0\n"
        "  started: false\n"
        "  state:\n"
        "    terminated:\n"
        "      exitCode: 1\n"
        "      finishedAt: {{ $now | Quote }}\n"
        "      reason: Error\n"
        f"      message: {SMOKE_FAIL_MESSAGE!r}\n"
        "      startedAt: {{ $now | Quote }}\n"
        "{{ end }}\n"
        "phase: Failed\n"
    )
    return {
        "apiVersion": API,
        "kind": "Stage",
        "metadata": {"name": SMOKE_FAIL_STAGE},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "weight": 1,
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {
                        "key": f'.metadata.labels["{smoke.SMOKE_LABEL}"]',
                        "operator": "In",
                        "values": ["true"],
                    },
                    {"key": ".spec.nodeName", "operator": "In", "values": sorted(nodes)},
                ]
            },
            "next": {"statusTemplate": template},
        },
    }


def set_smoke_failing(client: kube.Client, nodes: list[str]) -> None:
    """Make smoke-test pods fail on exactly ``nodes`` (none: remove the stage)."""
    if nodes:
        client.apply(smoke_fail_stage(nodes), field_manager="gitops-gpu-testbed", force=True)
    else:
        client.delete(API, "Stage", SMOKE_FAIL_STAGE)


DRIVER_CRASH_PREFIX = "testbed-driver-crash-"
DRIVER_CONTAINER = "nvidia-driver-ctr"
# The driver container's image, as kwok's query language reads it.
_DRIVER_IMAGE = f'.spec.containers.[] | select( .name == "{DRIVER_CONTAINER}" ) | .image'


def driver_crash_stage(node: str, running_image: str, restarts: int) -> dict[str, Any]:
    """The stage that starts a driver pod on ``node`` crash-looping instead of Ready, unless it
    runs ``running_image`` (the driver the host already loads).

    It wins over kwok's pod-ready for the same Pending pod, so the pod is never Ready for a
    moment: the upgrade controller, which may reconcile at any time, cannot validate a driver
    that fails (a crash written after Ready raced it)."""
    template = (
        "{{ $now := Now }}\n"
        "conditions:\n"
        "- {lastTransitionTime: {{ $now | Quote }}, status: 'True', type: Initialized}\n"
        "- {lastTransitionTime: {{ $now | Quote }}, status: 'False', type: Ready,"
        " reason: ContainersNotReady}\n"
        "- {lastTransitionTime: {{ $now | Quote }}, status: 'False', type: ContainersReady,"
        " reason: ContainersNotReady}\n"
        "containerStatuses:\n"
        "{{ range .spec.containers }}\n"
        "- image: {{ .image | Quote }}\n"
        "  imageID: ''\n"
        "  name: {{ .name | Quote }}\n"
        "  ready: false\n"
        "  started: false\n"
        f"  restartCount: {restarts}\n"
        "  state:\n"
        "    waiting:\n"
        "      reason: CrashLoopBackOff\n"
        "      message: 'simulated: the driver module fails to load on this host'\n"
        "  lastState:\n"
        "    terminated: {exitCode: 1, reason: Error, startedAt: {{ $now | Quote }},"
        " finishedAt: {{ $now | Quote }}}\n"
        "{{ end }}\n"
        "initContainerStatuses:\n"
        "{{ range .spec.initContainers }}\n"
        "- image: {{ .image | Quote }}\n"
        "  name: {{ .name | Quote }}\n"
        "  ready: true\n"
        "  restartCount: 0\n"
        "  state:\n"
        "    terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }},"
        " finishedAt: {{ $now | Quote }}}\n"
        "{{ end }}\n"
        "phase: Running\n"
        "startTime: {{ $now | Quote }}\n"
    )
    return {
        "apiVersion": API,
        "kind": "Stage",
        "metadata": {"name": DRIVER_CRASH_PREFIX + node},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "weight": 1,
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                    {"key": ".spec.nodeName", "operator": "In", "values": [node]},
                    {
                        "key": '.metadata.labels["app.kubernetes.io/component"]',
                        "operator": "In",
                        "values": ["nvidia-driver"],
                    },
                    {"key": _DRIVER_IMAGE, "operator": "NotIn", "values": [running_image]},
                ]
            },
            "next": {"statusTemplate": template},
        },
    }


def driver_crash_stages(client: kube.Client) -> set[str]:
    """The nodes that have a driver-crash stage now."""
    return {
        s["metadata"]["name"][len(DRIVER_CRASH_PREFIX) :]
        for s in client.list(API, "Stage")["items"]
        if s["metadata"]["name"].startswith(DRIVER_CRASH_PREFIX)
    }
