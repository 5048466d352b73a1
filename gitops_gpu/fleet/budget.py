"""A pool's ``maxUnavailable`` as a count of nodes: what label batches, operand rolls, the
ladder's budget and the disruption plan all take from it."""

from __future__ import annotations

import math


def resolve_max_unavailable(value: int | str, total: int) -> int:
    """An int, or a percent of ``total`` rounded up (as the GPU Operator does); at least 1."""
    if isinstance(value, str) and value.endswith("%"):
        count = math.ceil(total * float(value[:-1]) / 100)
    else:
        count = int(value)
    return max(1, count)
