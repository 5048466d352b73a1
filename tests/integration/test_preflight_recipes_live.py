"""A recipe's cluster constraints against a real apiserver and real Node objects (--kubeconfig).

The Kubernetes version comes from the testbed's kube-apiserver (/version); the node OS from the
NFD labels on its KWOK nodes. The recipe is the shared AICR snapshot's, read in place.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from gitops_gpu.fleet.scaffold import overlay, write_repo
from gitops_gpu.preflight import Finding, Severity, run_preflight
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

H100 = "NVIDIA-H100-80GB-HBM3"
POOL = {"node.kubernetes.io/pool": "rcp"}
NFD = "feature.node.kubernetes.io/"


def _repo(tmp_path: Path, recipe: str, **fleet: str) -> Path:
    root = write_repo(
        tmp_path / "fleet",
        {"rcp": {"gpu": {"product": H100}, "nodeSelector": POOL, "recipe": recipe}},
        clusters=[{"name": "default", "gpuOperatorVersion": "v25.10.1"}],
        overlays={"rcp": overlay({"driver": {"version": "580.105.08"}, "dcgm": {"enabled": True}})},
    )
    if fleet:
        path = root / "fleet.yaml"
        extra = "".join(f"  {k}: {v}\n" for k, v in fleet.items())
        path.write_text(path.read_text().replace("spec:\n", "spec:\n" + extra, 1))
    return root


def _check(root: Path, tb: Testbed, recipes: Path) -> list[Finding]:
    return run_preflight(
        root,
        commit="c",
        kubeconfig=tb.kubeconfig,
        recipes_dir=recipes,
        today=datetime.date(2026, 11, 1),
    ).findings


def test_recipe_constraints_against_the_live_cluster(
    clean_cluster: Testbed, tmp_path: Path, upstream: Path
) -> None:
    tb = clean_cluster
    tb.client.create(nodes.node_manifest("rcp-000", POOL, H100))  # ubuntu 24.04, kernel 6.8
    old = {**POOL, NFD + "system-os_release.VERSION_ID": "22.04"}
    tb.client.create(nodes.node_manifest("rcp-001", old, H100))
    version = tb.client.request("GET", "/version")["gitVersion"]
    recipes = upstream / "aicr" / "recipes"

    findings = _check(_repo(tmp_path, "h100-eks-ubuntu-training"), tb, recipes)
    live = [f for f in findings if f.code == "GG055"]
    # Kubernetes (>= 1.32.4), OS ID (ubuntu) and kernel (>= 6.8) hold; one node's VERSION_ID not
    assert [f.message for f in live] == [
        "pool 'rcp': 1 node(s) fail recipe h100-eks-ubuntu-training's OS.release.VERSION_ID "
        f"24.04 ({live[0].source}): rcp-001 (22.04)"
    ]
    assert live[0].severity is Severity.WARNING and live[0].file == "nodepools/rcp/pool.yaml"
    assert not [f for f in findings if f.code in ("GG052", "GG053", "GG054")]

    # a recipe that needs a newer Kubernetes than the testbed runs: named with the real version
    cat = tmp_path / "recipes"
    (cat / "overlays").mkdir(parents=True)
    meta = {"kind": "RecipeMetadata", "apiVersion": "aicr.nvidia.com/v1alpha1"}
    base = {"componentRefs": [{"name": "gpu-operator", "type": "Helm", "version": "v25.10.1"}]}
    future: dict[str, Any] = {
        "criteria": {"service": "kind"},
        "constraints": [{"name": "K8s.server.version", "value": ">= 1.99"}],
    }
    for name, spec in (("base", base), ("future", future)):
        doc = {**meta, "metadata": {"name": name}, "spec": spec}
        (cat / "overlays" / f"{name}.yaml").write_text(json.dumps(doc))
    findings = _check(_repo(tmp_path / "e", "future", recipePolicy="enforce"), tb, cat)
    (k8s,) = [f for f in findings if f.code == "GG055"]
    assert f"runs Kubernetes {version}, recipe future needs >= 1.99" in k8s.message
    assert k8s.severity is Severity.ERROR and k8s.source == f"{cat}/overlays/future.yaml:1"
