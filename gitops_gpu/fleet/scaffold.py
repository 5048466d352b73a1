"""Write a fleet repo from plain values: for tests, benchmarks and demos.

``write_repo(root, {"a": {"nodeSelector": {...}}})`` writes fleet.yaml (one stage holding every
pool unless ``stages`` says otherwise), an optional base ClusterPolicy and each pool's files.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gitops_gpu.fleet.models import API_VERSION
from gitops_gpu.fleet.render import render_yaml

BASE_FILE = "base/clusterpolicy.yaml"


def _image(repository: str, image: str, version: str) -> dict[str, str]:
    return {"repository": repository, "image": image, "version": version}


def minimal_base(version: str = "580.126.20") -> dict[str, Any]:
    """The smallest ClusterPolicy the CRD accepts and the operator can run without help from
    its environment: a pinned driver with autoUpgrade, and every enabled operand's image
    (preflight/images.py)."""
    nv, cn, k8s = "nvcr.io/nvidia", "nvcr.io/nvidia/cloud-native", "nvcr.io/nvidia/k8s"
    manager = _image(cn, "k8s-driver-manager", "v0.11.0")
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "operator": {},
            "daemonsets": {},
            "dcgm": {"enabled": False},
            "dcgmExporter": {
                "enabled": True,
                **_image(k8s, "dcgm-exporter", "4.5.3-4.8.2-distroless"),
            },
            "devicePlugin": {"enabled": True, **_image(nv, "k8s-device-plugin", "v0.19.3")},
            "gfd": {"enabled": True, **_image(nv, "k8s-device-plugin", "v0.19.3")},
            "migManager": {"enabled": True, **_image(cn, "k8s-mig-manager", "v0.14.2")},
            "nodeStatusExporter": {"enabled": False},
            "toolkit": {"enabled": True, **_image(k8s, "container-toolkit", "v1.19.1")},
            "validator": _image(nv, "gpu-operator", "v26.3.3"),
            "driver": {
                "enabled": True,
                "repository": nv,
                "image": "driver",
                "version": version,
                "manager": manager,
                "upgradePolicy": {"autoUpgrade": True},
            },
        },
    }


def overlay(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A pool ClusterPolicy file holding only ``spec``."""
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": copy.deepcopy(dict(spec)),
    }


def pool_doc(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    body = {"nodeSelector": {"node.kubernetes.io/pool": name}, **copy.deepcopy(dict(spec))}
    return {"apiVersion": API_VERSION, "kind": "NodePool", "metadata": {"name": name}, "spec": body}


def write_repo(
    root: Path,
    pools: Mapping[str, Mapping[str, Any]],
    *,
    base: Mapping[str, Any] | None = None,
    overlays: Mapping[str, Mapping[str, Any]] | None = None,
    stages: Sequence[Mapping[str, Any]] | None = None,
    clusters: Sequence[Mapping[str, Any]] | None = None,
    name: str = "test-fleet",
) -> Path:
    """Write the repo under ``root``; ``base=None`` uses :func:`minimal_base`."""
    root.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {
        "base": BASE_FILE,
        "stages": list(stages) if stages is not None else [{"name": "all", "pools": sorted(pools)}],
    }
    if clusters is not None:
        spec["clusters"] = list(clusters)
    fleet = {"apiVersion": API_VERSION, "kind": "Fleet", "metadata": {"name": name}, "spec": spec}
    _write(root / "fleet.yaml", fleet)
    _write(root / BASE_FILE, dict(base) if base is not None else minimal_base())
    for pool, pool_spec in pools.items():
        _write(root / "nodepools" / pool / "pool.yaml", pool_doc(pool, pool_spec))
        if overlays and pool in overlays:
            _write(root / "nodepools" / pool / "clusterpolicy.yaml", dict(overlays[pool]))
    return root


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_yaml(data), encoding="utf-8")
