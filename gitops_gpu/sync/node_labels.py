"""A cached Node's labels: one mapping shared by the nodes of a shape, plus the node's name.

The nodes of a pool carry the same labels (GPU product, driver, MIG and plugin configs, the
pool's selector) but for ``kubernetes.io/hostname``, whose value is the node's name. As a dict
per node that was ~900 bytes at 22 labels; :class:`SharedLabels` is ~120: the labels other
than those equal to the name are kept once per distinct set, the rest are named by key.

Read-only, like every projection (``sync/slim.py``): ``get``, ``[]``, ``in``, iteration and
``==`` with any mapping behave as the dict's did. ``dict(labels)`` gives a plain copy (for JSON).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gitops_gpu.kept import Kept

# Distinct label sets (less the node's name), each kept once; a fleet whose every node carries
# a label of its own shares nothing and gets a copy each, as before.
_BASES: Kept[tuple[tuple[str, str], ...], dict[str, str]] = Kept(4096)


class SharedLabels(Mapping[str, str]):
    __slots__ = ("_base", "_name", "_named")

    def __init__(self, base: dict[str, str], named: tuple[str, ...], name: str) -> None:
        self._base = base  # shared: never written
        self._named = named  # the keys whose value is the node's name
        self._name = name

    def __getitem__(self, key: str) -> str:
        if key in self._named:
            return self._name
        return self._base[key]

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._named:
            return self._name
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._named or key in self._base

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from self._named

    def __len__(self) -> int:
        return len(self._base) + len(self._named)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SharedLabels):
            same_base = self._base is other._base or self._base == other._base
            same_named = self._named == other._named
            if same_base and same_named and (not self._named or self._name == other._name):
                return True  # the usual case: one node's labels, before and after
            if self._name == other._name and not same_base:  # the shapes differ
                return False
            # Another order, or two names: bases split by the name compare as whole mappings
            return dict(self.items()) == dict(other.items())
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a mapping: equal by content

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def shared(labels: Mapping[str, str], name: str) -> SharedLabels:
    """``labels`` (interned strings) of the node ``name``, its shape's part kept once."""
    named = tuple(k for k, v in labels.items() if v == name)
    items = tuple((k, v) for k, v in labels.items() if v != name)
    base = _BASES.get(items)
    if base is None:
        base = _BASES.one(items, dict(items))
    return SharedLabels(base, named, name)
