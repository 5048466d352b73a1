"""`plan --base REV` against the real apiserver: the disruption plan names the pool's nodes, the
GPU pods running on them now and the PodDisruptionBudget (status from the real disruption
controller) that would block their eviction."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.cli import main
from gitops_gpu_dev.testbed import nodes
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration


def _bump_driver(work: Path) -> None:
    base = work / "base" / "clusterpolicy.yaml"
    text = base.read_text()
    assert 'version: "580.126.20"' in text
    base.write_text(text.replace('version: "580.126.20"', 'version: "580.142.01"'))


def _gpu_pod(ns: str, name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "train"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "image": "train:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ],
        },
    }


def _replica_set(ns: str) -> dict[str, Any]:
    """A ReplicaSet of one that adopts the pod (the real ReplicaSet controller sets the owner,
    and the disruption controller counts only pods with a controller). Not a Job: KWOK
    completes Job pods at once."""
    labels = {"app": "train"}
    gpu = {"limits": {"nvidia.com/gpu": 1}}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "train", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "train:1", "resources": gpu}]},
            },
        },
    }


def _pdb_settled(tb: Testbed, ns: str) -> bool:
    pod = tb.client.get("v1", "Pod", "train-0", ns) or {}
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    pdb = tb.client.get("policy/v1", "PodDisruptionBudget", "train-pdb", namespace=ns)
    status = (pdb or {}).get("status") or {}
    return (
        any(o.get("kind") == "ReplicaSet" for o in owners)
        and status.get("observedGeneration") is not None
        and status.get("expectedPods") == 1
    )


def test_plan_base_names_nodes_gpu_pods_and_the_blocking_budget(
    clean_cluster: Testbed, fleet_remote: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tb = clean_cluster
    made = nodes.create_pool_nodes(tb.client, nodes.read_pool_shapes(fleet_remote.work), 1)
    nodes.wait_ready(tb.client, made)
    base = fleet_remote.commit("base")
    fleet_remote.commit("driver 580.142.01", _bump_driver)
    canary_node = next(n for n in made if "canary" in n)
    ns = f"ml-{uuid.uuid4().hex[:6]}"
    tb.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    tb.client.create(_gpu_pod(ns, "train-0", canary_node))
    tb.client.create(_replica_set(ns))
    tb.client.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "train-pdb", "namespace": ns},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}},
        }
    )
    deadline = time.monotonic() + 60
    while not _pdb_settled(tb, ns):
        assert time.monotonic() < deadline, "the disruption controller never counted the pod"
        time.sleep(0.5)
    try:
        args = ["plan", "--repo", fleet_remote.url, "--kubeconfig", tb.kubeconfig]
        args += ["--base", base, "--no-nvml", "--cache-dir", str(tmp_path / "cache")]
        assert main([*args, "--format", "json"]) == 3  # nothing applied: changes pending
        out = json.loads(capsys.readouterr().out)["disruption"]
        pools = {p["pool"]: p for s in out["stages"] for p in s["pools"]}
        canary = pools["canary"]
        assert canary["nodes"] == [canary_node]
        assert [e["kind"] for e in canary["effects"]] == ["driver-upgrade"]
        # (pods other tests left bound to a node of the same name are workloads there too)
        ours = [w for w in canary["workloads"] if w["pod"].startswith(f"{ns}/")]
        assert ours == [
            {"pod": f"{ns}/train-0", "owner": "ReplicaSet", "pdbs": ["train-pdb allows 0"]}
        ]
        assert all(p["nodes"] and p["effects"][0]["cordons"] for p in pools.values())
        assert out["summary"].startswith(f"cordons {len(made)} nodes, stops GPU pods on")
        running = len(canary["workloads"]) + sum(
            len(p["workloads"]) for name, p in pools.items() if name != "canary"
        )
        plural = "s" if running != 1 else ""
        assert out["summary"].endswith(f"{running} GPU pod{plural} running there now")
        assert main(args) == 3
        text = capsys.readouterr().out
        assert f"blocked: pod {ns}/train-0 (ReplicaSet, PDB train-pdb allows 0)" in text
        assert "driver upgrade 580.126.20 -> 580.142.01" in text
    finally:
        tb.client.delete("v1", "Namespace", ns)
