"""Threads named for the OS too, so `top -H`, /proc/<pid>/task/*/comm and the benchmark's
per-thread CPU say which part of the controller spends it (Python names stay Python's own)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

_PR_SET_NAME = 15  # prctl(2); the kernel keeps 15 bytes and a NUL
_libc: ctypes.CDLL | None = None
if sys.platform == "linux":
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        _libc = None


def name_current(name: str | None = None) -> None:
    """Name the calling OS thread ``name`` or its Python thread's name (best effort, Linux
    only; the kernel keeps the first 15 bytes)."""
    if _libc is None:
        return
    name_b = (name or threading.current_thread().name).encode()[:15]
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name_b), 0, 0, 0)
