"""`gitops-gpu check` and the controller give one answer for the same tree.

Each case is a real git repo (git CLI, real `git submodule add` of a local repo) holding one
special entry. check runs on the checkout, clean (judged as its commit) and dirty (an untracked
note beside it: judged through lstat); the controller's side exports the pushed commit from a
mirror (fleet/export.export_commit, as sync/source.py does) and preflights the export (as
verdicts.py does). Both must say the same: the same error codes on the same files, or clean.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.cli import check as check_cli
from gitops_gpu.fleet import export, yamlio
from gitops_gpu.fleet.export import TreeError, export_commit
from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu.preflight import run_preflight
from gitops_gpu_dev import paths

CRDS = str(paths.default_crds_dir())
H100 = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
STAGES = [{"name": "canary", "pools": ["a"]}, {"name": "prod", "pools": ["b"]}]


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    return path


def _commit(work: Path, message: str) -> str:
    git(work, "add", "-A")
    git(work, "commit", "-q", "--allow-empty", "-m", message)
    return git(work, "rev-parse", "HEAD")


def _vendor(tmp: Path, work: Path, rel: str) -> Path:
    """A separate repo holding a copy of ``rel`` of the fleet (what a team would vendor)."""
    vendor = tmp / f"vendor-{rel.replace('/', '-')}"
    shutil.copytree(work / rel, vendor)
    _repo(vendor)
    _commit(vendor, "vendored")
    return vendor


def _submodule(source: str, at: str) -> Callable[[Path, Path], None]:
    """``at`` becomes a submodule holding what ``source`` held (``source`` itself goes when
    the two are the same path: the pool moves into the submodule)."""

    def edit(work: Path, tmp: Path) -> None:
        vendor = _vendor(tmp, work, source)
        if source == at:
            git(work, "rm", "-rq", source)
        git(work, "submodule", "add", "-q", str(vendor), at)

    return edit


def _embedded_repo(work: Path, tmp: Path) -> None:
    """A clone inside the fleet repo, added without `git submodule` (git records a gitlink)."""
    vendor = _vendor(tmp, work, "nodepools/b")
    git(work, "rm", "-rq", "nodepools/b")
    git(work, "clone", "-q", str(vendor), "nodepools/b")


def _not_checked_out(work: Path, tmp: Path) -> None:
    """A pool submodule as CI has it without `submodules: true`: an empty directory."""
    _submodule("nodepools/b", "nodepools/b")(work, tmp)
    _commit(work, "submodule")
    git(work, "submodule", "deinit", "-f", "nodepools/b")


def _symlink(rel: str, target: str, move_to: str = "") -> Callable[[Path, Path], None]:
    """``rel`` becomes a symlink to ``target``; with ``move_to`` its content moves there."""

    def edit(work: Path, tmp: Path) -> None:
        path = work / rel
        if move_to:
            (work / move_to).parent.mkdir(parents=True, exist_ok=True)
            path.rename(work / move_to)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)

    return edit


def _fifo(rel: str) -> Callable[[Path, Path], None]:
    def edit(work: Path, tmp: Path) -> None:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(work / rel)

    return edit


def _write(rel: str, text: str) -> Callable[[Path, Path], None]:
    def edit(work: Path, tmp: Path) -> None:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)

    return edit


def _ignored_pool(work: Path, tmp: Path) -> None:
    """A pool in no stage, but git-ignored: no commit holds it (the raw checkout would be GG003)."""
    write_repo(work, {"a": H100, "b": H100, "c": H100}, stages=STAGES)
    (work / ".gitignore").write_text("nodepools/c/\n")


def _parts(work: Path, tmp: Path) -> None:
    """Eight 4,000 byte YAML files: the sixth takes the fleet's files over 22,000 bytes."""
    (work / "docs").mkdir()
    for i in range(8):
        (work / f"docs/part-{i}.yaml").write_text("# " + "x" * 3997 + "\n")


@dataclass(frozen=True)
class Case:
    name: str
    edit: Callable[[Path, Path], None]
    expect: tuple[str, str] | None  # (code, file) of the one error both sides report; None: clean


