"""Where preflight's GPU Operator CRD schemas come from: ``--crds DIR``, else the cluster's own
CRDs (what the installed operator really accepts), else ``$GITOPS_GPU_CRDS``. Nothing defaults
into a source checkout, so an installed copy behaves the same as a developer's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_gpu.errors import GitopsGpuError

if TYPE_CHECKING:
    from gitops_gpu import kube

OPERATOR_CRDS = ("clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com")
ENV = "GITOPS_GPU_CRDS"
FIX = (
    "pass --crds DIR (the GPU Operator's deployments/gpu-operator/crds or config/crd/bases), "
    f"or --kubeconfig to read them from the cluster, or set {ENV}"
)


def from_env() -> Path:
    """``$GITOPS_GPU_CRDS``, or an error that says every way to name the CRDs."""
    env = os.environ.get(ENV)
    if not env:
        raise GitopsGpuError("no GPU Operator CRDs to check the fleet against", fix=FIX)
    return Path(env)


def fetch(client: kube.Client, out: Path) -> bool:
    """Write the cluster's ClusterPolicy and NVIDIADriver CRDs into ``out``; whether any
    changed since the last fetch."""
    out.mkdir(parents=True, exist_ok=True)
    changed = False
    for name in OPERATOR_CRDS:
        crd = client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        if crd is None:
            raise GitopsGpuError(
                f"the cluster has no CRD {name}",
                fix="install the GPU Operator (its CRDs) or pass --crds DIR",
            )
        text = json.dumps({k: crd[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        path = out / f"{name}.yaml"  # JSON is YAML
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed = True
    return changed


def resolve(
    crds: Path | None, kubeconfig: str | None, cache: Path, context: str | None = None
) -> Path:
    """The CRD directory for a CLI run: ``--crds``, else the cluster's (into ``cache``), else
    ``$GITOPS_GPU_CRDS``."""
    if crds is not None:
        return crds
    if kubeconfig:
        from gitops_gpu import kube  # noqa: PLC0415 - urllib3 only with --kubeconfig

        fetch(kube.Client.from_kubeconfig(kubeconfig, context=context), cache)
        return cache
    return from_env()
