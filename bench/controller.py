"""Benchmark the controller at fleet scale (50 pools, 2,000 KWOK nodes) against the naive
baseline a user would script (git pull + kubectl apply --server-side + kubectl get nodes).

    python bench/controller.py [--pools 50] [--nodes-per-pool 40] [--operator real|sim]

The simulator runs in its own process (`gitops-gpu testbed simulate`) so this process holds
only the controller: its CPU time and RSS are the controller's. With ``--operator real`` the
GPU Operator v26.7.0 runs as a process of the testbed (its operand DaemonSets put ~7 KWOK pods
on every node, which the controller's pod informer holds) and the simulator plays the hosts.
Known gap: the bench fleet's base is ``fleet.scaffold.minimal_base``, which names no operand
images; the real operator cannot render operands from it, so with ``--operator real`` the first
rollout does not converge (seen: not within 15 min at 20 nodes). Default: ``sim``.
Prints: time for the first rollout to converge, one idle pass (wall, CPU, API requests; target
no LIST of nodes, < 1 s), commit pushed -> canary objects applied via the webhook (target
< 2 s), ls-remote calls per poll, RSS (target < 150 MiB), idle CPU at a 5 s poll interval
(target < 2% of a core).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fleetbench import Bench, bench_env, git, node_lists, requests_since, write_fleet

from gitops_gpu import names
from gitops_gpu.controller import Config, Controller
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.render import render_fleet
from gitops_gpu.metrics import Metrics
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.server import ControllerServer, Probes
from gitops_gpu.testbed import controlplane
from gitops_gpu.testbed.build import find_kubectl


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def converged(ctl: Controller, sha: str, stages: list[str]) -> bool:
    return all(
        (st := ctl.backend.latest(sha, stage_context(s))) is not None and st.state == "success"
        for s in stages
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pools", type=int, default=50)
    ap.add_argument("--nodes-per-pool", type=int, default=40)
    ap.add_argument("--operator", choices=("real", "sim"), default="sim")
    args = ap.parse_args()
    with bench_env(args.pools, args.nodes_per_pool, args.operator) as bench:
        simulate = subprocess.Popen(
            controlplane.simulator_argv(
                bench.root / "testbed", 1, plays_operator=args.operator == "sim"
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            run(bench, args)
        finally:
            simulate.terminate()
            simulate.wait(30)
    return 0


def run(b: Bench, args: argparse.Namespace) -> None:
    client = b.tb.client
    sha = git(b.work, "rev-parse", "HEAD")
    cfg = Config(repo=str(b.bare), cache_dir=b.root / "ctl", interval=5.0)
    ctl = Controller(cfg, client, metrics=Metrics())
    ctl.start_informers()
    stages = ["canary", "fleet"]
    t = time.perf_counter()
    passes = 0
    while not converged(ctl, sha, stages):
        ctl.run_pass()
        passes += 1
        time.sleep(0.5)
    print(
        f"first rollout ({args.pools} pools, both stages success): "
        f"{time.perf_counter() - t:.1f}s in {passes} passes"
    )

    walls, cpus, reqs = [], [], {}
    ls0 = ctl.source.ls_remote_calls
    fetch0 = ctl.source.fetch_calls
    for _ in range(5):
        before = client.requests.copy()
        w0, c0 = time.perf_counter(), time.process_time()
        report = ctl.run_pass()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        reqs = requests_since(client, before)
        assert report.result == "ok" and report.applied == 0, report
    print(
        f"idle pass: wall {statistics.median(walls):.3f}s, CPU {statistics.median(cpus):.3f}s "
        f"(median of 5); {sum(reqs.values())} API requests, node LISTs={node_lists(reqs)}: {reqs}"
    )
    print(
        f"ls-remote per poll: {(ctl.source.ls_remote_calls - ls0) / 5:.1f}, "
        f"fetches: {ctl.source.fetch_calls - fetch0} (nothing changed)"
    )

    # The loop with a webhook, idle first: CPU and RSS over 30 s at 5 s polls.
    probes = Probes()
    server = ControllerServer(
        "127.0.0.1:0", ctl.metrics, probes, ctl.trigger, webhook_insecure=True
    ).start()
    stop = threading.Event()
    loop = threading.Thread(
        target=ctl.run, args=(stop,), kwargs={"on_pass": lambda _r: probes.beat()}, daemon=True
    )
    loop.start()
    time.sleep(6)
    ls0, c0, w0 = ctl.source.ls_remote_calls, time.process_time(), time.perf_counter()
    time.sleep(30)
    wall = time.perf_counter() - w0
    print(
        f"idle loop at 5s polls: CPU {100 * (time.process_time() - c0) / wall:.2f}% of a core, "
        f"{ctl.source.ls_remote_calls - ls0} ls-remote in {wall:.0f}s, RSS {rss_mib():.0f} MiB"
    )
    # Push, POST /webhook, time until the canary pool's driver carries the commit.
    write_fleet(b.work, args.pools, driver="580.142.01")
    new = b.commit("bump driver")
    t = time.perf_counter()
    urllib.request.urlopen(
        urllib.request.Request(
            f"http://127.0.0.1:{server.port}/webhook", data=b"{}", method="POST"
        ),
        timeout=5,
    ).read()
    canary = sorted(compile_fleet(load_repo(b.work), new).stage("canary").pools)[0]
    while True:
        drv = client.get(*names.NVIDIA_DRIVER_API, canary)
        if drv and drv["metadata"]["annotations"].get(names.COMMIT_ANNOTATION) == new:
            break
        time.sleep(0.02)
    print(f"commit pushed -> canary objects applied (webhook): {time.perf_counter() - t:.2f}s")
    stop.set()
    ctl.trigger()
    loop.join(60)
    server.stop()
    naive(b, new)


def naive(b: Bench, sha: str) -> None:
    """What a user would script: git pull, kubectl apply --server-side, kubectl get nodes."""
    kubectl = str(find_kubectl())
    clone = b.root / "naive"
    subprocess.run(["git", "clone", "-q", str(b.bare), str(clone)], check=True)
    out = b.root / "compiled"
    for rel, text in render_fleet(compile_fleet(load_repo(clone), sha)).items():
        if "node-labels" in rel:
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    # HOME: kubectl keeps its discovery cache there (without it, in the current directory).
    env = {"KUBECONFIG": b.tb.kubeconfig, "PATH": "/usr/bin:/bin", "HOME": str(b.root)}
    steps = {
        "git pull": ["git", "-C", str(clone), "pull", "-q"],
        "kubectl apply --server-side": [
            kubectl,
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "naive",
            "-R",
            "-f",
            str(out),
        ],
        "kubectl get nodes -o json": [kubectl, "get", "nodes", "-o", "json"],
    }
    total = 0.0
    for what, cmd in steps.items():
        t = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, capture_output=True)
        took = time.perf_counter() - t
        total += took
        print(f"naive baseline: {what:30} {took:6.2f}s")
    print(f"naive baseline, one idle pass in all: {total:.2f}s (every pass LISTs all nodes)")


if __name__ == "__main__":
    raise SystemExit(main())
