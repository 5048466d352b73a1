"""Which nodes a stage's smoke tests and metric queries cover (execute.nodes_by_stage)."""

from __future__ import annotations

from gitops_gpu import names
from gitops_gpu.execute import nodes_by_stage
from gitops_gpu.fleet.compiled import StageSpec


def _node(name: str, pool: str | None) -> dict[str, object]:
    labels = {names.POOL_LABEL: pool} if pool else {}
    return {"metadata": {"name": name, "labels": labels}}


def test_nodes_skipped_as_unavailable_get_no_smoke_job() -> None:
    stages = (StageSpec("canary", ("canary",)), StageSpec("training", ("train-a", "train-b")))
    nodes = [
        _node("c-0", "canary"),
        _node("t-0", "train-a"),
        _node("t-1", "train-b"),
        _node("t-2", "train-b"),  # NotReady, skipped by its pool this pass
        _node("stray", None),
        _node("other", "not-in-the-fleet"),
    ]
    assert nodes_by_stage(nodes, stages, frozenset({"t-2"})) == {
        "canary": ["c-0"],
        "training": ["t-0", "t-1"],
    }
    assert nodes_by_stage(nodes, stages)["training"] == ["t-0", "t-1", "t-2"]


def test_a_node_moved_out_of_its_pools_selector_gets_no_smoke_job() -> None:
    stages = (StageSpec("canary", ("canary",)),)
    kept = _node("c-0", "canary")
    moved = _node("c-1", "canary")  # still labelled by us, but relabelled out of the pool
    kept["metadata"]["labels"]["pool"] = "gpu-canary"  # type: ignore[index]
    moved["metadata"]["labels"]["pool"] = "elsewhere"  # type: ignore[index]
    selectors = {"canary": {"pool": "gpu-canary"}}
    assert nodes_by_stage([kept, moved], stages, selectors=selectors) == {"canary": ["c-0"]}
    assert nodes_by_stage([kept, moved], stages) == {"canary": ["c-0", "c-1"]}
