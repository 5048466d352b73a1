"""A cached node's labels: its shape's part kept once, and read exactly as the dict was."""

from __future__ import annotations

import json
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from gitops_gpu.sync import slim
from gitops_gpu.sync.node_labels import SharedLabels, shared

HOST = "kubernetes.io/hostname"


def _node(name: str, **labels: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "labels": {HOST: name, **labels}},
        "status": {},
    }


def test_the_nodes_of_a_shape_share_their_labels_and_each_reads_its_own_name() -> None:
    a = slim.node(_node("gpu-a", pool="p", product="H100"))["metadata"]["labels"]
    b = slim.node(_node("gpu-b", pool="p", product="H100"))["metadata"]["labels"]
    c = slim.node(_node("gpu-c", pool="q", product="H100"))["metadata"]["labels"]
    assert isinstance(a, SharedLabels) and isinstance(b, SharedLabels)
    assert a._base is b._base and c._base is not a._base
    assert (a[HOST], b.get(HOST), c.get("pool")) == ("gpu-a", "gpu-b", "q")
    assert a == {HOST: "gpu-a", "pool": "p", "product": "H100"} == dict(a)
    assert a != b
    assert b != c
    assert json.loads(json.dumps(dict(a))) == dict(a)  # a plain copy for JSON
    whole: dict[str, str] = {HOST: "gpu-a", "pool": "p", "product": "H100"}
    assert sys.getsizeof(a) < sys.getsizeof(whole) / 2


def test_a_node_whose_labels_did_not_move_is_not_a_change() -> None:
    old = slim.node(_node("gpu-a", pool="p"))
    beat = _node("gpu-a", pool="p")
    beat["metadata"]["resourceVersion"] = "2"  # type: ignore[index]
    assert slim.same_facts(old, slim.node(beat))
    moved = _node("gpu-a", pool="other")
    assert not slim.same_facts(old, slim.node(moved))


_keys = st.sampled_from([HOST, "pool", "nvidia.com/gpu.product", "nvidia.com/mig.config", "x"])
_values = st.sampled_from(["n1", "n2", "p", "all-disabled", ""])


@settings(max_examples=300, deadline=None)
@given(
    labels=st.dictionaries(_keys, _values),
    other=st.dictionaries(_keys, _values),
    name=st.sampled_from(["n1", "n2"]),
    other_name=st.sampled_from(["n1", "n2"]),
    probe=_keys,
)
def test_shared_labels_read_exactly_as_the_dict(
    labels: dict[str, str], other: dict[str, str], name: str, other_name: str, probe: str
) -> None:
    got = shared(labels, name)
    assert got.get(probe) == labels.get(probe)
    assert got.get(probe, "?") == labels.get(probe, "?")
    assert (probe in got) == (probe in labels)
    assert len(got) == len(labels) and set(got) == set(labels)
    assert dict(got.items()) == labels and {**got} == labels
    assert got == labels and labels == got
    assert (got == shared(other, name)) == (labels == other)
    assert (got == shared(other, other_name)) == (labels == other)  # whatever the names
    assert (got == shared(dict(reversed(labels.items())), name)) is True  # whatever the order
    assert (got == other) == (labels == other)
