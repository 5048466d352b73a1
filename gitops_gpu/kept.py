"""Equal read-only values kept as one object: at 10,000 nodes most nodes' projections and
verdicts read the same (a GPU's MIG mode, "gpu: 8 GPUs healthy"), and one copy per node was
most of the controller's memory. Bounded: a cache that fills starts again, so a fleet with
many distinct values shares less, and nothing grows without limit."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Kept(Generic[K, V]):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._values: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._values.get(key)

    def one(self, key: K, value: V) -> V:
        """The value kept for ``key``, else ``value``, now kept."""
        hit = self._values.get(key)
        if hit is None:
            if len(self._values) >= self.limit:
                self._values.clear()
            hit = self._values[key] = value
        return hit

    def __len__(self) -> int:
        return len(self._values)
