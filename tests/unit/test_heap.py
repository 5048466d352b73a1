"""heap.py against this process's real glibc malloc: a trim hands freed pages back to the OS
(RSS from /proc), at most once a minute."""

from __future__ import annotations

import gc
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
