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


def minimal_base(version: str = "580.126.20") -> dict[str, Any]:
    """The smallest ClusterPolicy the CRD accepts, with a pinned driver and autoUpgrade."""
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "operator": {},
            "daemonsets": {},
            "dcgm": {"enabled": False},
            "dcgmExporter": {"enabled": True},
            "devicePlugin": {"enabled": True},
            "gfd": {"enabled": True},
            "nodeStatusExporter": {"enabled": False},
            "toolkit": {"enabled": True},
            "driver": {"enabled": True, "version": version, "upgradePolicy": {"autoUpgrade": True}},
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
