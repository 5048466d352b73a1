"""Which stage prunes a removed pool, and the mass-removal guard (sync/prune.py)."""

from __future__ import annotations

from gitops_gpu.fleet.compiled import ClusterTarget
from gitops_gpu.sync import prune


def _cluster(*pools: str) -> ClusterTarget:
    return ClusterTarget("default", None, {}, {p: None for p in pools})  # type: ignore[misc]


def test_the_stage_that_held_it_prunes() -> None:
    stages = ["canary", "inference", "training"]
    assert prune.pruning_stage("training", stages) == "training"
    assert prune.pruning_stage("canary", stages) == "canary"
    # a stage that went with its last pool, or no annotation: the cluster's last stage
    assert prune.pruning_stage("gone", stages) == "training"
    assert prune.pruning_stage(None, stages) == "training"
    assert prune.pruning_stage("x", []) is None


def test_more_than_half_needs_the_opt_in() -> None:
    live = ["a", "b", "c", "d"]
    assert prune.refusal(_cluster("a", "b"), live, allowed=False) is None  # half is fine
    refused = prune.refusal(_cluster("a"), live, allowed=False)
    assert refused is not None and "removes 3 of the 4 pools" in refused and "b, c, d" in refused
    assert prune.refusal(_cluster("a"), live, allowed=True) is None
    assert prune.refusal(_cluster(), [], allowed=False) is None  # a new cluster
