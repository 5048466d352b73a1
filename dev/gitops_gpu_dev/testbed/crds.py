"""Install CRDs into the testbed and wait until the apiserver serves them."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu import kube
from gitops_gpu.errors import TestbedError

CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


def read_crds(paths: Iterable[Path]) -> list[dict[str, Any]]:
    yaml = YAML(typ="safe")
    crds = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            for doc in yaml.load_all(file.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    crds.append(doc)
    return crds


def install(client: kube.Client, paths: Iterable[Path], timeout: float = 60) -> list[str]:
    """Apply every CRD under ``paths`` and wait for each to be Established."""
    return install_objects(client, read_crds(paths), timeout)


def install_objects(
    client: kube.Client, objects: Iterable[dict[str, Any]], timeout: float = 60
) -> list[str]:
    """Apply these CRDs and wait for each to be Established."""
    names = []
    for crd in objects:
        client.apply(crd, field_manager="gitops-gpu-testbed", force=True)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            obj = client.get(*CRD_API, name)
            conds = ((obj or {}).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                pending.discard(name)
        if pending:
            time.sleep(0.2)
    if pending:
        raise TestbedError(
            f"CRDs not established after {timeout:.0f}s: {sorted(pending)}",
            fix="see DIR/logs/kube-apiserver.log",
        )
    return names
