"""Deterministic YAML for compiled objects: same input, byte-identical output.

Keys are sorted at every level, block style throughout, no line folding, and strings that a
YAML 1.1 reader (kubectl, sigs.k8s.io/yaml) would take for a bool, null or number are quoted,
so ``defaultMode: "on"`` stays a string whoever reads the file.

The output is ruamel.yaml's. A document whose strings are all plain (no quotes, escapes,
newlines, non-ASCII, edge spaces or number-like text) is emitted by libyaml instead (PyYAML's
C emitter, 10x faster: ``compile --out`` of 2,000 pools spent 26 s in ruamel's pure one), which
writes exactly the same bytes for such documents (tests/unit/fleet/test_fleet_render_fast.py);
any other document goes through ruamel, so the bytes never depend on the path taken.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.representer import SafeRepresenter

from gitops_gpu.fleet.compiled import ClusterTarget, CompiledFleet, PoolTarget

# YAML 1.1 implicit scalars (bool, null, int, float incl. sexagesimal) that 1.2 reads as strings.
_YAML11 = re.compile(
    r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF"
    r"|~|null|Null|NULL|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?|[-+]?0b[01_]+"
    r"|[-+]?0[0-7_]+|[-+]?0x[0-9a-fA-F_]+|\.inf|\.Inf|\.INF|\.nan|\.NaN|\.NAN)$"
)


def _represent_str(rep: SafeRepresenter, data: str) -> Any:
    if _YAML11.match(data):
        return rep.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    return rep.represent_str(data)


def _yaml() -> YAML:
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.width = 1 << 16
    y.representer.add_representer(str, _represent_str)
    return y


def _plain(data: Any) -> Any:
    """Mappings to sorted dicts, sequences to lists (the dumper only knows plain types)."""
    if isinstance(data, Mapping):
        return {str(k): _plain(data[k]) for k in sorted(data, key=str)}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    return data


# Strings both emitters write alike, unquoted or single-quoted by _YAML11; anything else (a
# YAML 1.2 number such as 1e3 or 0o17 that ruamel quotes, quotes, escapes) takes ruamel's path.
_PLAIN = re.compile(r"^[A-Za-z0-9_./:=@%+-]([A-Za-z0-9_./:=@%+, -]*[A-Za-z0-9_./:=@%+-])?$")
_NUMBER12 = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^0o[0-7]+$")


def _plain_string(data: str) -> bool:
    if not data:
        return True  # '' from both
    return bool(_PLAIN.match(data)) and not _NUMBER12.match(data) and ": " not in data


_RESOLVED_LEN = 64


def _fast_dumper() -> type | None:
    try:
        from yaml import CSafeDumper  # noqa: PLC0415
    except ImportError:  # PyYAML built without libyaml: ruamel does it all
        return None

    resolver: Any = CSafeDumper(io.StringIO())  # the tables are the class's; any instance

    @functools.lru_cache(maxsize=8192)
    def remembered(kind: Any, value: str, implicit: Any) -> Any:
        return resolver.resolve(kind, value, implicit)

    class Dumper(CSafeDumper):
        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            # libyaml's serializer asks the Python resolver twice per scalar; the answers
            # repeat across 4,000 objects
            if isinstance(value, str) and len(value) <= _RESOLVED_LEN:
                return remembered(kind, value, implicit)
            return resolver.resolve(kind, value, implicit)

    return Dumper


_FAST = _fast_dumper()
_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


def _fast_node(data: Any) -> Any:
    """The node tree PyYAML's SafeRepresenter would build for ``data`` (block style, YAML 1.1
    look-alikes single-quoted), or None when a string is not plain and ruamel must write the
    document. Built here, not by the representer: its per-object bookkeeping (alias
    detection, representer lookup) was two thirds of rendering 2,000 pools."""
    from yaml import nodes  # noqa: PLC0415 - only with libyaml, which _FAST has checked

    def build(value: Any) -> Any:
        kind = type(value)
        if kind is str:
            if not _plain_string(value):
                raise _NotPlainError
            return nodes.ScalarNode(_STR, value, style="'" if _YAML11.match(value) else None)
        if kind is dict:
            return nodes.MappingNode(
                _MAP, [(build(k), build(v)) for k, v in value.items()], flow_style=False
            )
        if kind is list:
            return nodes.SequenceNode(_SEQ, [build(v) for v in value], flow_style=False)
        if kind is bool:
            return nodes.ScalarNode("tag:yaml.org,2002:bool", "true" if value else "false")
        if kind is int:
            return nodes.ScalarNode("tag:yaml.org,2002:int", str(value))
        if value is None:
            return nodes.ScalarNode("tag:yaml.org,2002:null", "null")
        if kind is float:
            return _FLOATS.represent_float(value)
        raise _NotPlainError

    try:
        return build(data)
    except _NotPlainError:
        return None


class _NotPlainError(Exception):
    """A value libyaml's path does not write as ruamel does."""


def _float_representer() -> Any:
    try:
        from yaml.representer import SafeRepresenter as PyYamlRepresenter  # noqa: PLC0415
    except ImportError:  # pragma: no cover - PyYAML is a dependency
        return None
    return PyYamlRepresenter()


_FLOATS = _float_representer()


def render_yaml(data: Any) -> str:
    """One YAML document, keys sorted, deterministic."""
    plain = _plain(data)
    node = _fast_node(plain) if _FAST is not None else None
    if node is not None:
        import yaml  # noqa: PLC0415

        out: str = yaml.serialize(node, Dumper=_FAST, width=1 << 16)
        return out
    buf = io.StringIO()
    _yaml().dump(plain, buf)
    return buf.getvalue()


def node_label_doc(pool: PoolTarget) -> dict[str, Any]:
    """The node-label set of a pool as a document (not a Kubernetes object)."""
    return {
        "pool": pool.name,
        "cluster": pool.cluster,
        "stage": pool.stage,
        "nodeSelector": dict(pool.node_selector),
        "labels": dict(pool.node_labels),
    }


def render_cluster(cluster: ClusterTarget) -> dict[str, str]:
    """relative file name -> YAML, one file per object, for ``gitops-gpu compile``."""
    out = {
        "clusterpolicy-" + str(cluster.cluster_policy["metadata"]["name"]) + ".yaml": render_yaml(
            cluster.cluster_policy
        )
    }
    for cm in cluster.config_maps:
        out["configmap-" + str(cm["metadata"]["name"]) + ".yaml"] = render_yaml(cm)
    for name in sorted(cluster.pools):
        pool = cluster.pools[name]
        out[f"nvidiadriver-{name}.yaml"] = render_yaml(pool.driver)
        out[f"node-labels/{name}.yaml"] = render_yaml(node_label_doc(pool))
    return out


def render_fleet(compiled: CompiledFleet) -> dict[str, str]:
    """``<cluster>/<file>`` -> YAML for every cluster of the fleet."""
    out: dict[str, str] = {}
    for cname in sorted(compiled.clusters):
        for rel, text in render_cluster(compiled.clusters[cname]).items():
            out[f"{cname}/{rel}"] = text
    return out
