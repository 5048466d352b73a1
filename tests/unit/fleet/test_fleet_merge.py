"""Base + overlay: maps merge, lists replace, null deletes; origin points at the writer."""

from __future__ import annotations

from gitops_gpu.fleet import plain
from gitops_gpu.fleet.merge import merge, merge_shared, origin, prune_nulls
from gitops_gpu.fleet.yamlio import parse_single


def test_maps_merge_lists_replace_null_deletes() -> None:
    base = {"a": {"x": 1, "y": [1, 2], "z": {"k": "v"}}, "b": 2, "keep": True}
    over = {"a": {"y": [3], "z": None, "w": 4}, "b": None}
    assert merge(base, over) == {"a": {"x": 1, "y": [3], "w": 4}, "keep": True}


def test_inputs_are_not_modified() -> None:
    base = {"a": {"x": [1]}}
    over = {"a": {"x": [2]}}
    out = merge(base, over)
    out["a"]["x"].append(9)
    assert base == {"a": {"x": [1]}} and over == {"a": {"x": [2]}}


def test_nulls_are_pruned_everywhere() -> None:
    # the upstream sample has `validator: {plugin: null, env: [...]}`
    assert prune_nulls({"v": {"plugin": None, "env": [{"n": None}]}}) == {"v": {"env": [{}]}}
    assert merge({}, {"new": {"a": None, "b": 1}}) == {"new": {"b": 1}}


def test_scalar_replaces_map_and_map_replaces_scalar() -> None:
    assert merge({"a": {"x": 1}}, {"a": 5}) == {"a": 5}
    assert merge({"a": 5}, {"a": {"x": 1}}) == {"a": {"x": 1}}


def test_origin_prefers_the_overlay_then_base_then_ancestors() -> None:
    base = parse_single("base.yaml", "spec:\n  driver:\n    version: '1'\n    image: d\n")
    over = parse_single("pool.yaml", "spec:\n  driver:\n    version: '2'\n")
    assert origin(("spec", "driver", "version"), over, base) == ("pool.yaml", 3)
    assert origin(("spec", "driver", "image"), over, base) == ("base.yaml", 4)
    # a field nobody wrote (e.g. a missing required one) points at the closest parent
    assert origin(("spec", "driver", "missing"), over, base) == ("pool.yaml", 2)
    assert origin(("spec", "driver", "image"), None, base) == ("base.yaml", 4)


def test_plain_copy_shares_no_map_or_list() -> None:
    data = {"a": [{"b": {"c": "x"}}, 1, None], "d": {"e": []}}
    out = plain.copy(data)
    assert out == data
    out["a"][0]["b"]["c"] = "changed"
    out["a"].append(2)
    out["d"]["e"].append(3)
    assert data == {"a": [{"b": {"c": "x"}}, 1, None], "d": {"e": []}}


def test_merge_shared_equals_merge_and_shares_only_what_the_overlay_left_alone() -> None:
    base = {"a": {"x": 1, "y": [1, 2], "z": {"k": "v"}}, "b": {"c": [3]}, "keep": True}
    over = {"a": {"y": [3], "z": None, "w": {"n": None, "m": 1}}, "keep": None}
    before = plain.copy(base), plain.copy(over)
    out = merge_shared(base, over)
    assert out == merge(base, over) == {"a": {"x": 1, "y": [3], "w": {"m": 1}}, "b": {"c": [3]}}
    assert (base, over) == before  # neither input changed
    assert out["b"] is base["b"]  # untouched: the base's own map
    assert out is not base and out["a"] is not base["a"]  # touched: new maps on the path
    assert out["a"]["y"] is not over["a"]["y"]  # the overlay's values are its own copies
