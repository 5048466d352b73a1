"""Every command's exit codes, in one table (README "Exit codes" lists the same)."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    # check found errors; apply refused (preflight, an untrusted commit, conflicts); a rollout
    # verb could not act; nodes are not healthy; a controller pass failed
    FAILED = 1
    USAGE = 2  # bad arguments or unreadable input; an API, git or I/O error
    PENDING = 3  # plan: the cluster differs from the commit
    INTERRUPTED = 130  # Ctrl-C
