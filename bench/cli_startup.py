"""Benchmark the CLI's start: `--help`, `--version` and `check` of fleet-repo-example.

    python bench/cli_startup.py [--runs 5]

Each command runs as its own process (the installed `gitops-gpu` entry point); its CPU is the
child's user + system time from the kernel (os.wait4), the median of the runs. Targets (issue
32): --help and --version under 0.15 s, check of the example under 0.5 s. The CRD cache is warm
after the first check (preflight/crd_cache.py); the first, cold run is printed on its own.
Bytecode is written and used as an installed wheel has it: this machine sets
PYTHONDONTWRITEBYTECODE=1, which made every run compile ~80 modules from source (0.12 s of
check's CPU), so the children run without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gitops_gpu_dev import paths

EXE = Path(sys.executable).with_name("gitops-gpu")


def cpu(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``gitops-gpu argv``."""
    start = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen([str(EXE), *argv], stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"gitops-gpu {' '.join(argv)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    crds = paths.shared_upstream() / "gpu-operator" / "crds"
    cases = [
        ("--help", ["--help"], 0.15),
        ("--version", ["--version"], 0.15),
        (
            "check fleet-repo-example",
            ["check", str(paths.fleet_example()), "--crds", str(crds)],
            0.5,
        ),
    ]
    missed = []
    for name, argv, target in cases:
        first = cpu(argv)
        runs = [cpu(argv) for _ in range(args.runs)]
        med = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        ok = med < target
        print(
            f"{name:26} CPU {med:.3f} s (median of {args.runs}; first {first[0]:.3f} s), "
            f"wall {wall:.3f} s  target < {target} s  {'ok' if ok else 'MISSED'}"
        )
        if not ok:
            missed.append(name)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
