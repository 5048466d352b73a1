"""Write one commit's fleet files out of git into a directory, safely, whatever the tree holds.

A fleet repo is untrusted input: a commit may hold symlinks to ``/etc/passwd``, symlink loops,
a symlink ``zz`` next to a tree entry ``zz/pwn.txt`` (an arbitrary file write for a naive
exporter), duplicate entries, ``..`` components or a 300 MiB blob. So this exporter:

- lists the tree (``git ls-tree -r -l``: paths and sizes, no contents) and refuses trees with
  duplicate paths, ``.``/``..``/``.git`` components or a path below a symlink or file;
- never creates a symlink: a symlink the fleet format would read is an error, any other is
  skipped with a note;
- reads only the blobs the fleet format can name (``*.yaml``, ``*.yml``, ``*.json``), each
  within the per-file limit and all within the per-repo limit, through one
  ``git cat-file --batch``; other blobs are never read into memory;
- writes only regular files below ``dest``, created with ``O_EXCL`` and ``O_NOFOLLOW``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gitops_gpu.errors import FleetError, SourceError
from gitops_gpu.fleet import yamlio

log = logging.getLogger(__name__)
READ_SUFFIXES = (".yaml", ".yml", ".json")
_SYMLINK, _SUBMODULE = "120000", "160000"


class TreeError(FleetError):
    """The commit's tree cannot be exported safely: its preflight fails, nothing is applied."""


@dataclass(frozen=True)
class Entry:
    mode: str
    kind: str  # blob | commit (a submodule)
    sha: str
    size: int
    path: str


@dataclass
class Export:
    root: Path
    sha: str
    notes: list[str] = field(default_factory=list)  # skipped entries, said once in the log


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
    _check_base(git_dir, entries, dest)
    return result


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
                "the commit's tree holds an unsafe path component ('', '.', '..' or '.git')",
                file=e.path,
                fix="remove the entry; git itself refuses such trees (git fsck)",
            )
        if e.path in seen:
            raise TreeError(
                "the commit's tree holds this path twice",
                file=e.path,
                fix="rewrite the commit with one entry per path (git fsck reports it)",
            )
        seen[e.path] = e
    for e in entries:
        parent = PurePosixPath(e.path).parent
        while str(parent) != ".":
            if str(parent) in seen:
                raise TreeError(
                    f"the commit's tree holds a path below the {_what(seen[str(parent)])} {parent}",
                    file=e.path,
                    fix="remove the entry; a crafted tree like this could write outside "
                    "the checkout",
                )
            parent = parent.parent


def _what(e: Entry) -> str:
    return "symlink" if e.mode == _SYMLINK else "file"


def _fleet_read(path: str) -> bool:
    """Files the fleet format reads by name (the base file is checked once fleet.yaml is out)."""
    parts = path.split("/")
    return path == "fleet.yaml" or (parts[0] == "nodepools" and path.endswith(READ_SUFFIXES))


def _select(entries: Sequence[Entry], result: Export) -> list[Entry]:
    limits = yamlio.LIMITS
    wanted: list[Entry] = []
    total = 0
    for e in entries:
        if e.mode == _SUBMODULE or e.kind != "blob":
            result.notes.append(f"{e.path}: submodule, ignored")
            continue
        if not e.path.endswith(READ_SUFFIXES) and e.mode != _SYMLINK:
            continue  # never read: READMEs, scripts, binaries
        if e.mode == _SYMLINK:
            if _fleet_read(e.path):
                raise TreeError(
                    "is a symlink; the fleet format reads regular files only",
                    file=e.path,
                    fix="replace the symlink with the file's content",
                )
            result.notes.append(f"{e.path}: symlink, ignored")
            continue
        if e.size > limits.file_bytes:
            if _fleet_read(e.path):
                raise TreeError(
                    f"file is {e.size} bytes, over the {limits.file_bytes} byte limit",
                    file=e.path,
                    fix="fleet files are small hand-written YAML: split or trim this file "
                    "(or raise --max-file-bytes)",
                )
            result.notes.append(f"{e.path}: {e.size} bytes, over the limit, not read")
            continue
        total += e.size
        if total > limits.repo_bytes:
            raise TreeError(
                f"the fleet files of this commit exceed {limits.repo_bytes} bytes together",
                file=e.path,
                fix="keep the fleet repo's YAML small, or raise --max-repo-bytes",
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


def _check_base(git_dir: Path, entries: Sequence[Entry], dest: Path) -> None:
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
    entry = next((e for e in entries if e.path == PurePosixPath(base).as_posix()), None)
    if entry is not None and entry.mode == _SYMLINK:
        raise TreeError(
            "is a symlink (named by fleet.yaml spec.base); the fleet format reads regular "
            "files only",
            file=entry.path,
            fix="replace the symlink with the file's content",
        )
    if entry is not None and entry.size > yamlio.LIMITS.file_bytes:
        raise TreeError(
            f"file is {entry.size} bytes, over the {yamlio.LIMITS.file_bytes} byte limit",
            file=entry.path,
            fix="split or trim this file (or raise --max-file-bytes)",
        )
    if entry is not None and not entry.path.endswith(READ_SUFFIXES):
        _write(git_dir, [entry], dest)


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
