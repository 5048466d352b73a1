"""Threads carry their names to the OS, where `top -H` and the benchmark read them."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from gitops_gpu import osthread


def test_a_thread_is_named_for_the_os_cut_to_the_kernels_15_bytes() -> None:
    seen: list[str] = []
    done = threading.Event()

    def run() -> None:
        osthread.name_current("w-NodeGPUReport-and-more")
        seen.append(Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/comm").read_text())
        osthread.name_current()  # no name: the Python thread's own
        seen.append(Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/comm").read_text())
        done.set()

    threading.Thread(target=run, name="leader-election").start()
    assert done.wait(10)
    assert [s.strip() for s in seen] == ["w-NodeGPUReport", "leader-election"]
