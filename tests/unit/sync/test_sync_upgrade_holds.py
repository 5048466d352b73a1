"""Which nodes get the operator's skip label while their stage is held, and which lose it
(sync/upgrade_holds.py decide): only not-started nodes are held, only our labels are removed."""

from __future__ import annotations

from typing import Any

from gitops_gpu import names
from gitops_gpu.sync.upgrade_holds import Change, decide

WHY = "waiting for window: opens Tue 02:00 Europe/Berlin (in 5h12m)"


def node(
    name: str, state: str | None = "upgrade-required", skip: str | None = None, ours: bool = False
) -> dict[str, Any]:
    labels = {names.UPGRADE_STATE_LABEL: state} if state else {}
    if skip is not None:
        labels[names.UPGRADE_SKIP_LABEL] = skip
    annotations = {names.UPGRADE_HOLD_ANNOTATION: "earlier reason"} if ours else {}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def test_only_nodes_not_started_are_held() -> None:
    nodes = [
        node("waiting"),
        node("draining", "drain-required"),
        node("done", "upgrade-done"),
        node("new", None),
        node("skip-false", skip="false"),  # "false" means the same as absent
    ]
    holds = {n["metadata"]["name"]: WHY for n in nodes}
    assert decide(nodes, holds) == [Change("waiting", WHY), Change("skip-false", WHY)]


def test_someone_elses_skip_label_is_never_touched() -> None:
    theirs = node("theirs", skip="true")
    assert decide([theirs], {"theirs": WHY}) == []
    assert decide([theirs], {}) == []  # nor removed when nothing is held


def test_a_hold_is_written_once_and_released_when_the_stage_moves() -> None:
    held = node("held", skip="true", ours=True)
    assert decide([held], {"held": WHY}) == []
    assert decide([held], {}) == [Change("held", None)]
    # Ours on a node that went on meanwhile (the operator raced the label): released too.
    raced = node("raced", "upgrade-done", skip="true", ours=True)
    assert decide([raced], {}) == [Change("raced", None)]


def test_nodes_outside_held_stages_are_left_alone() -> None:
    assert decide([node("free")], {"other": WHY}) == []
