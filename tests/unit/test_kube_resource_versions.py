"""resourceVersion order as KEP-5504 defines it: numeric, not by string; opaque otherwise."""

import pytest

from gitops_gpu.kube import compare_resource_versions


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("9", "10", -1),  # a string comparison would call 9 newer
        ("10", "9", 1),
        ("123456", "123456", 0),
        ("99999999999999999999", "100000000000000000000", -1),  # no width limit
        ("5", "6", -1),
    ],
)
def test_comparable_versions_order_by_number(a: str, b: str, order: int) -> None:
    assert compare_resource_versions(a, b) == order


@pytest.mark.parametrize(
    ("a", "b"),
    [("", "5"), ("5", "0"), ("07", "8"), ("12a", "13"), ("5", "None"), ("٣", "4"), ("-1", "2")],
)
def test_versions_that_are_not_comparable_say_so(a: str, b: str) -> None:
    assert compare_resource_versions(a, b) is None
    assert compare_resource_versions(b, a) is None
