"""libyaml's emitter writes exactly ruamel's bytes for the documents it is given, and every other
document goes through ruamel: render_yaml's output never depends on the path it took."""

from __future__ import annotations

import io
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
