"""The rules every fleet tree export meets, one set for both listings.

The controller's export of a commit (:mod:`gitops_gpu.fleet.export`) and ``gitops-gpu check``'s
export of a working tree (:mod:`gitops_gpu.fleet.worktree`) turn their listings into
:class:`Entry` values and hand them here: the path checks (:func:`check_paths`), the per-entry
rules (:func:`select`), the ``spec.base`` check (:func:`check_base`), the GPU Operator chart
check (:func:`check_operator_charts`) and the one way a file is written (:func:`write_file`).
So a submodule, symlink, special file or size gets one answer on both sides.

A fleet repo is untrusted input: a commit may hold symlinks to ``/etc/passwd``, symlink loops,
a symlink ``zz`` next to a tree entry ``zz/pwn.txt`` (an arbitrary file write for a naive
exporter), duplicate entries, ``..`` components or a 300 MiB blob. So the rules:

- refuse trees with duplicate paths, ``.``/``..``/``.git`` components or a path below a symlink
  or file;
- never create a symlink: a symlink the fleet format would read (:func:`fleet_read`) is an
  error, any other is skipped with a note;
- a submodule (a gitlink; in a working tree, a directory holding ``.git``) at ``fleet.yaml`` or
  anywhere under ``nodepools/`` is an error (the controller would silently miss the pool);
  elsewhere it is skipped with a note. A fifo, socket or device (git cannot commit one) is an
  error where the fleet format reads a file, else skipped with a note;
- read only the blobs the fleet format can name (``*.yaml``, ``*.yml``, ``*.json``), each
  within the per-file limit and all within the per-repo limit; other blobs are never read into
  memory (a commit's through one ``git cat-file --batch``), but for the ``spec.base`` file and
  a cluster's local ``gpuOperator`` chart and values (Helm renders the chart from the export:
  each of its files regular, with no symlink, within the same limits);
- write only regular files below ``dest``, created with ``O_EXCL`` and ``O_NOFOLLOW``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import yamlio
from gitops_gpu.fleet.models import REMOTE_CHART
from gitops_gpu.fleet.problems import TREE_CODE, YAML_CODE

READ_SUFFIXES = (".yaml", ".yml", ".json")
SYMLINK, SUBMODULE = "120000", "160000"
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


def decode(path: bytes) -> str:
    try:
        return path.decode("utf-8")
    except UnicodeDecodeError:
        raise TreeError(
            f"path {path!r} is not valid UTF-8",
            file=path.decode("utf-8", "replace"),
            fix="rename the file with a UTF-8 name",
        ) from None


def check_paths(entries: Sequence[Entry]) -> None:
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
    return {SYMLINK: "symlink", SUBMODULE: "submodule"}.get(e.mode, "file")


def fleet_read(path: str) -> bool:
    """Paths the fleet format reads or walks for pools: fleet.yaml, nodepools/ and each entry
    directly in it (a pool folder or a stray file), every YAML/JSON file below it, and the
    shared configs under configs/. (The base file is checked once fleet.yaml is out.)"""
    parts = path.split("/")
    return path == "fleet.yaml" or (
        (parts[0] == "nodepools" and (len(parts) <= 2 or path.endswith(READ_SUFFIXES)))
        or (parts[0] == "configs" and path.endswith(READ_SUFFIXES))
    )


def select(entries: Sequence[Entry], result: Export) -> list[Entry]:
    """The per-entry rules, the same for a commit and a working tree: raise TreeError for an
    entry the controller cannot read where the fleet format reads, note the others skipped,
    and return the regular files to write."""
    limits = yamlio.LIMITS
    wanted: list[Entry] = []
    total = 0
    for e in entries:
        if e.mode == SUBMODULE or e.kind == "commit":
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
            if fleet_read(e.path):
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
        if not e.path.endswith(READ_SUFFIXES) and e.mode != SYMLINK:
            continue  # never read: READMEs, scripts, binaries
        if e.mode == SYMLINK:
            if fleet_read(e.path):
                raise TreeError(
                    "is a symlink; the fleet format reads regular files only",
                    file=e.path,
                    fix=_SYMLINK_FIX,
                )
            result.skip(e.path, "symlink, ignored", _SYMLINK_FIX + " if the fleet needs it")
            continue
        if e.size > limits.file_bytes:
            if fleet_read(e.path):
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


def write_file(dest: Path, rel: str, data: bytes, made: set[Path] | None = None) -> None:
    """``made``: directories already created in this export (a 2,000-pool tree pays two
    syscalls per file otherwise, at ~0.2 ms each on a slow disk)."""
    target = dest.joinpath(*rel.split("/"))
    if made is None or target.parent not in made:
        target.parent.mkdir(parents=True, exist_ok=True)
        if made is not None:
            made.add(target.parent)
    # Parents were just created as real directories; O_NOFOLLOW|O_EXCL refuse anything else.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(target, flags, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def check_base(
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
    if entry is None and above is not None and above.mode in (SYMLINK, SUBMODULE):
        raise TreeError(
            f"spec.base '{base}' is inside the {_what(above)} {above.path}, which the "
            "controller does not read",
            file="fleet.yaml",
            line=line,
            field="spec.base",
            fix=_VENDOR_FIX if above.mode == SUBMODULE else _SYMLINK_FIX,
        )
    if entry is None:
        return
    if entry.mode == SUBMODULE or entry.kind in _SPECIAL:
        what = "git submodule" if entry.mode == SUBMODULE else entry.kind
        raise TreeError(
            f"is a {what} (named by fleet.yaml spec.base); the fleet format reads regular "
            "files only",
            file=entry.path,
            field="spec.base",
            fix="make spec.base a regular file committed in the fleet repo",
        )
    if entry.mode == SYMLINK:
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


_CHART_VENDOR_FIX = (
    "vendor the chart's files into the fleet repo (no submodule): the controller exports the "
    "fleet repo's own tree only"
)


def check_operator_charts(
    entries: Sequence[Entry], dest: Path, write: Callable[[Sequence[Entry]], None]
) -> None:
    """fleet.yaml's spec.clusters[].gpuOperator chart and values: Helm renders the chart from
    the export, so a chart directory is written whole (templates, ``.helmignore``, a ``.tgz``
    in it), a chart or values file even without a YAML suffix. Each entry must be a regular
    file within the limits: Helm follows a symlink, so one anywhere in a chart is an error."""
    fleet = dest / "fleet.yaml"
    if not fleet.is_file():
        return
    try:
        doc = yamlio.load_file(fleet, dest)
    except FleetError:
        return  # the loader reports it with its position
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    clusters = spec.get("clusters") if isinstance(spec, dict) else None
    if not isinstance(clusters, list):
        return
    by_path = {e.path: e for e in entries}
    limits = yamlio.LIMITS
    # What select wrote already counts against the repo limit too.
    total = sum(e.size for e in entries if _selected(e))
    seen: set[tuple[str, str]] = set()
    more: dict[str, Entry] = {}
    for i, cluster in enumerate(clusters):
        release = cluster.get("gpuOperator") if isinstance(cluster, dict) else None
        if not isinstance(release, dict):
            continue
        for key in ("chart", "values"):
            ref = release.get(key)
            if not isinstance(ref, str) or ref.startswith(REMOTE_CHART):
                continue
            rel = PurePosixPath(ref).as_posix()
            if (key, rel) in seen:
                continue  # clusters sharing one chart: checked and written once
            seen.add((key, rel))
            line = doc.where(("spec", "clusters", i, "gpuOperator", key))[0]
            name = f"spec.clusters[{i}].gpuOperator.{key}"
            for e in _chart_entries(rel, key, by_path, entries, line, name):
                _check_chart_entry(e, rel, key, line, name)
                if e.path.endswith(READ_SUFFIXES) or e.path in more:
                    continue  # select wrote it already
                if os.path.lexists(dest.joinpath(*e.path.split("/"))):
                    continue  # the spec.base file, written by check_base
                total += e.size
                if total > limits.repo_bytes:
                    raise TreeError(
                        f"the {key} '{ref}' and the fleet files exceed {limits.repo_bytes} "
                        "bytes together",
                        file="fleet.yaml",
                        line=line,
                        field=name,
                        fix="vendor the chart alone (no tests or docs beside it), or raise "
                        "--max-repo-bytes",
                        code=YAML_CODE,
                    )
                more[e.path] = e
    if more:
        write([e for e in entries if e.path in more])  # in tree order


def _selected(e: Entry) -> bool:
    """The entries :func:`select` writes (it raised for the rest it could not skip)."""
    return (
        e.kind == "blob"
        and e.mode not in (SYMLINK, SUBMODULE)
        and e.path.endswith(READ_SUFFIXES)
        and e.size <= yamlio.LIMITS.file_bytes
    )


def _chart_entries(
    rel: str,
    key: str,
    by_path: dict[str, Entry],
    entries: Sequence[Entry],
    line: int,
    name: str,
) -> list[Entry]:
    """The entries a chart or values path names: the file, or every entry below a chart
    directory; none when it does not exist (preflight reports that)."""
    entry = by_path.get(rel)
    if entry is not None:
        return [entry]
    # Inside a submodule or below a symlink: Helm would read outside the export; name the
    # entry that hides it.
    above = next((by_path[str(p)] for p in PurePosixPath(rel).parents if str(p) in by_path), None)
    if above is not None and above.mode in (SYMLINK, SUBMODULE):
        raise TreeError(
            f"the {key} '{rel}' is inside the {_what(above)} {above.path}, which the "
            "controller does not read",
            file="fleet.yaml",
            line=line,
            field=name,
            fix=_CHART_VENDOR_FIX if above.mode == SUBMODULE else _SYMLINK_FIX,
        )
    if key != "chart" or rel == ".":
        return []  # a values directory: Helm reports it
    prefix = rel + "/"
    return [e for e in entries if e.path.startswith(prefix)]


def _check_chart_entry(e: Entry, rel: str, key: str, line: int, name: str) -> None:
    what = f"the {key} {e.path}" if e.path == rel else f"{e.path} in the chart"

    def refuse(message: str, fix: str, code: str = TREE_CODE) -> TreeError:
        return TreeError(
            f"{what} {message}", file="fleet.yaml", line=line, field=name, fix=fix, code=code
        )

    if e.mode == SUBMODULE or e.kind == "commit":
        raise refuse(
            "is a git submodule; the controller exports the fleet repo's own tree, without "
            "the submodule's files",
            _CHART_VENDOR_FIX,
        )
    if e.kind != "blob":
        raise refuse(
            f"is a {e.kind}, not a regular file; git cannot commit it",
            "replace it with a regular file",
        )
    if e.mode == SYMLINK:
        raise refuse("is a symlink; Helm would follow it out of the fleet repo", _SYMLINK_FIX)
    if e.size > yamlio.LIMITS.file_bytes:
        raise refuse(
            f"is {e.size} bytes, over the {yamlio.LIMITS.file_bytes} byte limit",
            "trim the chart (a GPU Operator chart's files are small), or raise --max-file-bytes",
            YAML_CODE,
        )
