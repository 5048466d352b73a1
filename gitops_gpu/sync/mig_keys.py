"""Which layouts the mig-parted ConfigMap built from the fleet repo holds after a stage's apply.

The same rule as the device-plugin keys (sync/sharing_keys.py), one level down: the ConfigMap
has one key, ``config.yaml``, and its ``mig-configs`` hold a layout per pool and version,
``<pool>-<digest>`` (fleet/mig_layouts.py). A stage writes its own pools' layouts at the commit
it adopts and keeps their older ones while a node still names them; other stages' layouts stay
as the live ConfigMap has them; ``all-disabled`` is always there.

Pure: the compiled and live ConfigMaps and the nodes in, the manifest to apply out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gitops_gpu import names
from gitops_gpu.fleet import mig_layouts, sharing

Obj = Mapping[str, Any]


def named_layouts(nodes: Sequence[Obj]) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        value = (node["metadata"].get("labels") or {}).get(names.MIG_CONFIG_LABEL)
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
    key = mig_layouts.CONFIG_KEY
    live_layouts = mig_layouts.parse(((live or {}).get("data") or {}).get(key))
    built = mig_layouts.parse((compiled.get("data") or {}).get(key))
    named = named_layouts(nodes)
    chosen, all_pools = set(selected), set(pools)
    layouts: dict[str, Any] = dict(mig_layouts.BUILTIN)
    for name, entries in live_layouts.items():
        own = sharing.owners(name, all_pools)
        if name in named or (own and not own & chosen):
            layouts[name] = entries
    for name, entries in built.items():
        if sharing.owners(name, all_pools) & chosen:
            layouts[name] = entries
    return {**compiled, "data": {key: mig_layouts.render(layouts)}}
