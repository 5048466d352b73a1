"""The environment a Helm install gives the GPU Operator, for the testbed's operator process.

The operator takes an operand's image from the ClusterPolicy, else from its own environment
(``VALIDATOR_IMAGE``, ``DRIVER_MANAGER_IMAGE``, ...). A Helm install sets those two from the
chart's values (templates/operator.yaml), so a base ClusterPolicy taken from the upstream sample
works in a real cluster and must work here too. The chart in the operator's source tarball is
rendered with the testbed's pinned Helm (``helm template``), and the literal ``env`` values of the
operator container are kept, cached per source next to the operator build.

The testbed also writes that Deployment into the operator's namespace, scaled to 0 (the operator
runs as a local process): what `gitops-gpu check --kubeconfig` reads to learn the running
operator's environment, as it would from a Helm-installed cluster.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu.errors import TestbedError
from gitops_gpu_dev.testbed import build, helm, operator_build

CHART = "deployments/gpu-operator"
DEPLOYMENT = "gpu-operator"  # the chart's Deployment and container name
RELEASE = "gpu-operator"


def _chart_dir(src: Path, into: Path) -> Path:
    if src.is_dir():
        return src / CHART
    with tarfile.open(src) as tar:
        members = [m for m in tar.getmembers() if f"/{CHART}/" in f"/{m.name}"]
        if not members:
            raise TestbedError(f"{src} holds no {CHART}", fix="use the operator's release tarball")
        tar.extractall(into, members=members, filter="data")
    return next(into.rglob(f"{CHART}/Chart.yaml")).parent


def render_deployment(src: Path, namespace: str) -> dict[str, Any]:
    """The operator Deployment the chart renders with its default values."""
    helm_bin = helm.ensure_helm()
    with tempfile.TemporaryDirectory(prefix="gitops-gpu-chart-") as tmp:
        chart = _chart_dir(src, Path(tmp))
        out = subprocess.run(
            [
                str(helm_bin),
                "template",
                RELEASE,
                str(chart),
                "--namespace",
                namespace,
                "--show-only",
                "templates/operator.yaml",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if out.returncode != 0:
        raise TestbedError(
            f"helm template of the GPU Operator chart failed: {out.stderr.strip()}",
            fix=f"check {src} holds {CHART} with its charts/ dependencies",
        )
    docs = [d for d in YAML(typ="safe").load_all(out.stdout) if d]
    dep = next((d for d in docs if d.get("kind") == "Deployment"), None)
    if dep is None:
        raise TestbedError("the chart's templates/operator.yaml renders no Deployment", fix="")
    return dict(dep)


def _cache(src: Path) -> Path:
    key = operator_build._cache_key(src)
    return build.cache_dir() / "bin" / f"gpu-operator-{key}-helm-deployment.json"


def helm_deployment(namespace: str) -> dict[str, Any]:
    """The rendered Deployment, cached per operator source."""
    src = operator_build.source()
    path = _cache(src)
    if path.exists():
        cached: dict[str, Any] = json.loads(path.read_text())
        return cached
    dep = render_deployment(src, namespace)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dep))
    return dep


def container_env(dep: dict[str, Any]) -> dict[str, str]:
    """The operator container's literal env values (``valueFrom`` entries are the pod's own)."""
    for ctr in dep["spec"]["template"]["spec"]["containers"]:
        if ctr.get("name") == DEPLOYMENT:
            return {str(e["name"]): str(e["value"]) for e in ctr.get("env") or [] if "value" in e}
    raise TestbedError("the chart's Deployment has no gpu-operator container", fix="")


def as_installed(dep: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The Deployment as the testbed writes it: the chart's, scaled to 0."""
    spec = dict(dep["spec"])
    spec["replicas"] = 0
    meta = {
        "name": DEPLOYMENT,
        "namespace": namespace,
        "labels": dict(dep["metadata"].get("labels") or {}),
        "annotations": {"testbed.gitops-gpu.io/note": "the operator runs as a testbed process"},
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}
