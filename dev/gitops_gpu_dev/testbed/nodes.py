"""Fake GPU nodes for the testbed: KWOK-managed Nodes with a pool's selector and GPU labels."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu import kube
from gitops_gpu.errors import TestbedError
from gitops_gpu.fleet.models import DEFAULT_CLUSTER
from gitops_gpu.sync.live import node_ready
from gitops_gpu_dev.testbed.gpus import DEFAULT_PRODUCT, NFD_LABELS, PRODUCTS, gfd_labels

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class PoolShape:
    name: str
    node_selector: Mapping[str, str]
    product: str


def read_pool_shapes(fleet: Path, cluster: str | None = None) -> list[PoolShape]:
    """Read `nodepools/<pool>/pool.yaml` (selector and declared GPU product) of a fleet repo;
    with ``cluster``, only the pools of that cluster (a testbed standing for one cluster)."""
    yaml = YAML(typ="safe")
    shapes = []
    seen: set[str] = set()
    for pool_file in sorted((fleet / "nodepools").glob("*/pool.yaml")):
        doc: Any = yaml.load(pool_file.read_text())
        spec = (doc or {}).get("spec") or {}
        pool_cluster = str(spec.get("cluster") or DEFAULT_CLUSTER)
        seen.add(pool_cluster)
        if cluster is not None and pool_cluster != cluster:
            continue
        selector = spec.get("nodeSelector") or {}
        if not selector:
            raise TestbedError(
                f"{pool_file}: spec.nodeSelector is empty",
                fix="give the pool a nodeSelector so fake nodes can carry it",
            )
        product = ((spec.get("gpu") or {}).get("product")) or DEFAULT_PRODUCT
        shapes.append(PoolShape(pool_file.parent.name, dict(selector), product))
    if cluster is not None and not shapes:
        raise TestbedError(
            f"{fleet}: no pool names cluster '{cluster}' (pools name: {', '.join(sorted(seen))})",
            fix="pass --cluster with a cluster that holds pools (nodepools/*/pool.yaml "
            "spec.cluster)",
        )
    return shapes


def node_manifest(name: str, labels: Mapping[str, str], product: str) -> dict[str, Any]:
    spec = PRODUCTS.get(product, PRODUCTS[DEFAULT_PRODUCT])
    capacity = {"cpu": "96", "memory": "1056Gi", "pods": "110", "nvidia.com/gpu": str(spec.count)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **NFD_LABELS,
                **gfd_labels(product),
                **labels,
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def create_pool_nodes(client: kube.Client, shapes: Iterable[PoolShape], per_pool: int) -> list[str]:
    names = []
    for shape in shapes:
        for i in range(per_pool):
            name = f"{shape.name}-{i:03d}"
            client.create(node_manifest(name, shape.node_selector, shape.product))
            names.append(name)
    return names


def wait_ready(client: kube.Client, names: Iterable[str], timeout: float = 60) -> None:
    want = set(names)
    deadline = time.monotonic() + timeout
    pending = want
    while time.monotonic() < deadline:
        nodes = client.list("v1", "Node")["items"]
        ready = {n["metadata"]["name"] for n in nodes if node_ready(n)}
        pending = want - ready
        if not pending:
            return
        time.sleep(0.5)
    raise TestbedError(
        f"{len(pending)} fake nodes not Ready after {timeout:.0f}s: {sorted(pending)[:5]}",
        fix="see the kwok log under DIR/logs/kwok.log",
    )
