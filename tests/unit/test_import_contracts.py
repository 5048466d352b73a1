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


def test_no_two_parts_of_the_package_import_each_other() -> None:
    """Package-level circles (a → b and b → a, any module of each): none, so each part can be
    read, tested and moved on its own."""
    import grimp  # noqa: PLC0415 - import-linter's graph library, only this test needs it

    graph = grimp.build_graph("gitops_gpu", exclude_type_checking_imports=True)

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if part(module) != part(imported):
                edges.setdefault(part(module), set()).add(part(imported))
    circles = sorted(
        {tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())}
    )
    assert circles == []
