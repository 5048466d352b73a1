"""Benchmark plan/apply at fleet scale: 50 pools, 2,000 KWOK nodes, real apiserver.

    python bench/plan.py [--pools 50] [--nodes-per-pool 40]

Prints wall time and API requests (by verb and resource) for: the first apply of everything, an
idle plan with the node informer warm (target: under 3 s, no LIST of nodes), a one-shot plan as
`gitops-gpu plan` runs it (one LIST of nodes), and an apply that changes every pool.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fleetbench import Bench, bench_env, git, node_lists, requests_since, write_fleet

from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.sync import engine
from gitops_gpu.sync.live import Informer, LiveReader


def _plan_all(eng: engine.Engine, bench: Bench, sha: str) -> engine.ClusterPlan:
    compiled = compile_fleet(load_repo(bench.work), sha)
    cluster = compiled.clusters["default"]
    return eng.plan(cluster, engine.select(compiled, cluster), sha)


def _row(what: str, seconds: float, reqs: dict[str, int]) -> None:
    total = sum(reqs.values())
    print(f"{what:44} {seconds:7.3f}s  {total:5d} requests  node LISTs={node_lists(reqs)}  {reqs}")


def _written(result: engine.ApplyResult) -> None:
    relabelled = sum(len(b) for b in result.label_batches)
    print(
        f"  wrote {len(result.applied)} objects, relabelled {relabelled} nodes "
        f"in {len(result.label_batches)} batches"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pools", type=int, default=50)
    ap.add_argument("--nodes-per-pool", type=int, default=40)
    args = ap.parse_args()
    with bench_env(args.pools, args.nodes_per_pool) as bench:
        client = bench.tb.client
        informer = Informer(client).start()
        informer.wait_synced(60)
        eng = engine.Engine(client, LiveReader(client, informer))
        sha = git(bench.work, "rev-parse", "HEAD")

        before = client.requests.copy()
        t = time.perf_counter()
        plan = _plan_all(eng, bench, sha)
        result = eng.apply(plan)
        _row(
            "apply everything (cold, from empty)",
            time.perf_counter() - t,
            requests_since(client, before),
        )
        _written(result)
        time.sleep(2)  # let the informer see the label writes

        for attempt in (1, 2):
            before = client.requests.copy()
            t = time.perf_counter()
            plan = _plan_all(eng, bench, sha)
            _row(
                f"idle plan, informer warm (#{attempt})",
                time.perf_counter() - t,
                requests_since(client, before),
            )
            assert plan.in_sync, "idle plan found drift"

        cold = engine.Engine(client)  # as `gitops-gpu plan` runs: no informer, no memo
        before = client.requests.copy()
        t = time.perf_counter()
        _plan_all(cold, bench, sha)
        _row(
            "idle plan, one-shot (gitops-gpu plan)",
            time.perf_counter() - t,
            requests_since(client, before),
        )

        write_fleet(bench.work, args.pools, driver="580.142.01")
        for pool_dir in (bench.work / "nodepools").iterdir():  # every pool gets MIG relabelled too
            pool = pool_dir / "pool.yaml"
            text = pool.read_text()
            if "NVIDIA-H100" in text or "NVIDIA-A100" in text:
                pool.write_text(text.replace("spec:\n", "spec:\n  migConfig: all-disabled\n", 1))
        sha2 = bench.commit("bump every pool")
        before = client.requests.copy()
        t = time.perf_counter()
        plan = _plan_all(eng, bench, sha2)
        result = eng.apply(plan)
        _row("apply changing every pool", time.perf_counter() - t, requests_since(client, before))
        _written(result)
        informer.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
