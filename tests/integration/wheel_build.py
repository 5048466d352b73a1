"""Build the runtime wheel from a clean copy of what the Dockerfile copies (pyproject.toml,
README.md, gitops_gpu/): a stale build/ directory in the checkout can never leak into it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gitops_gpu_dev import paths


def build_wheel(out: Path) -> Path:
    src = out / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(paths.PROJECT_ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(paths.PROJECT_ROOT / "gitops_gpu", src / "gitops_gpu", ignore=ignore)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out / "dist")]
    subprocess.run([*build, str(src)], check=True, capture_output=True)
    (wheel,) = (out / "dist").glob("gitops_gpu-*.whl")
    return wheel
