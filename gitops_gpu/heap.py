"""The process's C heap (glibc malloc): fewer arenas, and freed memory handed back.

RSS is what a memory limit counts. Two glibc habits inflate it in a long-running threaded
Python process: each thread that allocates may get its own 64 MiB arena (up to 8 per core),
partly resident; and memory freed after a peak (a rollout's plans and events) stays mapped
until malloc_trim. Elsewhere than glibc both calls do nothing.

Where the Python heap goes: run with ``PYTHONTRACEMALLOC=1`` and send SIGUSR2; the controller
logs the allocation sites holding most memory (bench/controller.py ``--heap``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import linecache
import logging
import signal
import time
import tracemalloc
from types import FrameType

log = logging.getLogger(__name__)
M_ARENA_MAX = -8  # glibc's mallopt parameter number
TRIM_EVERY = 60.0  # seconds between trims: each walks the heap's free chunks

_libc: ctypes.CDLL | None = None
_last_trim = 0.0


def _c() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            return None
    return _libc


def few_arenas(arenas: int = 2) -> None:
    """Cap the arenas; call before the threads start."""
    libc = _c()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_ARENA_MAX, arenas)


def trim(now: float | None = None) -> bool:
    """Hand freed heap pages back to the OS, at most every TRIM_EVERY seconds; whether it
    trimmed."""
    global _last_trim
    now = time.monotonic() if now is None else now
    libc = _c()
    if libc is None or not hasattr(libc, "malloc_trim") or now - _last_trim < TRIM_EVERY:
        return False
    _last_trim = now
    libc.malloc_trim(0)
    return True


def census(limit: int = 30) -> list[str]:
    """The allocation sites holding most traced memory, largest first: size, blocks, site."""
    stats = tracemalloc.take_snapshot().statistics("lineno")
    total = sum(s.size for s in stats)
    out = [f"traced {total / 2**20:.1f} MiB in {sum(s.count for s in stats)} blocks"]
    for stat in stats[:limit]:
        frame = stat.traceback[0]
        code = linecache.getline(frame.filename, frame.lineno).strip()
        out.append(
            f"{stat.size / 2**20:7.2f} MiB {stat.count:8d}  {frame.filename}:{frame.lineno}  {code}"
        )
    return out


def census_on_signal() -> bool:
    """Under PYTHONTRACEMALLOC, log the census on SIGUSR2; whether it was installed."""
    if not tracemalloc.is_tracing():
        return False

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        log.warning("heap census:\n%s", "\n".join(census()))

    signal.signal(signal.SIGUSR2, on_signal)
    return True
