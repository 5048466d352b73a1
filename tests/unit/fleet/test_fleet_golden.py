"""Golden files: the compiled YAML of golden/repo, byte for byte.

Regenerate after an intended change with ``GITOPS_GPU_UPDATE_GOLDEN=1 pytest <this file>``
and review the diff of golden/compiled/.
"""

from __future__ import annotations

import os
from pathlib import Path

from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.render import render_fleet

HERE = Path(__file__).resolve().parent / "golden"
REPO, COMPILED = HERE / "repo", HERE / "compiled"


def _rendered() -> dict[str, str]:
    return render_fleet(compile_fleet(load_repo(REPO), "0123456789abcdef0123456789abcdef01234567"))


def test_golden_compile_output() -> None:
    rendered = _rendered()
    if os.environ.get("GITOPS_GPU_UPDATE_GOLDEN"):
        for rel, text in rendered.items():
            (COMPILED / rel).parent.mkdir(parents=True, exist_ok=True)
            (COMPILED / rel).write_text(text, encoding="utf-8")
    on_disk = {
        p.relative_to(COMPILED).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(COMPILED.rglob("*.yaml"))
    }
    assert sorted(rendered) == sorted(on_disk)
    for rel, text in rendered.items():
        assert text == on_disk[rel], f"{rel} differs from its golden file"


def test_golden_output_is_stable_across_runs() -> None:
    assert _rendered() == _rendered()
