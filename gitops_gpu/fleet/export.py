"""Write one fleet tree's files into a directory, safely, whatever the tree holds.

Two listings, one set of rules. The controller lists a commit (``git ls-tree``:
:func:`export_commit`); ``gitops-gpu check`` lists the working tree with ``lstat``
(:func:`export_worktree`), or exports HEAD exactly like the controller when the working tree is
a clean checkout of it (:func:`export_tree`). Both hand their entries to the same rules and the
loader then reads only the written directory, so a submodule, symlink, special file or size
gets one answer on both sides: ``check`` never reads through a symlink, into a submodule or a
file git would not commit.

A fleet repo is untrusted input: a commit may hold symlinks to ``/etc/passwd``, symlink loops,
a symlink ``zz`` next to a tree entry ``zz/pwn.txt`` (an arbitrary file write for a naive
exporter), duplicate entries, ``..`` components or a 300 MiB blob. So the rules:

- refuse trees with duplicate paths, ``.``/``..``/``.git`` components or a path below a symlink
  or file;
- never create a symlink: a symlink the fleet format would read (:func:`_fleet_read`) is an
  error, any other is skipped with a note;
- a submodule (a gitlink; in a working tree, a directory holding ``.git``) at ``fleet.yaml`` or
  anywhere under ``nodepools/`` is an error (the controller would silently miss the pool);
  elsewhere it is skipped with a note. A fifo, socket or device (git cannot commit one) is an
  error where the fleet format reads a file, else skipped with a note;
- read only the blobs the fleet format can name (``*.yaml``, ``*.yml``, ``*.json``), each
  within the per-file limit and all within the per-repo limit; other blobs are never read into
  memory (a commit's through one ``git cat-file --batch``);
- write only regular files below ``dest``, created with ``O_EXCL`` and ``O_NOFOLLOW``.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gitops_gpu.errors import FleetError, SourceError
from gitops_gpu.fleet import yamlio
from gitops_gpu.fleet.problems import TREE_CODE, YAML_CODE

log = logging.getLogger(__name__)
READ_SUFFIXES = (".yaml", ".yml", ".json")
_SYMLINK, _SUBMODULE = "120000", "160000"
# Entry kinds only a working tree holds; git cannot commit them.
_SPECIAL = ("fifo", "socket", "device")
_VENDOR_FIX = (
    "vendor the pool's files into the fleet repo; the controller reads the fleet repo's own "
    "tree only"
)
_SYMLINK_FIX = (
    "replace the symlink with the file (or folder) it points to: the controller never follows "
    "symlinks"
)


class TreeError(FleetError):
    """The tree cannot be exported safely: its preflight fails, nothing is applied.

    ``code`` is the preflight finding code (GG005, or GG001 for a size or read problem)."""

    def __init__(
        self,
        message: str,
        *,
        file: str = "",
        line: int = 0,
        field: str = "",
        fix: str = "",
        code: str = TREE_CODE,
    ) -> None:
        super().__init__(message, file=file, line=line, field=field, fix=fix)
        self.message, self.code = message, code


@dataclass(frozen=True)
class Entry:
    mode: str  # git's; "" for a special file
    kind: str  # blob | commit (a submodule) | fifo | socket | device (working tree only)
    sha: str  # "" in a working tree
    size: int
    path: str


@dataclass(frozen=True)
class Skipped:
    """An entry left out of the export, as a note (not an error) with what to do about it."""

    file: str
    message: str
    fix: str


@dataclass
class Export:
    root: Path
    sha: str  # "" for a working tree
    notes: list[str] = field(default_factory=list)  # skipped entries, said once in the log
    skipped: list[Skipped] = field(default_factory=list)  # the same, for findings

    def skip(self, file: str, message: str, fix: str) -> None:
        self.skipped.append(Skipped(file, message, fix))
        self.notes.append(f"{file}: {message}")


def export_commit(git_dir: Path, rev: str, dest: Path, sub: str = "") -> Export:
    """Write the fleet files of ``rev`` (below ``sub`` of the repo) under ``dest``.

    Raises TreeError for a tree that cannot be exported safely or that exceeds the limits, and
    SourceError when git itself fails (an unknown revision, a broken repository).
    """
    sha = _git(git_dir, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    treeish = f"{sha}:{sub}" if sub not in ("", ".") else sha
    try:
        listing = _git_bytes(git_dir, "ls-tree", "-r", "-l", "-z", "--full-tree", treeish)
    except SourceError:
        if sub in ("", "."):
            raise
        listing = b""  # the fleet directory did not exist at rev: an empty repo
    entries = _parse(listing)
    _check_paths(entries)
    result = Export(dest, sha)
    wanted = _select(entries, result)
    dest.mkdir(parents=True, exist_ok=True)
    _write(git_dir, wanted, dest)
    _check_base(entries, dest, lambda more: _write(git_dir, more, dest))
    return result


def export_worktree(root: Path, dest: Path) -> Export:
    """Write the fleet files of the working tree at ``root`` under ``dest``, by the rules a
    commit of it would meet in the controller. Inside git, what git would not commit (ignored
    files) is left out, and an index gitlink counts as a submodule even when not checked out.

    Raises TreeError as :func:`export_commit` does.
    """
    entries = list(_scan(root))
    _check_paths(entries)
    result = Export(dest, "")
    wanted = _select(entries, result)
    dest.mkdir(parents=True, exist_ok=True)
    _copy(root, wanted, dest)
    _check_base(entries, dest, lambda more: _copy(root, more, dest))
    return result


def export_tree(path: Path, dest: Path) -> Export:
    """What ``check PATH`` judges: HEAD's tree through :func:`export_commit` (the controller's
    own code path) when ``path`` is a clean checkout of a directory committed at HEAD, else the
    working tree through :func:`export_worktree`."""
    committed = _clean_checkout(path)
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
        out.append(Entry(mode, kind, sha, int(size) if size.strip() != "-" else 0, _decode(path)))
    return out


def _decode(path: bytes) -> str:
    try:
        return path.decode("utf-8")
    except UnicodeDecodeError:
        raise TreeError(
            f"path {path!r} is not valid UTF-8",
            file=path.decode("utf-8", "replace"),
            fix="rename the file with a UTF-8 name",
        ) from None


def _check_paths(entries: Sequence[Entry]) -> None:
    seen: dict[str, Entry] = {}
    for e in entries:
        parts = e.path.split("/")
        if any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
            raise TreeError(
                "the tree holds an unsafe path component ('', '.', '..' or '.git')",
                file=e.path,
                fix="remove the entry; git itself refuses such trees (git fsck)",
            )
        if e.path in seen:
            raise TreeError(
                "the tree holds this path twice",
                file=e.path,
                fix="rewrite the commit with one entry per path (git fsck reports it)",
            )
        seen[e.path] = e
    for e in entries:
        parent = PurePosixPath(e.path).parent
        while str(parent) != ".":
            if str(parent) in seen:
                raise TreeError(
                    f"the tree holds a path below the {_what(seen[str(parent)])} {parent}",
                    file=e.path,
                    fix="remove the entry; a crafted tree like this could write outside "
                    "the checkout",
                )
            parent = parent.parent


def _what(e: Entry) -> str:
    return {_SYMLINK: "symlink", _SUBMODULE: "submodule"}.get(e.mode, "file")


def _fleet_read(path: str) -> bool:
    """Paths the fleet format reads or walks for pools: fleet.yaml, nodepools/ and each entry
    directly in it (a pool folder or a stray file), and every YAML/JSON file below it. (The
    base file is checked once fleet.yaml is out.)"""
    parts = path.split("/")
    return path == "fleet.yaml" or (
        parts[0] == "nodepools" and (len(parts) <= 2 or path.endswith(READ_SUFFIXES))
    )


def _select(entries: Sequence[Entry], result: Export) -> list[Entry]:
    """The per-entry rules, the same for a commit and a working tree: raise TreeError for an
    entry the controller cannot read where the fleet format reads, note the others skipped,
    and return the regular files to write."""
    limits = yamlio.LIMITS
    wanted: list[Entry] = []
    total = 0
    for e in entries:
        if e.mode == _SUBMODULE or e.kind == "commit":
            # Any submodule under nodepools/ is meant to bring pool files; the controller
            # would silently see none (a green check, then a red main).
            if e.path == "fleet.yaml" or e.path.split("/")[0] == "nodepools":
                raise TreeError(
                    "is a git submodule; the controller exports the fleet repo's own tree, "
                    "without the submodule's files",
                    file=e.path,
                    fix=_VENDOR_FIX,
                )
            result.skip(e.path, "submodule, ignored", _VENDOR_FIX + " if the fleet needs them")
            continue
        if e.kind in _SPECIAL:
            if _fleet_read(e.path):
                raise TreeError(
                    f"is a {e.kind}, not a regular file; git cannot commit it, so the "
                    "controller would not see this file",
                    file=e.path,
                    fix="replace it with a regular file",
                )
            result.skip(e.path, f"{e.kind}, ignored (git cannot commit it)", "nothing to do")
            continue
        if e.kind != "blob":
            result.skip(e.path, f"{e.kind} entry, ignored", "nothing to do")
            continue
        if not e.path.endswith(READ_SUFFIXES) and e.mode != _SYMLINK:
            continue  # never read: READMEs, scripts, binaries
        if e.mode == _SYMLINK:
            if _fleet_read(e.path):
                raise TreeError(
                    "is a symlink; the fleet format reads regular files only",
                    file=e.path,
                    fix=_SYMLINK_FIX,
                )
            result.skip(e.path, "symlink, ignored", _SYMLINK_FIX + " if the fleet needs it")
            continue
        if e.size > limits.file_bytes:
            if _fleet_read(e.path):
                raise TreeError(
                    f"file is {e.size} bytes, over the {limits.file_bytes} byte limit",
                    file=e.path,
                    fix="fleet files are small hand-written YAML: split or trim this file "
                    "(or raise --max-file-bytes)",
                    code=YAML_CODE,
                )
            result.skip(
                e.path,
                f"{e.size} bytes, over the limit, not read",
                "nothing to do unless the fleet reads it (then raise --max-file-bytes)",
            )
            continue
        total += e.size
        if total > limits.repo_bytes:
            raise TreeError(
                f"the fleet files of this tree exceed {limits.repo_bytes} bytes together",
                file=e.path,
                fix="keep the fleet repo's YAML small, or raise --max-repo-bytes",
                code=YAML_CODE,
            )
        wanted.append(e)
    return wanted


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
        for e in wanted:
            proc.stdin.write(f"{e.sha}\n".encode())
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3:
                raise SourceError(f"git cat-file could not read {e.path}", fix="run git fsck")
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)  # the newline after each object
            _write_file(dest, e.path, data)
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def _write_file(dest: Path, rel: str, data: bytes) -> None:
    target = dest.joinpath(*rel.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    # Parents were just created as real directories; O_NOFOLLOW|O_EXCL refuse anything else.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(target, flags, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _check_base(
    entries: Sequence[Entry], dest: Path, write: Callable[[Sequence[Entry]], None]
) -> None:
    """fleet.yaml's spec.base is read too: a regular file within the limit, written out even
    when its name has no YAML suffix."""
    fleet = dest / "fleet.yaml"
    if not fleet.is_file():
        return
    try:
        doc = yamlio.load_file(fleet, dest)
    except FleetError:
        return  # the loader reports it with its position
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    base = spec.get("base") if isinstance(spec, dict) else None
    if not isinstance(base, str):
        return
    rel = PurePosixPath(base).as_posix()
    by_path = {e.path: e for e in entries}
    entry = by_path.get(rel)
    line = doc.where(("spec", "base"))[0]
    # The base file inside a submodule or below a symlink: the loader would only say
    # "does not exist"; name the entry that hides it.
    above = next((by_path[str(p)] for p in PurePosixPath(rel).parents if str(p) in by_path), None)
    if entry is None and above is not None and above.mode in (_SYMLINK, _SUBMODULE):
        raise TreeError(
            f"spec.base '{base}' is inside the {_what(above)} {above.path}, which the "
            "controller does not read",
            file="fleet.yaml",
            line=line,
            field="spec.base",
            fix=_VENDOR_FIX if above.mode == _SUBMODULE else _SYMLINK_FIX,
        )
    if entry is None:
        return
    if entry.mode == _SUBMODULE or entry.kind in _SPECIAL:
        what = "git submodule" if entry.mode == _SUBMODULE else entry.kind
        raise TreeError(
            f"is a {what} (named by fleet.yaml spec.base); the fleet format reads regular "
            "files only",
            file=entry.path,
            field="spec.base",
            fix="make spec.base a regular file committed in the fleet repo",
        )
    if entry.mode == _SYMLINK:
        raise TreeError(
            "is a symlink (named by fleet.yaml spec.base); the fleet format reads regular "
            "files only",
            file=entry.path,
            field="spec.base",
            fix="replace the symlink with the file's content",
        )
    if entry.size > yamlio.LIMITS.file_bytes:
        raise TreeError(
            f"file is {entry.size} bytes, over the {yamlio.LIMITS.file_bytes} byte limit",
            file=entry.path,
            field="spec.base",
            fix="split or trim this file (or raise --max-file-bytes)",
            code=YAML_CODE,
        )
    if not entry.path.endswith(READ_SUFFIXES):
        write([entry])


# -- the working tree ----------------------------------------------------------------------


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
            _decode(os.fsencode(rel))  # raises: the controller refuses the same name
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            if rel in gitlinks or os.path.lexists(os.path.join(path, ".git")):
                yield Entry(_SUBMODULE, "commit", "", 0, rel)  # as `git add` records it
            else:
                stack.append(iter(_children(root, rel)))
        elif stat.S_ISLNK(mode):
            yield Entry(_SYMLINK, "blob", "", st.st_size, rel)
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
        if rel and not _fleet_read(rel):
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
        _write_file(dest, e.path, data)


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
        if line.startswith(_SUBMODULE.encode() + b" ")
    }
    return frozenset(os.fsdecode(p) for p in ignored.split(b"\0") if p), frozenset(gitlinks)


def _clean_checkout(path: Path) -> tuple[Path, str, str] | None:
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


def _git_bytes(git_dir: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", *args], cwd=git_dir, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SourceError(
            f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()[:300]}",
            fix="check that the revision exists in the repository",
        )
    return proc.stdout


def _git(git_dir: Path, *args: str) -> str:
    try:
        return _git_bytes(git_dir, *args).decode()
    except SourceError:
        raise SourceError(
            f"unknown revision {args[-1].split('^')[0]!r}",
            fix="pass a commit, tag or branch that exists in the fleet repo",
        ) from None
