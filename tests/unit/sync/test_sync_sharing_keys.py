"""Which keys of the fleet-built device-plugin ConfigMap a stage's apply keeps."""

from __future__ import annotations

from typing import Any

from gitops_gpu import names
from gitops_gpu.sync.sharing_keys import desired

POOLS = {"canary", "train"}
A1, A2 = "canary-aaaaaaaa", "canary-bbbbbbbb"
T1, T2 = "train-11111111", "train-22222222"


def cm(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": data}


def node(key: str | None) -> dict[str, Any]:
    labels = {names.DEVICE_PLUGIN_CONFIG_LABEL: key} if key else {}
    return {"metadata": {"name": f"n-{key}", "labels": labels}}


def test_first_apply_writes_only_the_stages_own_keys() -> None:
    out = desired(cm(**{A2: "a2", T2: "t2"}), None, [], {"canary"}, POOLS)
    assert out["data"] == {A2: "a2"}  # train's new key waits for train's stage


def test_an_old_key_stays_while_a_node_names_it() -> None:
    live = cm(**{A1: "a1", T1: "t1"})
    out = desired(cm(**{A2: "a2", T2: "t2"}), live, [node(A1), node(A2)], {"canary"}, POOLS)
    assert out["data"] == {A1: "a1", A2: "a2", T1: "t1"}
    # once no node names it, the next apply drops it
    out = desired(cm(**{A2: "a2", T2: "t2"}), live, [node(A2)], {"canary"}, POOLS)
    assert out["data"] == {A2: "a2", T1: "t1"}


def test_another_stage_never_undoes_a_newer_key() -> None:
    # canary is on a newer commit (A2) than train's stage adopts: train leaves canary's keys
    live = cm(**{A2: "a2", T1: "t1"})
    out = desired(cm(**{A1: "a1", T2: "t2"}), live, [node(T1)], {"train"}, POOLS)
    assert out["data"] == {A2: "a2", T1: "t1", T2: "t2"}


def test_a_removed_pools_key_goes_once_no_node_names_it() -> None:
    live = cm(**{"gone-cccccccc": "g", A1: "a1"})
    kept = desired(cm(**{A1: "a1"}), live, [node("gone-cccccccc")], {"canary"}, POOLS)
    assert "gone-cccccccc" in kept["data"]
    assert desired(cm(**{A1: "a1"}), live, [], {"canary"}, POOLS)["data"] == {A1: "a1"}
