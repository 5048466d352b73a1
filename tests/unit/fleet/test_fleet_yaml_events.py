"""Fleet YAML is built from the event stream in one pass (fleet/yamlio.py), libyaml's where
PyYAML has it: the same data, positions and errors as ruamel composing the node tree after a
separate bounds pass did."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import yamlio
from gitops_gpu_dev import paths

TEXT = """\
a:
  - b: 1
    c: [1, 2, {d: x}]
  - []
  - {}
e: ~
f: 0x1F
g: 1e3
h: yes
i: !!str 12
"""


def _parse(text: str) -> list[yamlio.Document]:
    return yamlio._parse_documents("f.yaml", text)


def test_values_and_positions_of_every_key_and_item() -> None:
    (doc,) = _parse(TEXT)
    assert doc.data == YAML(typ="safe", pure=True).load(TEXT) | {"h": "yes", "i": "12"}
    assert doc.data["f"] == 31 and doc.data["h"] == "yes"  # YAML 1.2: yes is a string
    assert doc.positions[()] == (1, 1)
    assert doc.positions[("a",)] == (1, 1)  # a mapping value is placed at its key
    assert doc.positions[("a", 0)] == (2, 5)
    assert doc.positions[("a", 0, "c")] == (3, 5)
    assert doc.positions[("a", 0, "c", 2)] == (3, 15)
    assert doc.positions[("a", 0, "c", 2, "d")] == (3, 16)
    assert doc.positions[("a", 1)] == (4, 5)
    assert doc.positions[("i",)] == (10, 1)


def test_documents_are_built_each_with_its_own_positions() -> None:
    docs = _parse("a: 1\n---\n- x\n- y\n---\n")
    assert [d.data for d in docs] == [{"a": 1}, ["x", "y"], None]
    assert docs[1].positions == {(): (3, 1), (0,): (3, 3), (1,): (4, 3)}


def test_a_syntax_error_later_in_the_file_is_said_before_a_duplicate_key() -> None:
    with pytest.raises(FleetError, match="YAML syntax error") as exc:
        _parse("a: 1\na: 2\nb: [\n")
    assert "duplicate" not in str(exc.value)
    with pytest.raises(FleetError, match=r"f.yaml:3:1: duplicate key 'a' \(first at line 1\)"):
        _parse("a: 1\nb: 2\na: 3\n")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a: &x 1\nb: *x\n", "1:4: YAML anchor '&x'"),
        ("a: *x\n", "1:4: YAML syntax error: found undefined alias 'x'"),
        ("a: {b: 1}\nc:\n  <<: {d: 1}\n", "3:3: complex or merge key"),
        ("? [a]\n: 1\n", "1:3: complex or merge key"),
        ("a: .nan\n", "1:4: .nan is not a finite number"),
        ("a: !foo 1\n", "1:4: unsupported YAML tag"),
    ],
)
def test_what_fleet_files_may_not_hold_is_refused_where_it_is(text: str, said: str) -> None:
    with pytest.raises(FleetError, match=f"f.yaml:{said}"):
        _parse(text)


def test_the_bounds_hold_while_the_events_arrive() -> None:
    deep = "a: " + "[" * (yamlio.LIMITS.depth + 1) + "]" * (yamlio.LIMITS.depth + 1) + "\n"
    with pytest.raises(FleetError, match=f"nesting deeper than {yamlio.LIMITS.depth} levels"):
        _parse(deep)
    wide = "".join(f"k{i}: {i}\n" for i in range(yamlio.LIMITS.nodes))
    with pytest.raises(FleetError, match=f"more than {yamlio.LIMITS.nodes} values"):
        _parse(wide)


def test_a_yaml_1_1_document_is_read_as_1_1() -> None:
    (doc,) = _parse("%YAML 1.1\n---\na: yes\nb: on\n")
    assert doc.data == {"a": True, "b": True}


def _every_yaml(root: Path) -> list[Path]:
    return sorted(p for ext in ("*.yaml", "*.yml") for p in root.rglob(ext))


def _outcome(path: Path) -> object:
    try:
        return [(d.data, d.positions) for d in _parse(path.read_text(errors="replace"))]
    except FleetError as exc:
        return str(exc)


def test_libyaml_and_ruamel_build_the_same_documents_and_errors(
    upstream: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert yamlio._CPARSER is not None, "PyYAML without libyaml: check parses 10x slower"
    files = _every_yaml(upstream) + _every_yaml(paths.PROJECT_ROOT)
    files = [f for f in files if ".venv" not in f.parts]
    assert len(files) > 100
    fast = [_outcome(f) for f in files]
    monkeypatch.setattr(yamlio, "_CPARSER", None)
    pure = [_outcome(f) for f in files]
    assert [f for f, a, b in zip(files, fast, pure, strict=True) if a != b] == []
    assert any(isinstance(o, str) and "YAML syntax error" in o for o in fast)  # errors compared
