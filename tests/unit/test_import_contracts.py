"""The import contracts `make check` enforces (pyproject's [tool.importlinter]) stay whole."""

from __future__ import annotations

import tomllib

from gitops_gpu_dev import paths


def _contracts() -> dict[str, dict[str, object]]:
    doc = tomllib.loads((paths.PROJECT_ROOT / "pyproject.toml").read_text())
    return {c["name"]: c for c in doc["tool"]["importlinter"]["contracts"]}


def test_the_pass_types_contract_names_every_module_of_ours() -> None:
    """A module added to the package is forbidden to pass_types too, not silently allowed."""
    root = paths.PROJECT_ROOT / "gitops_gpu"
    ours = {
        f"gitops_gpu.{p.stem if p.suffix == '.py' else p.name}"
        for p in root.iterdir()
        if (p.suffix == ".py" and p.stem not in ("__init__", "__main__", "pass_types"))
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    contract = _contracts()["what a pass is given and reports imports nothing of ours"]
    assert set(contract["forbidden_modules"]) == ours  # type: ignore[arg-type]


def test_every_contract_is_checked_by_make_check() -> None:
    makefile = (paths.PROJECT_ROOT / "Makefile").read_text()
    check = makefile.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    assert "lint-imports" in check
    assert len(_contracts()) >= 6
