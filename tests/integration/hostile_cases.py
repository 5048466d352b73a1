"""The regression corpus of hostile commits (issue: "No input stops the controller").

Each case edits a copy of fleet-repo-example the way an attacker's commit would. ``message`` is
what `gitops-gpu check` must say (None: the commit is harmless and passes); every case must
leave no traceback, bounded memory and nothing applied from a failing commit.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CANARY = "nodepools/canary"


@dataclass(frozen=True)
class Case:
    name: str
    edit: Callable[[Path], None]
    message: str | None  # a fragment of the finding; None: the commit passes


def _replace(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        path = work / rel
        text = path.read_text()
        assert old in text, f"{old!r} not in {rel}"
        path.write_text(text.replace(old, new, 1))

    return edit


def _write(rel: str, text: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        (work / rel).write_text(text)

    return edit


def _symlink(rel: str, target: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        path = work / rel
        if path.exists() or path.is_symlink():
            path.unlink()
        os.symlink(target, path)

    return edit


def _big_blob(work: Path) -> None:
    with (work / "images.bin").open("wb") as fh:
        fh.truncate(300 << 20)  # 300 MiB of zeros: cheap to make, big to archive


_POLICY_HEAD = "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nspec:\n  driver:\n"
CASES = (
    Case("symlink-to-etc-passwd", _symlink(f"{CANARY}/notes.txt", "/etc/passwd"), None),
    # check judges a fleet file that is a symlink as the controller's export does: refused as a
    # symlink before anything reads where it points (fleet/export.py).
    Case(
        "fleet-file-symlink-to-etc-passwd",
        _symlink(f"{CANARY}/clusterpolicy.yaml", "/etc/passwd"),
        "is a symlink",
    ),
    Case(
        "symlink-loop",
        _symlink(f"{CANARY}/clusterpolicy.yaml", "clusterpolicy.yaml"),
        "is a symlink",
    ),
    Case(
        "max-unavailable-newline",
        _replace(f"{CANARY}/pool.yaml", "maxUnavailable: 1", 'maxUnavailable: "25%\\n"'),
        "percentage",
    ),
    Case(
        "deep-nesting",
        _write(f"{CANARY}/clusterpolicy.yaml", _POLICY_HEAD + "    x: " + "[" * 10_000),
        "nesting deeper",
    ),
    Case(
        "huge-integer",
        _write(f"{CANARY}/clusterpolicy.yaml", _POLICY_HEAD + "    x: " + "9" * 5_000 + "\n"),
        "too large",
    ),
    Case(
        "300k-list-items",
        _write(
            f"{CANARY}/clusterpolicy.yaml",
            _POLICY_HEAD + "    x: [" + "1," * 300_000 + "1]\n",
        ),
        "values in one document",
    ),
    Case("soak-nan", _replace("fleet.yaml", "soak: 15m", "soak: .nan"), "finite"),
    Case("timeout-nan", _replace("fleet.yaml", "timeout: 1h", "timeout: .nan"), "finite"),
    Case("timeout-inf", _replace("fleet.yaml", "timeout: 1h", "timeout: .inf"), "finite"),
    Case("timeout-huge", _replace("fleet.yaml", "timeout: 1h", "timeout: 99999999999d"), "days"),
    Case(
        "max-unavailable-0",
        _replace(f"{CANARY}/pool.yaml", "maxUnavailable: 1", "maxUnavailable: 0"),
        "never let a node change",
    ),
    Case(
        "max-unavailable-0%",
        _replace(f"{CANARY}/pool.yaml", "maxUnavailable: 1", 'maxUnavailable: "0%"'),
        "between 1% and 100%",
    ),
    Case(
        "max-unavailable-150%",
        _replace(f"{CANARY}/pool.yaml", "maxUnavailable: 1", 'maxUnavailable: "150%"'),
        "between 1% and 100%",
    ),
    Case(
        "label-value-newline",
        _replace(f"{CANARY}/pool.yaml", "gpu-canary", '"gpu-canary\\n"'),
        "must be at most 63",
    ),
    Case("300MiB-blob", _big_blob, None),
)


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, input=stdin)
    return out.stdout.decode().strip()


def crafted_escape_commit(work: Path, outside: Path) -> str:
    """A commit whose tree holds a symlink ``zz -> outside`` and an entry ``zz/pwn.txt``: a
    naive exporter writes ``outside/pwn.txt``. Made with git plumbing; git itself allows it."""
    link = git(work, "hash-object", "-w", "--stdin", stdin=str(outside).encode())
    pwn = git(work, "hash-object", "-w", "--stdin", stdin=b"pwned\n")
    sub = git(work, "mktree", stdin=f"100644 blob {pwn}\tpwn.txt\n".encode())
    head_tree = git(work, "rev-parse", "HEAD^{tree}")
    entries = git(work, "ls-tree", head_tree)
    listing = f"{entries}\n120000 blob {link}\tzz\n040000 tree {sub}\tzz\n"
    tree = git(work, "mktree", stdin=listing.encode())
    return git(work, "commit-tree", tree, "-p", "HEAD", "-m", "crafted")
