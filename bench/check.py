"""Benchmark `gitops-gpu check` and `compile --out` on a generated fleet repo.

    python bench/check.py [--pools 50] [--runs 3]

Targets (issue 32): check under 2 s and compile --out under 3 s, each in a new process, both
under 150 MB peak RSS; exits 1 on a miss. PYTHONDONTWRITEBYTECODE is honoured as set.

The repo uses fleet-repo-example's base ClusterPolicy (a full v26.3.3 policy) and per-pool
overlays like the example's (driver versions, RDMA, GDRCopy, MIG, time-slicing), across three
clusters and three stages. Prints the time of each phase and of the whole check.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.render import render_fleet
from gitops_gpu.fleet.scaffold import overlay, write_repo
from gitops_gpu.fleet.yamlio import load_file
from gitops_gpu.preflight import run_preflight
from gitops_gpu.preflight.findings import has_errors
from gitops_gpu_dev import paths

PROJECT = Path(__file__).resolve().parents[1]
SHAPES = [
    (
        {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "migConfig": "all-balanced"},
        {"driver": {"rdma": {"enabled": True, "useHostMofed": True}}},
    ),
    ({"gpu": {"product": "NVIDIA-L40S"}, "devicePluginConfig": "l40s-time-sliced-4"}, None),
    (
        {"gpu": {"product": "NVIDIA-B200"}, "maxUnavailable": 1},
        {"driver": {"kernelModuleType": "open"}, "gdrcopy": {"enabled": True}},
    ),
    (
        {"gpu": {"product": "NVIDIA-A100-SXM4-80GB"}, "migConfig": "all-1g.10gb"},
        {"driver": {"version": "570.195.03", "upgradePolicy": {"maxParallelUpgrades": 2}}},
    ),
]


def generate(root: Path, pools: int) -> Path:
    base = load_file(PROJECT / "fleet-repo-example/base/clusterpolicy.yaml", PROJECT).data
    names = [f"pool-{i:02d}" for i in range(pools)]
    specs, overlays = {}, {}
    for i, name in enumerate(names):
        pool, policy = SHAPES[i % len(SHAPES)]
        specs[name] = {
            **pool,
            "cluster": f"c{i % 3}",
            "nodeSelector": {"cloud.google.com/gke-nodepool": name},
        }
        if policy:
            overlays[name] = overlay(policy)
    third = max(1, pools // 3)
    stages = [
        {"name": "canary", "pools": names[:2]},
        {"name": "early", "pools": names[2:third]},
        {"name": "rest", "pools": names[third:]},
    ]
    repo = write_repo(
        root,
        specs,
        base=base,
        overlays=overlays,
        stages=[s for s in stages if s["pools"]],
        clusters=[{"name": f"c{i}"} for i in range(3)],
        name="bench",
    )
    # the L40S pools' time-slicing config, kept in the repo as the example keeps it
    shared = repo / "configs" / "device-plugin"
    shared.mkdir(parents=True)
    example = PROJECT / "fleet-repo-example/configs/device-plugin/l40s-time-sliced-4.yaml"
    (shared / example.name).write_text(example.read_text())
    return repo


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = generate(Path(tmp) / "fleet", args.pools)
        files = sum(1 for _ in root.rglob("*.yaml"))
        t0 = time.perf_counter()
        repo = load_repo(root)
        t1 = time.perf_counter()
        compiled = compile_fleet(repo, "bench")
        t2 = time.perf_counter()
        rendered = render_fleet(compiled)
        t3 = time.perf_counter()
        print(f"repo: {args.pools} pools, {files} files, {len(compiled.clusters)} clusters")
        print(
            f"load {t1 - t0:.3f} s, compile {t2 - t1:.3f} s, render {len(rendered)} files "
            f"{t3 - t2:.3f} s"
        )
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = run_preflight(root, commit="bench", crds_dir=paths.default_crds_dir())
            times.append(time.perf_counter() - start)
        if has_errors(result.findings):
            print("\n".join(f.text() for f in result.findings), file=sys.stderr)
            return 1
        print(
            f"check: {len(result.findings)} findings; runs "
            + ", ".join(f"{t:.3f}" for t in times)
            + f" s; median {statistics.median(times):.3f} s (first run includes CRD parsing)"
        )
        # fresh processes, as a developer or CI runs them: interpreter start, imports, CRD
        # cache, the whole command; wall, CPU and peak RSS from the kernel (os.wait4)
        crds = str(paths.default_crds_dir())
        out = Path(tmp) / "out"
        missed = []
        for name, argv, target in (
            ("check", ["check", str(root), "--crds", crds], CHECK_TARGET),
            ("compile --out", ["compile", str(root), "--out", str(out), "--commit", "x"], 3.0),
        ):
            runs = [_process(argv, out) for _ in range(args.runs)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            rss = max(r[2] for r in runs)
            ok = wall < target and rss < RSS_TARGET_MB
            print(
                f"`gitops-gpu {name}` ({args.pools} pools, new process, median of {args.runs}): "
                f"wall {wall:.2f} s (target < {target} s), CPU {cpu:.2f} s, "
                f"peak RSS {rss:.0f} MB (target < {RSS_TARGET_MB} MB)  {'ok' if ok else 'MISSED'}"
            )
            if not ok:
                missed.append(name)
        return 1 if missed else 0


CHECK_TARGET = 2.0
RSS_TARGET_MB = 150


def _process(argv: list[str], out: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one ``gitops-gpu argv`` in its own process."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-c",
        f"import sys; from gitops_gpu.cli import main; sys.exit(main({argv!r}))",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"gitops-gpu {argv[0]} exited {os.waitstatus_to_exitcode(status)}: {err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


if __name__ == "__main__":
    sys.exit(main())
