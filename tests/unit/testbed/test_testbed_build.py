"""Build failures name the command and show its last output lines, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_gpu.errors import BuildError
from gitops_gpu_dev.testbed import build


def test_failed_build_reports_command_and_tail(tmp_path: Path) -> None:
    said: list[str] = []
    script = (
        "for i in $(seq 1 40); do echo line-$i; done; echo 'go: module lookup disabled'; exit 3"
    )
    with pytest.raises(BuildError) as err:
        build._run(["sh", "-c", script], tmp_path, said.append, "kubernetes v0")
    text = str(err.value)
    assert "kubernetes v0 failed (exit 3)" in text
    assert "go: module lookup disabled" in text and "line-40" in text
    assert "line-1\n" not in text  # only the tail
    assert "fix:" in text
    assert said and said[0].startswith("kubernetes v0: sh -c")


def test_cache_dir_is_overridable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITOPS_GPU_CACHE", str(tmp_path / "c"))
    assert build.cache_dir() == tmp_path / "c"
