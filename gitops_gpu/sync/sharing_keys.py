"""Which keys the device-plugin ConfigMap built from the fleet repo holds after a stage's apply.

Each pool has its own keys, ``<pool>-<digest>`` (fleet/sharing.py). A stage writes the keys of
its own pools only: its pools' keys at the commit it adopts, and their older keys that a node
still names (its label moves in batches, and a node on the old key must keep finding it). The
keys of other stages' pools are left as the live ConfigMap has them, so stages on different
commits never undo each other's keys. A key of no pool (a removed one) stays while a node names
it. Keys of other field managers are never written: server-side apply leaves them alone.

Pure: the compiled and live ConfigMaps and the nodes in, the manifest to apply out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet import sharing

Obj = Mapping[str, Any]


def named_keys(nodes: Sequence[Obj]) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        value = (node["metadata"].get("labels") or {}).get(names.DEVICE_PLUGIN_CONFIG_LABEL)
        if value:
            out.add(value)
    return out


def desired(
    compiled: Obj,
    live: Obj | None,
    nodes: Sequence[Obj],
    selected: Collection[str],
    pools: Collection[str],
) -> dict[str, Any]:
    """The ConfigMap to apply for a plan of the ``selected`` pools (of the cluster's ``pools``)."""
    live_data: Mapping[str, str] = (live or {}).get("data") or {}
    compiled_data: Mapping[str, str] = compiled.get("data") or {}
    named = named_keys(nodes)
    chosen = set(selected)
    all_pools = set(pools)
    data: dict[str, str] = {}
    for key, value in live_data.items():
        own = sharing.owners(key, all_pools)
        # Kept: a key a node still names (this stage's older one, or a removed pool's), and
        # every key of another stage's pools, as it is.
        if key in named or (own and not own & chosen):
            data[key] = value
    for key, value in compiled_data.items():
        if sharing.owners(key, all_pools) & chosen:
            data[key] = value
    return {**compiled, "data": dict(sorted(data.items()))}
