"""read_text: what a fleet file may be, said with the file's name; nothing outside the repo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import yamlio


def _said(path: Path, root: Path) -> str:
    with pytest.raises(FleetError) as exc:
        yamlio.read_text(path, root)
    return str(exc.value)


def test_a_file_inside_the_repo_is_read_with_its_relative_name(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.yaml").write_bytes("\ufeffk: v\n".encode())
    (tmp_path / "link.yaml").symlink_to("a/f.yaml")  # a symlink that stays inside is read
    assert yamlio.read_text(tmp_path / "a" / "f.yaml", tmp_path) == ("a/f.yaml", "k: v\n")
    assert yamlio.read_text(tmp_path / "link.yaml", tmp_path) == ("link.yaml", "k: v\n")


def test_what_a_fleet_file_may_not_be(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "secret.yaml").write_text("k: v\n")
    (root / "out.yaml").symlink_to(tmp_path / "secret.yaml")
    (tmp_path / "repo-other").mkdir()  # a sibling whose name starts like the repo's
    (tmp_path / "repo-other" / "x.yaml").write_text("k: v\n")
    (root / "sibling.yaml").symlink_to(tmp_path / "repo-other" / "x.yaml")
    (root / "loop.yaml").symlink_to("loop.yaml")
    (root / "dangling.yaml").symlink_to("nowhere.yaml")
    (root / "dir.yaml").mkdir()
    os.mkfifo(root / "fifo.yaml")
    (root / "big.yaml").write_text("k: " + "v" * yamlio.LIMITS.file_bytes)
    (root / "latin1.yaml").write_bytes(b"k: caf\xe9\n")
    assert "out.yaml: symlink points outside the repository" in _said(root / "out.yaml", root)
    assert "symlink points outside" in _said(root / "sibling.yaml", root)
    assert "loop.yaml: cannot resolve the path" in _said(root / "loop.yaml", root)
    assert "dangling.yaml: cannot read: No such file" in _said(root / "dangling.yaml", root)
    assert "missing.yaml: cannot read" in _said(root / "missing.yaml", root)
    assert "dir.yaml: not a regular file" in _said(root / "dir.yaml", root)
    assert "fifo.yaml: not a regular file" in _said(root / "fifo.yaml", root)  # no hang
    assert "over the 1048576 byte limit" in _said(root / "big.yaml", root)
    assert "latin1.yaml:1:7: not valid UTF-8 (byte 0xe9)" in _said(root / "latin1.yaml", root)
