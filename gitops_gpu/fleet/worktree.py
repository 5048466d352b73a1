"""The working-tree exporter: what ``gitops-gpu check`` judges when it cannot judge a commit.

:func:`export_worktree` lists the working tree with ``lstat``, in ``git ls-tree -r`` order, as
the entries a commit of it would hold, and hands them to the same rules as the controller's
export of a commit (:mod:`gitops_gpu.fleet.tree_rules`). It never reads through a symlink, into
a submodule or a file git would not commit: inside git, ignored files are left out and an index
gitlink counts as a submodule even when not checked out. :func:`clean_checkout` says when the
working tree is a clean checkout of HEAD, so :func:`gitops_gpu.fleet.export.export_tree`
exports the commit instead.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from gitops_gpu.fleet import yamlio
from gitops_gpu.fleet.problems import YAML_CODE
from gitops_gpu.fleet.tree_rules import (
    SUBMODULE,
    SYMLINK,
    Entry,
    Export,
    TreeError,
    check_base,
    check_operator_charts,
    check_paths,
    decode,
    fleet_read,
    select,
    write_file,
)


def export_worktree(root: Path, dest: Path) -> Export:
    """Write the fleet files of the working tree at ``root`` under ``dest``, by the rules a
    commit of it would meet in the controller. Inside git, what git would not commit (ignored
    files) is left out, and an index gitlink counts as a submodule even when not checked out.

    Raises TreeError as :func:`gitops_gpu.fleet.export.export_commit` does.
    """
    entries = list(_scan(root))
    check_paths(entries)
    result = Export(dest, "")
    wanted = select(entries, result)
    dest.mkdir(parents=True, exist_ok=True)
    _copy(root, wanted, dest)
    check_base(entries, dest, lambda more: _copy(root, more, dest))
    check_operator_charts(entries, dest, lambda more: _copy(root, more, dest))
    return result


def _scan(root: Path) -> Iterator[Entry]:
    """The working tree as tree entries, in ``git ls-tree -r`` order (so the first problem
    found is the controller's first too). Never follows a symlink, never enters a submodule."""
    ignored, gitlinks = _git_view(root)
    stack = [iter(_children(root, ""))]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        rel, path, st = item
        if rel in ignored or (stat.S_ISDIR(st.st_mode) and rel + "/" in ignored):
            continue  # git would not commit it, so the controller never sees it
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            decode(os.fsencode(rel))  # raises: the controller refuses the same name
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            if rel in gitlinks or os.path.lexists(os.path.join(path, ".git")):
                yield Entry(SUBMODULE, "commit", "", 0, rel)  # as `git add` records it
            else:
                stack.append(iter(_children(root, rel)))
        elif stat.S_ISLNK(mode):
            yield Entry(SYMLINK, "blob", "", st.st_size, rel)
        elif stat.S_ISREG(mode):
            exe = "100755" if mode & stat.S_IXUSR else "100644"
            yield Entry(exe, "blob", "", st.st_size, rel)
        else:
            kind = "fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
            yield Entry("", kind, "", 0, rel)


def _children(root: Path, rel: str) -> list[tuple[str, str, os.stat_result]]:
    folder = os.path.join(root, *rel.split("/")) if rel else str(root)
    try:
        with os.scandir(folder) as it:
            items = [
                (f"{rel}/{d.name}" if rel else d.name, d.path, d.stat(follow_symlinks=False))
                for d in it
                if rel or d.name != ".git"  # the repository's own metadata, not in its tree
            ]
    except OSError as exc:
        if rel and not fleet_read(rel):
            return []  # git cannot read it either, so no commit holds it
        raise TreeError(
            f"cannot list the directory: {exc.strerror}",
            file=rel or ".",
            fix="make the directory readable",
            code=YAML_CODE,
        ) from None
    # git sorts a tree's entries by name, a directory's as if it ended in "/"
    return sorted(
        items,
        key=lambda i: (
            os.fsencode(i[0].rsplit("/", 1)[-1]) + (b"/" if stat.S_ISDIR(i[2].st_mode) else b"")
        ),
    )


def _copy(root: Path, wanted: Sequence[Entry], dest: Path) -> None:
    limit = yamlio.LIMITS.file_bytes
    made: set[Path] = set()
    for e in wanted:
        path = root.joinpath(*e.path.split("/"))
        try:
            # O_NOFOLLOW: a file swapped for a symlink since the scan is refused, not followed;
            # O_NONBLOCK: nor does a fifo swapped in block the read.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise TreeError(
                f"cannot read: {exc.strerror}",
                file=e.path,
                fix="check the file exists, is readable and is not a symlink",
                code=YAML_CODE,
            ) from None
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TreeError("is no longer a regular file", file=e.path, fix="run check again")
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise TreeError(
                f"file is over the {limit} byte limit",
                file=e.path,
                fix="split or trim this file (or raise --max-file-bytes)",
                code=YAML_CODE,
            )
        write_file(dest, e.path, data, made)


def _git_view(root: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(ignored paths, directories with a trailing "/"; gitlinks in the index), relative to
    ``root``; nothing when ``root`` is not in a git work tree or is itself ignored (then no
    commit holds these files: they are judged as they are)."""
    none: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    if _git_out(root, "rev-parse", "--is-inside-work-tree") != b"true\n":
        return none
    if _git_out(root, "check-ignore", "-q", ".") is not None:
        return none
    ignored = _git_out(
        root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"
    )
    staged = _git_out(root, "ls-files", "-z", "--stage")
    if ignored is None or staged is None:
        return none
    gitlinks = {
        os.fsdecode(line.partition(b"\t")[2])
        for line in staged.split(b"\0")
        if line.startswith(SUBMODULE.encode() + b" ")
    }
    return frozenset(os.fsdecode(p) for p in ignored.split(b"\0") if p), frozenset(gitlinks)


def clean_checkout(path: Path) -> tuple[Path, str, str] | None:
    """(git dir, HEAD, the directory below the top) when ``path`` is a directory committed at
    HEAD and nothing under it differs from HEAD (untracked files count, ignored ones do not)."""
    if _git_out(path, "rev-parse", "--is-inside-work-tree") != b"true\n":
        return None
    git_dir = _git_out(path, "rev-parse", "--absolute-git-dir")
    prefix = _git_out(path, "rev-parse", "--show-prefix")
    head = _git_out(path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if git_dir is None or prefix is None or head is None:
        return None  # no commit yet
    sha, sub = head.decode().strip(), os.fsdecode(prefix.rstrip(b"\n")).rstrip("/")
    if _git_out(path, "cat-file", "-t", f"{sha}:{sub}") != b"tree\n":
        return None  # not committed (untracked or ignored, e.g. a cache inside a checkout)
    status = _git_out(path, "status", "--porcelain", "-z", "--untracked-files=all", "--", ".")
    if status is None or status:
        return None
    return Path(os.fsdecode(git_dir.rstrip(b"\n"))), sha, sub


def _git_out(cwd: Path, *args: str) -> bytes | None:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            check=False,
            env={**os.environ, "GIT_LITERAL_PATHSPECS": "1"},
        )
    except OSError:  # no git at all: a plain directory
        return None
    return proc.stdout if proc.returncode == 0 else None
