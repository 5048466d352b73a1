"""One exit-code table: the enum, the README and what commands return agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gitops_gpu.cli import main
from gitops_gpu.cli.exits import Exit
from gitops_gpu_dev import paths


def test_the_readme_lists_every_exit_code() -> None:
    readme = (paths.PROJECT_ROOT / "README.md").read_text()
    listed = {int(m) for m in re.findall(r"^\| (\d+) \| ", readme, re.M)}
    assert listed == {int(e) for e in Exit}


def test_unreadable_input_is_a_usage_error_from_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nowhere")
    assert main(["check", missing]) == Exit.USAGE
    assert main(["compile", missing, "--out", str(tmp_path / "out")]) == Exit.USAGE
    assert "error:" in capsys.readouterr().err
