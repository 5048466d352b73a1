"""verifyNewNodes on the testbed with the real GPU Operator (issue 27): a node that joins the
canary after its rollout is tainted NoSchedule within a pass, the operator's operands still
reach it (compile adds the toleration to the ClusterPolicy and the pool's NVIDIADriver), the
ladder judges it Healthy by them, and the taint goes with the commit recorded."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from e2e_harness import Env, fast_gates
from ruamel.yaml import YAML

from gitops_gpu import names
from gitops_gpu_dev.testbed import nodes

pytestmark = pytest.mark.e2e
OPERAND_NAMESPACE = "gpu-operator"


def _verify_canary(work: Path) -> None:
    fast_gates()(work)
    yaml = YAML()
    path = work / "nodepools" / "canary" / "pool.yaml"
    doc = yaml.load(path.read_text())
    doc["spec"]["verifyNewNodes"] = True
    with path.open("w") as fh:
        yaml.dump(doc, fh)


def _tainted(env: Env, node: str) -> bool:
    taints = (env.tb.client.get("v1", "Node", node) or {}).get("spec", {}).get("taints") or []
    return any(t.get("key") == names.UNVERIFIED_TAINT for t in taints)


def _verified(env: Env, node: str) -> str | None:
    meta = (env.tb.client.get("v1", "Node", node) or {}).get("metadata", {})
    return (meta.get("annotations") or {}).get(names.VERIFIED_ANNOTATION)


def _driver_pod_ready(env: Env, node: str) -> bool:
    pods = env.tb.client.list("v1", "Pod", namespace=OPERAND_NAMESPACE)["items"]
    return any(
        (p.get("spec") or {}).get("nodeName") == node
        and "driver" in p["metadata"]["name"]
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
        for p in pods
    )


def test_a_node_joining_the_canary_is_tainted_until_the_ladder_verifies_it(env: Env) -> None:
    first = env.remote.commit("fast gates, canary verifies new nodes", _verify_canary)
    (existing,) = [n for n in env.start_nodes(1) if n.startswith("canary-")]
    env.controller()
    env.wait("first rollout", lambda: env.state(first, "canary") == "success", 240)
    # A node there from the start is verified on the first commit like any other.
    env.wait("the first node verified", lambda: _verified(env, existing) == first, 30)
    assert not _tainted(env, existing)
    shape = next(s for s in nodes.read_pool_shapes(env.remote.work) if s.name == "canary")
    joined = "canary-joined"
    env.tb.client.create(nodes.node_manifest(joined, shape.node_selector, shape.product))
    created = time.time()
    env.wait("the joined node tainted", lambda: _tainted(env, joined), 30)
    tainted_after = time.time() - created
    assert _verified(env, joined) is None
    # The operator's driver reaches it through the taint; nothing else of ours is needed.
    env.wait("the operator's driver pod Ready on it", lambda: _driver_pod_ready(env, joined), 240)
    assert _tainted(env, joined) or _verified(env, joined) == first
    env.wait("the joined node verified", lambda: _verified(env, joined) == first, 240)
    verified_after = time.time() - created
    env.wait("the taint lifted", lambda: not _tainted(env, joined), 30)
    print(
        f"\n[measure] joined node tainted {tainted_after:.1f}s after it was created, "
        f"verified and untainted {verified_after:.1f}s after"
    )
