"""heap.py against this process's real glibc malloc: a trim hands freed pages back to the OS
(RSS from /proc), at most once a minute."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

from gitops_gpu import heap


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_trim_returns_what_was_freed_and_waits_a_minute_before_the_next() -> None:
    heap._last_trim = 0.0
    heap.trim(now=1e9)  # start from a trimmed heap
    # 64 KiB blocks sit in the heap (below glibc's mmap threshold); the last one pins its top,
    # so freeing the rest returns nothing until a trim.
    blocks = [bytearray(64 * 1024) for _ in range(3000)]
    pin = bytearray(64 * 1024)
    grown = _rss_mib()
    del blocks
    gc.collect()
    freed = _rss_mib()
    assert heap.trim(now=2e9)
    trimmed = _rss_mib()
    assert freed - trimmed > 100, (grown, freed, trimmed)  # ~190 MiB were freed
    assert not heap.trim(now=2e9 + heap.TRIM_EVERY - 1)
    assert heap.trim(now=2e9 + heap.TRIM_EVERY)
    del pin


_TRACED = """
import logging, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from gitops_gpu import heap
held = [bytes(1000) for _ in range(20000)]  # the site the census must name first
print(heap.census_on_signal(), flush=True)
time.sleep(30)
"""


def test_a_traced_controller_logs_where_its_heap_goes_on_sigusr2() -> None:
    env = {**os.environ, "PYTHONTRACEMALLOC": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _TRACED], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().strip() == b"True"
        proc.send_signal(signal.SIGUSR2)
        lines: list[str] = []
        while len(lines) < 3:  # the census heading, its total, its largest site (or EOF)
            line = proc.stderr.readline().decode()
            if not line:
                break
            if lines or "heap census:" in line:
                lines.append(line)
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipes
    assert len(lines) == 3, lines
    assert lines[1].startswith("traced ")
    assert "<string>:5" in lines[2] and "MiB" in lines[2]


def test_without_tracing_no_census_is_installed() -> None:
    assert not tracemalloc.is_tracing()
    assert heap.census_on_signal() is False
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL
