"""render_yaml: sorted keys, and strings stay strings for YAML 1.1 readers (kubectl)."""

from __future__ import annotations

import string

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gitops_gpu.fleet.render import render_yaml
from gitops_gpu.fleet.yamlio import parse_single

AMBIGUOUS = [
    "on",
    "off",
    "yes",
    "no",
    "y",
    "n",
    "On",
    "NO",
    "true",
    "null",
    "~",
    "1:30",
    "0x1F",
    "017",
    "0b101",
    ".inf",
    "1e3",
    "25%",
    "580.126.20",
    "",
    " lead",
    "a: b",
]


def test_keys_are_sorted_at_every_level() -> None:
    assert render_yaml({"b": 1, "a": {"z": 1, "c": [{"y": 1, "x": 2}]}}) == (
        "a:\n  c:\n  - x: 2\n    'y': 1\n  z: 1\nb: 1\n"
    )  # y is a YAML 1.1 bool


@pytest.mark.parametrize("value", AMBIGUOUS)
def test_strings_survive_yaml_1_1_and_1_2_readers(value: str) -> None:
    # PyYAML (a dependency of the kubernetes client) reads YAML 1.1 like sigs.k8s.io/yaml.
    text = render_yaml({"k": value})
    assert yaml.safe_load(text) == {"k": value}
    assert parse_single("f", text).data == {"k": value}


_values = st.recursive(
    st.one_of(
        st.text(string.printable, max_size=12),
        st.integers(-(2**63), 2**63 - 1),
        st.booleans(),
        st.none(),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=5), inner, max_size=3),
    ),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=5), _values, max_size=4))
def test_render_round_trips_through_the_loader(data: dict[str, object]) -> None:
    assert parse_single("f", render_yaml(data)).data == data
