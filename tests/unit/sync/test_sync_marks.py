"""The node marks (sync/marks.py) that let an idle pass skip its node walks: each step given the
marks decides exactly what it decides walking every node, and the Reader marks once per node
cache version."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from gitops_gpu import names, waits
from gitops_gpu.components import holders
from gitops_gpu.snapshot import Reader
from gitops_gpu.sync import marks, upgrade_holds, verify_nodes
from gitops_gpu.sync.live import ChangeLog

STATES = [None, "upgrade-done", "upgrade-required", *sorted(holders.WAIT_STATES)]
ANNOTATIONS = [
    names.UPGRADE_HOLD_ANNOTATION,
    marks.SINCE_ANNOTATION,
    names.VERIFIED_ANNOTATION,
    "nvidia.com/gpu-driver-upgrade-enabled",
]
TAINTS = [names.UNVERIFIED_TAINT, "nvidia.com/gpu", "node.kubernetes.io/not-ready"]


@st.composite
def a_node(draw: Any, index: int) -> dict[str, Any]:
    labels: dict[str, str] = {}
    state = draw(st.sampled_from(STATES))
    if state is not None:
        labels[names.UPGRADE_STATE_LABEL] = state
    if draw(st.booleans()):
        labels[names.UPGRADE_SKIP_LABEL] = draw(st.sampled_from(["true", "false"]))
    keys = draw(st.lists(st.sampled_from(ANNOTATIONS), unique=True))
    annotations = {k: "drain-required@2026-12-01T00:00:00Z" for k in keys}
    taints = [{"key": k, "effect": "NoSchedule"} for k in draw(st.lists(st.sampled_from(TAINTS)))]
    meta: dict[str, Any] = {"name": f"gpu-{index}", "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"taints": taints} if taints else {}}


@st.composite
def fleets(draw: Any) -> list[dict[str, Any]]:
    size = draw(st.integers(0, 8))
    return [draw(a_node(i)) for i in range(size)]


def test_each_mark_names_only_its_nodes() -> None:
    idle = {
        "metadata": {
            "name": "idle",
            "labels": {names.UPGRADE_STATE_LABEL: "upgrade-done"},
            "annotations": {"nvidia.com/gpu-driver-upgrade-enabled": "true"},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
    }
    draining = {
        "metadata": {"name": "draining", "labels": {names.UPGRADE_STATE_LABEL: "drain-required"}}
    }
    noted = {"metadata": {"name": "noted", "annotations": {marks.SINCE_ANNOTATION: "x"}}}
    held = {"metadata": {"name": "held", "annotations": {names.UPGRADE_HOLD_ANNOTATION: "why"}}}
    tainted = {
        "metadata": {"name": "tainted"},
        "spec": {"taints": [{"key": names.UNVERIFIED_TAINT, "effect": "NoSchedule"}]},
    }
    found = marks.mark([idle, draining, noted, held, tainted])
    assert found.waiting == {"draining", "noted"}
    assert found.held == {"held"}
    assert found.tainted == {"tainted"}
    assert marks.mark([idle]) == marks.NodeMarks(frozenset(), frozenset(), frozenset())


@settings(max_examples=300, deadline=None)
@given(nodes=fleets(), held_names=st.sets(st.sampled_from([f"gpu-{i}" for i in range(8)])))
def test_the_hold_step_decides_the_same_with_marks(
    nodes: list[dict[str, Any]], held_names: set[str]
) -> None:
    holds = {n: "window closed" for n in held_names}
    marked = marks.mark(nodes)
    assert upgrade_holds.decide(nodes, holds, marked) == upgrade_holds.decide(nodes, holds)
    assert upgrade_holds.decide(nodes, {}, marked) == upgrade_holds.decide(nodes, {})


@settings(max_examples=300, deadline=None)
@given(nodes=fleets())
def test_the_taint_step_decides_the_same_with_marks(nodes: list[dict[str, Any]]) -> None:
    marked = marks.mark(nodes)
    # A pool that does not verify new nodes only sheds our taint.
    assert verify_nodes.decide(None, "c0ffee", None, nodes, marked) == verify_nodes.decide(
        None, "c0ffee", None, nodes
    )


class _NoClient:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the wait step asked the cluster ({name}) for an idle fleet")


@settings(max_examples=300, deadline=None)
@given(nodes=fleets())
def test_the_wait_step_needs_only_the_waiting_nodes(nodes: list[dict[str, Any]]) -> None:
    """What read() finds (with no target: no driver, so no pod LIST) concerns only the nodes
    marked waiting: the rest could be left out of its walk."""
    marked = marks.mark(nodes)
    whole = waits.read(cast(Any, _NoClient()), {"p": nodes}, {}, 0.0)
    some = [n for n in nodes if n["metadata"]["name"] in marked.waiting]
    assert whole == waits.read(cast(Any, _NoClient()), {"p": some}, {}, 0.0)


class _Informer:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self._items, self.version = items, 1

    def items(self) -> list[dict[str, Any]]:
        return list(self._items)

    def by_name(self) -> dict[str, dict[str, Any]]:
        return {}

    def change_log(self) -> ChangeLog:
        return ChangeLog(self, self.version, [], 0, self.version)


def test_the_reader_marks_once_per_node_cache_version() -> None:
    node = {"metadata": {"name": "gpu-1", "labels": {}}}
    nodes = _Informer([node])
    reader = Reader(cast(Any, nodes), cast(Any, _Informer([])), cast(Any, _Informer([])))
    first = reader.informers().marks
    assert first is not None and not first.held
    assert reader.informers().marks is first  # same version: not walked again
    node["metadata"]["annotations"] = {names.UPGRADE_HOLD_ANNOTATION: "why"}
    assert reader.informers().marks is first  # the cache did not say it changed
    nodes.version = 2
    again = reader.informers().marks
    assert again is not None and again.held == {"gpu-1"}


def test_an_idle_pass_reads_no_waits_without_walking() -> None:
    """read_pass with marks that name no waiting node returns before it looks at members."""

    class _Snap:
        class informers:  # noqa: N801
            marks = marks.NodeMarks(frozenset(), frozenset(), frozenset())

        def live_targets(self, commits: Any) -> Any:
            raise AssertionError("an idle pass walked the pools")

    assert waits.read_pass(cast(Any, _NoClient()), cast(Any, _Snap()), {}, 0.0) == waits.Waits()
