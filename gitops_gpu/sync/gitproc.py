"""`git` run against a remote that may be hostile: a deadline for the whole command, a cap on
what it prints, and a cap on the memory of git and its remote helper.

git itself has no bound here: remote-curl buffers a whole ref advertisement in memory, and a
server dribbling one byte every few seconds keeps it waiting forever. So the command runs in its
own process group (killed whole: git-remote-http is a grandchild), under ``prlimit --as`` where
util-linux has it, and its output is read in chunks.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

STDERR_KEEP = 16 << 10
MEMORY_FLOOR = 512 << 20  # git, libcurl and TLS start well below this


class GitRunError(Exception):
    """``reason``: "failed" (git's exit status, ``stderr`` holds why), "too_large", "deadline"."""

    def __init__(self, reason: str, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.reason, self.stderr = reason, stderr


def run_bounded(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    max_bytes: int,
    deadline: float,
) -> bytes:
    """git's stdout; GitRunError when it fails, prints more than ``max_bytes`` or runs past
    ``deadline`` seconds (then git and its helpers are killed)."""
    cmd = ["git", *args]
    prlimit = shutil.which("prlimit")
    if prlimit:
        cmd = [prlimit, f"--as={MEMORY_FLOOR + 4 * max_bytes}", "--", *cmd]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    out, err = bytearray(), bytearray()
    end = time.monotonic() + deadline
    problem: tuple[str, str] | None = None
    assert proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map() and problem is None:
            left = end - time.monotonic()
            if left <= 0:
                problem = ("deadline", f"git {args[0]} ran past {deadline:g}s")
                break
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is err and len(err) > STDERR_KEEP:
                    del err[: len(err) - STDERR_KEEP]
                if len(out) > max_bytes:
                    problem = ("too_large", f"git {args[0]} printed more than {max_bytes} bytes")
    if problem is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.stdout.close()
    proc.stderr.close()
    code = proc.wait()
    if problem is not None:
        raise GitRunError(*problem)
    if code != 0:
        text = err.decode("utf-8", "replace").strip()
        raise GitRunError("failed", f"git {args[0]} exited {code}", text)
    return bytes(out)
