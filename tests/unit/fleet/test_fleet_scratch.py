"""Scratch exports go to memory-backed storage when it has room, else the temp directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitops_gpu.fleet import scratch, yamlio


def test_the_environment_chooses_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scratch.ENV, str(tmp_path))
    assert scratch.scratch_parent(Path("/nonexistent")) == str(tmp_path)
    with scratch.scratch_dir("gitops-gpu-t-") as made:
        assert Path(made).parent == tmp_path and Path(made).name.startswith("gitops-gpu-t-")
    assert not Path(made).exists()  # removed after the block


def test_shm_only_with_room_and_write_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(scratch.ENV, raising=False)
    assert scratch.scratch_parent(tmp_path / "missing") is None
    room = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    monkeypatch.setattr(yamlio.LIMITS, "repo_bytes", room // 8)
    assert scratch.scratch_parent(tmp_path) == str(tmp_path)
    monkeypatch.setattr(yamlio.LIMITS, "repo_bytes", room)  # 4x this does not fit
    assert scratch.scratch_parent(tmp_path) is None
