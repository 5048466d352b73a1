"""GG021's pair search finds exactly the nested selectors a comparison of every pair finds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gitops_gpu.preflight.checks import nested_pairs

LABELS = st.frozensets(
    st.tuples(st.sampled_from("abcd"), st.sampled_from("xy")), max_size=3
).filter(lambda s: len({k for k, _ in s}) == len(s))  # a selector has one value per key


def _every_pair(sels: list[frozenset[tuple[str, str]]]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i in range(len(sels))
        for j in range(i + 1, len(sels))
        if sels[i] <= sels[j] or sels[j] <= sels[i]
    ]


@given(st.lists(LABELS, max_size=12))
def test_nested_pairs_equal_the_comparison_of_every_pair(
    sels: list[frozenset[tuple[str, str]]],
) -> None:
    assert nested_pairs(sels) == _every_pair(sels)


def test_an_empty_selector_nests_with_every_pool_and_distinct_ones_with_none() -> None:
    own = [frozenset({("pool", str(i))}) for i in range(500)]
    assert nested_pairs(own) == []
    assert nested_pairs([frozenset(), *own[:3]]) == [(0, 1), (0, 2), (0, 3)]
