"""libyaml's emitter writes exactly ruamel's bytes for the documents it is given, and every other
document goes through ruamel: render_yaml's output never depends on the path it took."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.fleet import render
from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu_dev import paths

REPOS = [
    paths.fleet_example(),
    paths.fleet_example().parent / "fleet-repo-example-two-clusters",
    Path(__file__).parent / "golden" / "repo",
]


def _ruamel(data: Any) -> str:
    buf = io.StringIO()
    render._yaml().dump(render._plain(data), buf)
    return buf.getvalue()


def _documents() -> list[Any]:
    docs: list[Any] = []
    for root in REPOS:
        for cluster in compile_fleet(load_repo(root), "c0ffee5" * 5 + "12345").clusters.values():
            docs += [cluster.cluster_policy, *cluster.config_maps]
            for pool in cluster.pools.values():
                docs += [pool.driver, render.node_label_doc(pool)]
    return docs


def test_compiled_objects_render_as_ruamel_writes_them_and_take_the_fast_path() -> None:
    docs = _documents()
    assert render._FAST is not None, "PyYAML without libyaml: the fast path is never taken"
    fast = [d for d in docs if render._fast_node(render._plain(d)) is not None]
    assert len(fast) > len(docs) // 2  # the bulk of real objects is plain
    for doc in docs:
        assert render.render_yaml(doc) == _ruamel(doc)


@pytest.mark.parametrize(
    "value",
    [
        "on",
        "yes",
        "1e3",
        "0o17",
        "+1",
        "1_000",
        "12:30",
        "",
        " x",
        "x ",
        "a: b",
        "- x",
        "null",
        "~",
        "é",
        "line\nbreak",
        "3.0",
        ".5",
        "0x1F",
        "2026-12-01",
        "True",
        "y",
        "=",
        "*a",
        "&a",
        "!x",
        "%x",
        "@x",
        "`x",
        "'q'",
        '"q"',
        "#c",
        "x #c",
        "1.0e+3",
        ".inf",
        "-.inf",
        "01",
        "1:00:00",
        "0b101",
        "a\tb",
        "back\\slash",
        "nvidia.com/gpu",
        "580.126.20",
        "v1.19.1",
        "25%",
        "a,b",
        "x=y",
    ],
)
def test_any_string_renders_as_ruamel_writes_it(value: str) -> None:
    for doc in ({"k": value}, {value or "e": [value]}):
        assert render.render_yaml(doc) == _ruamel(doc)


def test_scalars_and_empty_containers_render_as_ruamel_writes_them() -> None:
    doc = {"n": 1, "f": 1.5, "b": True, "z": None, "l": [], "m": {}, "big": 10**20, "neg": -3}
    assert render.render_yaml(doc) == _ruamel(doc)


def _node_path(data: Any) -> str | None:
    import yaml  # noqa: PLC0415

    node = render._fast_node(render._plain(data))
    return None if node is None else yaml.serialize(node, Dumper=render._FAST, width=1 << 16)


def test_compiled_objects_are_written_by_the_emitter_as_libyaml_writes_them() -> None:
    docs = _documents()
    emitted = [(d, render._emit(d)) for d in docs]
    assert sum(text is not None for _, text in emitted) > len(docs) // 2
    for doc, text in emitted:
        if text is not None:
            assert text == _node_path(doc) == _ruamel(doc)


# strings the emitter writes (plain or quoted), and rarer ones it leaves to the other paths
_WORDS = [
    "a",
    "on",
    "y",
    "=",
    "-x",
    "--x",
    "/dev",
    "2026-12-01",
    "1_0",
    "",
    "a, b",
    "x y",
    "0x1F",
    "580.1",
    "v1.2",
    "k=v",
    "_u",
    ".x",
    "nvidia.com/gpu",
    "OFF",
    "12:30",
    "x" * 130,
]
_ODD = ["-", "a:", ":x", "%x", "...x", "---", "@x", "é", "a: b", "1e3", "x\ny", "'q'"]


def _word(rng: random.Random) -> str:
    return rng.choice(_ODD if rng.random() < 0.03 else _WORDS)


def _random_doc(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.35:
        return rng.choice([_word(rng), _word(rng), True, False, None, 0, -7, 10**20, [], {}, 1.5])
    if roll < 0.65:
        return [_random_doc(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    return {_word(rng): _random_doc(rng, depth + 1) for _ in range(rng.randint(1, 4))}


def test_random_documents_render_the_same_on_every_path() -> None:
    rng = random.Random(32)
    emitted = 0
    for _ in range(3000):
        doc = {"k": _random_doc(rng, 0), _word(rng): _random_doc(rng, 0)}
        text = render._emit(doc)
        if text is not None:
            emitted += 1
            assert text == _node_path(doc) == _ruamel(doc), doc
        assert render.render_yaml(doc) == _ruamel(doc), doc
    assert emitted > 300  # the emitter is exercised, not only its bail-outs
