"""kept.Kept: equal values are one object, and the cache never grows past its limit."""

from __future__ import annotations

from gitops_gpu.kept import Kept


def test_the_first_value_for_a_key_is_the_one_kept() -> None:
    kept: Kept[str, list[int]] = Kept(4)
    first, second = [1], [1]
    assert kept.one("a", first) is first
    assert kept.one("a", second) is first
    assert kept.get("a") is first and kept.get("b") is None


def test_a_full_cache_starts_again_instead_of_growing() -> None:
    kept: Kept[int, str] = Kept(3)
    for i in range(10):
        kept.one(i, str(i))
        assert len(kept) <= 3
    late = "9 again"
    assert kept.one(9, late) == "9"  # still kept since the last restart
    assert kept.one(0, "0 again") == "0 again"  # long gone: this one is kept now