CASES = (
    Case("submodule-pool", _submodule("nodepools/b", "nodepools/b"), ("GG005", "nodepools/b")),
    Case("submodule-pool-not-checked-out", _not_checked_out, ("GG005", "nodepools/b")),
    Case("embedded-repo-pool", _embedded_repo, ("GG005", "nodepools/b")),
    Case(
        "submodule-below-a-pool",
        _submodule("base", "nodepools/b/vendor"),
        ("GG005", "nodepools/b/vendor"),
    ),
    Case("submodule-holding-spec-base", _submodule("base", "base"), ("GG005", "fleet.yaml")),
    Case("submodule-elsewhere", _submodule("base", "vendor/tools"), None),
    Case(
        "symlinked-pool-file",
        _symlink("nodepools/b/pool.yaml", "../../shared/b-pool.yaml", "shared/b-pool.yaml"),
        ("GG005", "nodepools/b/pool.yaml"),
    ),
    Case(
        "symlinked-pool-file-to-etc-passwd",
        _symlink("nodepools/b/clusterpolicy.yaml", "/etc/passwd"),
        ("GG005", "nodepools/b/clusterpolicy.yaml"),
    ),
    Case(
        "symlinked-pool-directory",
        _symlink("nodepools/b", "../pools-src/b", "pools-src/b"),
        ("GG005", "nodepools/b"),
    ),
    Case(
        "symlinked-spec-base",
        _symlink("base/clusterpolicy.yaml", "../shared/base.yaml", "shared/base.yaml"),
        ("GG005", "base/clusterpolicy.yaml"),
    ),
    Case("symlink-elsewhere", _symlink("docs/base.yaml", "../base/clusterpolicy.yaml"), None),
    Case("symlink-beside-a-pool", _symlink("nodepools/b/notes.txt", "/etc/passwd"), None),
    Case("fifo-in-the-working-tree", _fifo("run/agent.fifo"), None),
    Case("pool-folder-without-yaml", _write("nodepools/docs/README.md", "# pools\n"), None),
    Case("git-ignored-pool", _ignored_pool, None),
    # sizes, with the limits of the `limits` fixture
    Case(
        "oversized-pool-file",
        _write("nodepools/b/clusterpolicy.yaml", "spec: {}\n# " + "x" * 5000 + "\n"),
        ("GG001", "nodepools/b/clusterpolicy.yaml"),
    ),
    Case("oversized-yaml-elsewhere", _write("docs/big.yaml", "# " + "x" * 5000 + "\n"), None),
    Case("fleet-files-over-the-repo-limit", _parts, ("GG001", "docs/part-5.yaml")),
)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    errors: frozenset[tuple[str, str]]  # (code, file) of every error finding


def check_verdict(work: Path, capsys: pytest.CaptureFixture[str]) -> Verdict:
    """`gitops-gpu check WORK --format json`, in process."""
    parser = argparse.ArgumentParser()
    check_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["check", str(work), "--crds", CRDS, "--format", "json"])
    capsys.readouterr()
    rc = args.func(args)
    doc = json.loads(capsys.readouterr().out)
    assert rc in (0, 1), doc
    errors = frozenset((f["code"], f["file"]) for f in doc["findings"] if f["severity"] == "error")
    return Verdict(rc == 0, errors)


def controller_verdict(work: Path, tmp: Path) -> Verdict:
    """The controller's judgement of HEAD: export from a mirror, then preflight the export."""
    mirror = tmp / "mirror.git"
    git(tmp, "clone", "-q", "--mirror", str(work), str(mirror))
    sha = git(work, "rev-parse", "HEAD")
    dest = tmp / "checkout"
    try:
        export_commit(mirror, sha, dest)
    except TreeError as exc:
        return Verdict(False, frozenset({(exc.code, exc.file)}))
    result = run_preflight(dest, commit=sha, crds_dir=CRDS)
    errors = [f for f in result.findings if f.severity == "error"]
    assert not [p for p in dest.rglob("*") if p.is_symlink()]
    return Verdict(
        not errors and result.compiled is not None, frozenset((f.code, f.file) for f in errors)
    )


