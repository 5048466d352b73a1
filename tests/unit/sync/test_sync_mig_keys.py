"""Which layouts of the fleet-built mig-parted ConfigMap a stage's apply keeps: the device-plugin
key rule one level down, inside config.yaml's mig-configs."""

from __future__ import annotations

from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet import mig_layouts
from gitops_gpu.sync.mig_keys import desired

POOLS = {"canary", "train"}
A1, A2 = "canary-aaaaaaaa", "canary-bbbbbbbb"
T1, T2 = "train-11111111", "train-22222222"


def entries(n: int) -> list[dict[str, Any]]:
    return [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": n}}]


def cm(*names_: str) -> dict[str, Any]:
    layouts = {n: entries(i + 1) for i, n in enumerate(names_)}
    text = mig_layouts.render({**mig_layouts.BUILTIN, **layouts})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "m"},
        "data": {"config.yaml": text},
    }


def node(layout: str) -> dict[str, Any]:
    return {"metadata": {"name": f"n-{layout}", "labels": {names.MIG_CONFIG_LABEL: layout}}}


def kept(out: dict[str, Any]) -> set[str]:
    return set(mig_layouts.parse(out["data"]["config.yaml"]))


def test_first_apply_writes_the_stages_own_layouts_and_all_disabled() -> None:
    assert kept(desired(cm(A2, T2), None, [], {"canary"}, POOLS)) == {"all-disabled", A2}


def test_an_old_layout_stays_while_a_node_names_it_and_other_stages_are_left_alone() -> None:
    live = cm(A1, T1)
    out = desired(cm(A2, T2), live, [node(A1), node(A2)], {"canary"}, POOLS)
    assert kept(out) == {"all-disabled", A1, A2, T1}
    assert kept(desired(cm(A2, T2), live, [node(A2)], {"canary"}, POOLS)) == {
        "all-disabled",
        A2,
        T1,
    }


def test_a_layouts_content_comes_from_the_commit_for_own_pools_and_from_live_for_others() -> None:
    live = cm(T1)
    out = mig_layouts.parse(desired(cm(A2, T2), live, [], {"canary"}, POOLS)["data"]["config.yaml"])
    assert out[T1] == entries(1) and out[A2] == entries(1)


def test_an_unparseable_live_config_is_replaced_not_kept() -> None:
    live = {"data": {"config.yaml": "{not: yaml: ["}}
    assert kept(desired(cm(A2), live, [], {"canary"}, POOLS)) == {"all-disabled", A2}
