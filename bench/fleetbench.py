"""Shared set-up for the benchmarks: a testbed, a 50-pool fleet repo as a real git remote, and
2,000 KWOK GPU nodes. Not a test; imported by bench/plan.py and bench/controller.py."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitops_gpu import kube
from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu_dev.testbed import nodes, session

# kwok renews each node's Lease every 10 s by default: 500 writes/s at 5,000 nodes, which two
# shared cores cannot keep up with, so kube-controller-manager marked nodes NotReady and
# tainted them by the hundred (seen: 100 node events/s, canaries failing on NotReady nodes).
# Longer leases and grace keep the fleet Ready; node status still heartbeats every ~10 min.
CALM_NODES = {
    "GITOPS_GPU_KWOK_ARGS": "--node-lease-duration-seconds=600",
    "GITOPS_GPU_KCM_ARGS": "--node-monitor-grace-period=30m",
}
EXAMPLE_BASE = Path(__file__).parent.parent / "fleet-repo-example" / "base" / "clusterpolicy.yaml"
PRODUCTS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "NVIDIA-B200", "NVIDIA-A100-SXM4-80GB")


@dataclass
class Bench:
    root: Path
    tb: session.Testbed
    work: Path
    bare: Path

    def commit(self, message: str) -> str:
        git(self.work, "add", "-A")
        git(self.work, "commit", "-qm", message)
        git(self.work, "push", "-q", "origin", "main")
        return git(self.work, "rev-parse", "HEAD")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def example_base(driver: str) -> dict[str, Any]:
    """fleet-repo-example's ClusterPolicy (complete operand images, as the real GPU Operator
    needs) with ``driver`` pinned."""
    base: dict[str, Any] = YAML(typ="safe").load(EXAMPLE_BASE.read_text())
    base["spec"]["driver"]["version"] = driver
    # A fleet of thousands upgrades a pool's drivers in maxUnavailable batches, not one node
    # at a time (the example's 1): 40 nodes x 8 upgrade steps in series outlast the bench.
    base["spec"]["driver"]["upgradePolicy"]["maxParallelUpgrades"] = 0
    return base


def write_fleet(work: Path, pools: int, driver: str = "580.126.20") -> None:
    specs = {
        f"pool-{i:02d}": {"gpu": {"product": PRODUCTS[i % len(PRODUCTS)]}, "maxUnavailable": "25%"}
        for i in range(pools)
    }
    names_ = sorted(specs)
    gate = {"soak": "0s", "timeout": "30m"}
    stages = [
        {"name": "canary", "pools": names_[:1], "gate": gate},
        {"name": "fleet", "pools": names_[1:], "gate": gate},
    ]
    write_repo(work, specs, base=example_base(driver), stages=stages, name="bench")


def create_nodes(client: kube.Client, work: Path, per_pool: int) -> list[str]:
    shapes = nodes.read_pool_shapes(work)
    todo = [(s, i) for s in shapes for i in range(per_pool)]

    def make(item: tuple[nodes.PoolShape, int]) -> str:
        shape, i = item
        name = f"{shape.name}-{i:03d}"
        client.create(nodes.node_manifest(name, shape.node_selector, shape.product))
        return name

    with ThreadPoolExecutor(8) as pool:
        created = list(pool.map(make, todo))
    nodes.wait_ready(client, created, timeout=max(300, len(created) / 5))
    return created


@contextmanager
def bench_env(
    pools: int = 50,
    per_pool: int = 40,
    operator: str = "sim",
    *,
    audit: Callable[[Path, list[str]], str] | None = None,
    users: list[str] | None = None,
) -> Iterator[Bench]:
    """``audit(root, users)``: extra kube-apiserver flags (an audit log of ``users``)."""
    root = Path(tempfile.mkdtemp(prefix="gitops-gpu-bench-"))
    t0 = time.monotonic()
    env = dict(CALM_NODES)
    if audit is not None:
        env["GITOPS_GPU_APISERVER_ARGS"] = audit(root, users or [])
    os.environ.update(env)
    try:
        tb = session.start(root / "testbed", progress=lambda _m: None, operator_mode=operator)
    finally:
        for key in env:
            os.environ.pop(key, None)
    try:
        work, bare = root / "fleet", root / "fleet.git"
        git(root, "init", "-q", "--bare", "-b", "main", str(bare))
        write_fleet(work, pools)
        git(work, "init", "-q", "-b", "main")
        git(work, "config", "user.email", "bench@example.com")
        git(work, "config", "user.name", "bench")
        git(work, "remote", "add", "origin", str(bare))
        bench = Bench(root, tb, work, bare)
        bench.commit("bench fleet")
        created = create_nodes(tb.client, work, per_pool)
        print(
            f"set-up: testbed + {len(created)} Ready KWOK nodes in {pools} pools "
            f"(GPU Operator: {operator}) in {time.monotonic() - t0:.1f}s"
        )
        yield bench
    finally:
        tb.client.close()
        session.stop(root / "testbed")
        shutil.rmtree(root, ignore_errors=True)


def requests_since(client: kube.Client, before: collections.Counter[str]) -> dict[str, int]:
    """Requests since ``before``, by verb and resource (names dropped)."""
    grouped: collections.Counter[str] = collections.Counter()
    for key, n in (client.requests - before).items():
        verb, path = key.split(" ", 1)
        parts = path.strip("/").split("/")
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if rest and rest[0] == "namespaces" and len(rest) > 2:
            rest = rest[2:]
        resource = rest[0] if rest else path
        if len(rest) > 2:
            resource += "/" + rest[2]
        grouped[f"{verb} {resource}"] += n
    return dict(sorted(grouped.items()))


def node_lists(reqs: dict[str, int]) -> int:
    return reqs.get("GET nodes", 0)
