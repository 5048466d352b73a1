"""Where a one-shot export lives while ``check`` or ``compile`` reads it.

An export is written, read once and removed. On a disk where creating a file costs a journal
write (this project's CI machine: 2,000 pools, 3,500 files took 4.3 s to create in /tmp and
0.13 s in /dev/shm), that scratch work was the largest part of a 2,000-pool ``check``. So it
goes to memory-backed storage when the system has some to spare: ``$GITOPS_GPU_SCRATCH_DIR``
if set, else ``/dev/shm`` when it is a writable directory with room for the largest export
the limits allow (four times ``--max-repo-bytes``), else the system's temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gitops_gpu.fleet import yamlio

ENV = "GITOPS_GPU_SCRATCH_DIR"
SHM = Path("/dev/shm")


def scratch_parent(shm: Path = SHM) -> str | None:
    """The directory scratch exports go under (None: the system's temporary directory)."""
    chosen = os.environ.get(ENV)
    if chosen:
        return chosen
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    room = st.f_bavail * st.f_frsize
    if room < 4 * yamlio.LIMITS.repo_bytes or not os.access(shm, os.W_OK | os.X_OK):
        return None
    return str(shm)


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for one export, removed when the ``with`` block ends."""
    return tempfile.TemporaryDirectory(prefix=prefix, dir=scratch_parent())
