"""Write one fleet tree's files into a directory, safely, whatever the tree holds.

Two listings, one set of rules (:mod:`gitops_gpu.fleet.tree_rules`). The controller lists a
commit (``git ls-tree``: :func:`export_commit`, here); ``gitops-gpu check`` lists the working
tree with ``lstat`` (:func:`export_worktree`, in :mod:`gitops_gpu.fleet.worktree`), or exports
HEAD exactly like the controller when the working tree is a clean checkout of it
(:func:`export_tree`). Both hand their entries to the same rules and the loader then reads only
the written directory, so a submodule, symlink, special file or size gets one answer on both
sides: ``check`` never reads through a symlink, into a submodule or a file git would not commit.

This module owns the commit exporter: a commit's blobs are read through one
``git cat-file --batch``, and only those the rules select. It also re-exports the rules' types
(:class:`TreeError`, :class:`Entry`, :class:`Skipped`, :class:`Export`, ``READ_SUFFIXES``) and
:func:`export_worktree`, so callers import one module.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path

from gitops_gpu.errors import SourceError
from gitops_gpu.fleet.tree_rules import (
    READ_SUFFIXES,
    Entry,
    Export,
    Skipped,
    TreeError,
    check_base,
    check_operator_charts,
    check_paths,
    decode,
    select,
    write_file,
)
from gitops_gpu.fleet.worktree import clean_checkout, export_worktree

__all__ = [
    "READ_SUFFIXES",
    "Entry",
    "Export",
    "Skipped",
    "TreeError",
    "export_commit",
    "export_tree",
    "export_worktree",
]

log = logging.getLogger(__name__)


def export_commit(git_dir: Path, rev: str, dest: Path, sub: str = "") -> Export:
    """Write the fleet files of ``rev`` (below ``sub`` of the repo) under ``dest``.

    Raises TreeError for a tree that cannot be exported safely or that exceeds the limits, and
    SourceError when git itself fails (an unknown revision, a broken repository).
    """
    sha = _git(git_dir, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    treeish = f"{sha}:{sub}" if sub not in ("", ".") else sha
    try:
        listing = git_bytes(git_dir, "ls-tree", "-r", "-l", "-z", "--full-tree", treeish)
    except SourceError:
        if sub in ("", "."):
            raise
        listing = b""  # the fleet directory did not exist at rev: an empty repo
    entries = _parse(listing)
    check_paths(entries)
    result = Export(dest, sha)
    wanted = select(entries, result)
    dest.mkdir(parents=True, exist_ok=True)
    _write(git_dir, wanted, dest)
    check_base(entries, dest, lambda more: _write(git_dir, more, dest))
    check_operator_charts(entries, dest, lambda more: _write(git_dir, more, dest))
    return result


def export_tree(path: Path, dest: Path) -> Export:
    """What ``check PATH`` judges: HEAD's tree through :func:`export_commit` (the controller's
    own code path) when ``path`` is a clean checkout of a directory committed at HEAD, else the
    working tree through :func:`export_worktree`."""
    committed = clean_checkout(path)
    if committed is None:
        return export_worktree(path, dest)
    git_dir, sha, sub = committed
    return export_commit(git_dir, sha, dest, sub)


def _parse(listing: bytes) -> list[Entry]:
    out = []
    for raw in listing.split(b"\0"):
        if not raw:
            continue
        meta, _, path = raw.partition(b"\t")
        mode, kind, sha, size = meta.decode().split(None, 3)
        out.append(Entry(mode, kind, sha, int(size) if size.strip() != "-" else 0, decode(path)))
    return out


def _write(git_dir: Path, wanted: Sequence[Entry], dest: Path) -> None:
    if not wanted:
        return
    proc = subprocess.Popen(
        ["git", "cat-file", "--batch"],
        cwd=git_dir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        # One request per entry, answered in order; writing all first could fill both pipes,
        # so each object is read before the next is asked for.
        made: set[Path] = set()
        for e in wanted:
            proc.stdin.write(f"{e.sha}\n".encode())
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3:
                raise SourceError(f"git cat-file could not read {e.path}", fix="run git fsck")
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)  # the newline after each object
            write_file(dest, e.path, data, made)
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def git_bytes(git_dir: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", *args], cwd=git_dir, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SourceError(
            f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()[:300]}",
            fix="check that the revision exists in the repository",
        )
    return proc.stdout


def _git(git_dir: Path, *args: str) -> str:
    try:
        return git_bytes(git_dir, *args).decode()
    except SourceError:
        raise SourceError(
            f"unknown revision {args[-1].split('^')[0]!r}",
            fix="pass a commit, tag or branch that exists in the fleet repo",
        ) from None