def _spy(used: list[str], name: str, real: Callable[..., Any], *args: Any) -> Any:
    used.append(name)
    return real(*args)


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small limits, so a size case costs kilobytes (the defaults: 1 MiB and 16 MiB)."""
    monkeypatch.setattr(yamlio.LIMITS, "file_bytes", 4096)
    monkeypatch.setattr(yamlio.LIMITS, "repo_bytes", 22_000)


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    work = _repo(tmp_path / "fleet")
    write_repo(work, {"a": H100, "b": H100}, stages=STAGES)
    _commit(work, "a green fleet")
    return work


@pytest.mark.parametrize("mode", ["clean", "dirty"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_and_controller_agree(
    case: Case,
    mode: str,
    fleet: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    limits: None,
) -> None:
    case.edit(fleet, tmp_path)
    _commit(fleet, case.name)
    if mode == "dirty":
        (fleet / "notes.txt").write_text("not committed yet\n")  # check reads the working tree
    controller = controller_verdict(fleet, tmp_path)
    used: list[str] = []
    for name in ("export_commit", "export_worktree"):
        real = getattr(export, name)
        spy = functools.partial(_spy, used, name, real)
        monkeypatch.setattr(export, name, spy)
    assert check_verdict(fleet, capsys) == controller
    # clean: HEAD through the controller's own export; dirty: the working tree through lstat
    assert used == ["export_commit" if mode == "clean" else "export_worktree"]
    if case.expect is None:
        assert controller == Verdict(True, frozenset())
    else:
        assert controller == Verdict(False, frozenset({case.expect}))


def test_findings_name_file_field_and_fix(fleet: Path, tmp_path: Path) -> None:
    _submodule("nodepools/b", "nodepools/b")(fleet, tmp_path)
    _commit(fleet, "submodule")
    (f,) = run_preflight(fleet, crds_dir=CRDS).findings
    assert (f.code, f.severity, f.file) == ("GG005", "error", "nodepools/b")
    assert "is a git submodule" in f.message
    assert f.fix.startswith("vendor the pool's files into the fleet repo")


def test_spec_base_inside_a_submodule_points_at_fleet_yaml(fleet: Path, tmp_path: Path) -> None:
    _submodule("base", "base")(fleet, tmp_path)
    _commit(fleet, "base as a submodule")
    (f,) = run_preflight(fleet, crds_dir=CRDS).findings
    assert (f.code, f.file, f.field) == ("GG005", "fleet.yaml", "spec.base")
    assert f.line > 0 and "inside the submodule base" in f.message and f.fix


def test_skipped_entries_are_notes_in_check(fleet: Path, tmp_path: Path) -> None:
    _submodule("base", "vendor/tools")(fleet, tmp_path)
    _symlink("docs/base.yaml", "../base/clusterpolicy.yaml")(fleet, tmp_path)
    _fifo("run/agent.fifo")(fleet, tmp_path)
    findings = run_preflight(fleet, crds_dir=CRDS).findings  # dirty: the working tree
    notes = {(f.code, f.severity, f.file, f.message) for f in findings}
    assert notes == {
        ("GG006", "info", "docs/base.yaml", "symlink, ignored"),
        ("GG006", "info", "run/agent.fifo", "fifo, ignored (git cannot commit it)"),
        ("GG006", "info", "vendor/tools", "submodule, ignored"),
    }


def test_fifo_where_a_fleet_file_belongs(fleet: Path) -> None:
    """git cannot commit a fifo (nor does `git status` show one): a clean checkout is judged as
    its commit, without it, as the controller will; a dirty one as it is, where the fifo is an
    error (never a read that blocks)."""
    os.mkfifo(fleet / "nodepools/b/clusterpolicy.yaml")
    assert run_preflight(fleet, crds_dir=CRDS).findings == []
    (fleet / "notes.txt").write_text("not committed yet\n")
    (f,) = run_preflight(fleet, crds_dir=CRDS).findings
    assert (f.code, f.file) == ("GG005", "nodepools/b/clusterpolicy.yaml")
    assert "is a fifo" in f.message and f.fix


def test_dirty_tree_is_judged_as_it_is(fleet: Path) -> None:
    """Uncommitted edits are what check reads: the working tree, not HEAD."""
    pool = fleet / "nodepools/b/pool.yaml"
    pool.write_text(pool.read_text().replace("name: b", "name: c"))
    codes = {(f.code, f.file) for f in run_preflight(fleet, crds_dir=CRDS).findings}
    assert ("GG004", "nodepools/b/pool.yaml") in codes


def test_plain_directory_outside_git(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "plain", {"a": H100, "b": H100}, stages=STAGES)
    (root / "nodepools/b/pool.yaml").rename(root / "b-pool.yaml")
    (root / "nodepools/b/pool.yaml").symlink_to("../../b-pool.yaml")
    (f,) = run_preflight(root, crds_dir=CRDS).findings
    assert (f.code, f.file) == ("GG005", "nodepools/b/pool.yaml")


def test_compile_reads_the_same_tree(
    fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _submodule("nodepools/b", "nodepools/b")(fleet, tmp_path)
    _commit(fleet, "submodule")
    parser = argparse.ArgumentParser()
    check_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["compile", str(fleet), "--out", str(tmp_path / "out")])
    assert args.func(args) == 1
    assert "nodepools/b: is a git submodule" in capsys.readouterr().err
