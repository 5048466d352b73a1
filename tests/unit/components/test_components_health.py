"""Health ordering and pool aggregation (worst-of with counts)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gitops_gpu.components.health import Health, NodeHealth, RungResult, aggregate, result


def node(name: str, h: Health) -> NodeHealth:
    return NodeHealth(name, h, f"x: {h}", (RungResult("x", h, f"x: {h}"),))


def test_order() -> None:
    assert Health.HEALTHY < Health.PROGRESSING < Health.DEGRADED < Health.UNKNOWN
    assert str(Health.PROGRESSING) == "Progressing"


def test_result_prefixes_component() -> None:
    r = result("gfd", Health.PROGRESSING, "labels missing")
    assert (r.reason, r.ok, r.skipped) == ("gfd: labels missing", False, False)


def test_all_healthy() -> None:
    pool = aggregate("p", [node("b", Health.HEALTHY), node("a", Health.HEALTHY)])
    assert pool.health is Health.HEALTHY
    assert pool.reason == "p: 2 Healthy"
    assert [n.node for n in pool.nodes] == ["a", "b"]


def test_unknown_beats_degraded() -> None:
    pool = aggregate("p", [node("a", Health.DEGRADED), node("b", Health.UNKNOWN)])
    assert pool.health is Health.UNKNOWN
    assert pool.reason == "p: 1 Degraded, 1 Unknown (e.g. b: x: Unknown)"


def test_empty_pool_is_unknown() -> None:
    pool = aggregate("p", [])
    assert (pool.health, pool.total) == (Health.UNKNOWN, 0)
    assert "no nodes" in pool.reason


JUDGED = [h for h in Health if h is not Health.SKIPPED]  # Skipped: test_components_unavailable


@given(st.lists(st.sampled_from(JUDGED), min_size=1, max_size=30))
def test_worst_of_and_counts(healths: list[Health]) -> None:
    pool = aggregate("p", [node(f"n{i}", h) for i, h in enumerate(healths)])
    assert pool.health is max(healths)
    assert pool.total == len(healths)
    assert all(pool.count(h) == healths.count(h) for h in Health)


def test_the_pool_names_a_degraded_node_before_one_still_upgrading() -> None:
    # "a" sorts first and is only upgrading; "b" is what is actually wrong, and is named
    pool = aggregate("p", [node("b", Health.DEGRADED), node("a", Health.PROGRESSING)])
    assert pool.first_failure == f"b x: {Health.DEGRADED}"
    upgrading = aggregate("p", [node("b", Health.HEALTHY), node("a", Health.PROGRESSING)])
    assert upgrading.first_failure == f"a x: {Health.PROGRESSING}"
    assert aggregate("p", [node("a", Health.HEALTHY)]).first_failure is None
