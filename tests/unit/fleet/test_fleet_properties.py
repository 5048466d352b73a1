"""Properties of compile over generated fleet repos.

1. Deterministic: the same repo, written with keys in any order, in any directory, compiles to
   byte-identical YAML.
2. Nothing a user wrote is lost: every leaf of every pool's ClusterPolicy file (and of the base)
   shows up in the compiled ClusterPolicy or in the pool's NVIDIADriver, at the place the
   compile rules (PRODUCT.md section 2, the operator's Helm chart renames) say.
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitops_gpu.fleet.compile import compile_fleet
from gitops_gpu.fleet.loader import load_repo
from gitops_gpu.fleet.merge import prune_nulls
from gitops_gpu.fleet.render import render_fleet
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.fleet.yamlio import iter_leaves, parse_single

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_text = st.text(alphabet=string.ascii_letters + string.digits + " -_.:/%#'\"", max_size=10)
_scalar = st.one_of(
    _text,
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 3)),
)
_key = st.one_of(
    st.sampled_from(["name", "config", "configMapName", "image", "env", "x"]),
    st.text(alphabet=string.ascii_letters, min_size=1, max_size=6),
)
_tree = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_key, inner, max_size=4)),
    max_leaves=12,
)
_DRIVER_KEYS = [
    "version",
    "image",
    "repository",
    "kernelModuleType",
    "usePrecompiled",
    "rdma",
    "manager",
    "repoConfig",
    "licensingConfig",
    "virtualTopology",
    "upgradePolicy",
    "env",
    "startupProbe",
    "kernelModuleConfig",
    "secretEnv",
]
# upgradePolicy stays a map: replacing it would drop the base's autoUpgrade, which is
# cluster-scoped (a real conflict, not what this property is about)
_driver = st.dictionaries(st.sampled_from(_DRIVER_KEYS), _tree, max_size=6).flatmap(
    lambda d: st.fixed_dictionaries(
        {
            **{k: st.just(v) for k, v in d.items() if k != "upgradePolicy"},
            **(
                {"upgradePolicy": st.dictionaries(_key, _tree, max_size=3)}
                if "upgradePolicy" in d
                else {}
            ),
        }
    )
)
_pool_policy = st.fixed_dictionaries(
    {"driver": _driver},
    optional={
        "gds": st.dictionaries(_key, _tree, max_size=3),
        "gdrcopy": st.dictionaries(_key, _tree, max_size=3),
    },
)
_cluster_extra = st.dictionaries(
    st.sampled_from(["toolkit", "validator", "migManager", "cdi", "operator", "custom"]),
    st.dictionaries(_key, _tree, max_size=3),
    max_size=3,
)


@st.composite
def fleets(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(
        st.lists(
            st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    pools = {n: {"nodeSelector": {"pool": n}} for n in names}
    for n in names:
        if draw(st.booleans()):
            pools[n]["maxUnavailable"] = draw(st.integers(1, 5))
    base = minimal_base()
    for key, value in draw(_cluster_extra).items():
        base["spec"][key] = value
    policies = {n: draw(_pool_policy) for n in names}
    return {"pools": pools, "base": base, "policies": policies}


def _reversed(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _reversed(data[k]) for k in reversed(list(data))}
    if isinstance(data, list):
        return [_reversed(v) for v in data]
    return data


def _write(root: Path, fleet: dict[str, Any], *, shuffle: bool) -> Path:
    write_repo(
        root,
        fleet["pools"],
        base=fleet["base"],
        overlays={n: overlay(p) for n, p in fleet["policies"].items()},
    )
    if shuffle:  # the same content as JSON (valid YAML) with every map's keys reversed
        for path in root.rglob("*.yaml"):
            data = parse_single(path.name, path.read_text(encoding="utf-8")).data
            path.write_text(json.dumps(_reversed(data)), encoding="utf-8")
    return root


@SETTINGS
@given(fleets())
def test_compile_is_deterministic(fleet: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        one = render_fleet(
            compile_fleet(load_repo(_write(Path(a) / "x", fleet, shuffle=False)), "c")
        )
        two = render_fleet(
            compile_fleet(load_repo(_write(Path(b) / "y", fleet, shuffle=True)), "c")
        )
    assert one == two


def _expected(path: tuple[Any, ...], siblings: dict[str, Any], budget_set: bool) -> Any:
    """Where a leaf of a pool's ClusterPolicy lands: ("cp"|"nvd", path) or None if replaced."""
    head = path[1]
    if head in ("gds", "gdrcopy"):
        return "nvd", ("spec", *path[1:])
    if head != "driver":
        return "cp", path
    if len(path) == 2:
        return None  # an empty driver map: nothing to keep
    key, rest = path[2], path[3:]
    if key == "enabled":
        return "cp", path
    topo = siblings.get("virtualTopology")
    if key == "virtualTopology" and rest[:1] == ("config",) and "name" not in topo:
        return "nvd", ("spec", "virtualTopologyConfig", "name", *rest[1:])
    if key == "virtualTopology":
        return "nvd", ("spec", "virtualTopologyConfig", *rest)
    if (
        key in ("repoConfig", "licensingConfig")
        and rest[:1] == ("configMapName",)
        and "name" not in siblings.get(key, {})
    ):
        return "nvd", ("spec", key, "name", *rest[1:])
    if key == "upgradePolicy" and rest[:1] == ("maxUnavailable",) and budget_set:
        return None  # pool.yaml's maxUnavailable is the pool's budget
    if key == "upgradePolicy" and not rest:
        return "nvd", ("spec", key)  # an empty map (the pool's budget may fill it)
    return "nvd", ("spec", key, *rest)


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        data = data[p]
    return data


@SETTINGS
@given(fleets())
def test_no_user_field_is_lost(fleet: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        compiled = compile_fleet(load_repo(_write(Path(tmp) / "r", fleet, shuffle=False)), "c")
    cp = compiled.clusters["default"].cluster_policy
    for name, pool_policy in fleet["policies"].items():
        doc = prune_nulls({"spec": pool_policy})
        driver = compiled.pool(name).driver
        budget = "maxUnavailable" in fleet["pools"][name]
        for path, value in iter_leaves(doc):
            where = _expected(path, doc["spec"].get("driver", {}), budget)
            if where is None:
                continue
            target = _at(cp if where[0] == "cp" else driver, where[1])
            if value == {}:  # an empty map merges with the base's: it only has to be a map
                assert isinstance(target, dict), (name, path)
            else:
                assert target == value, (name, path)
    for path, value in iter_leaves(prune_nulls({"spec": fleet["base"]["spec"]})):
        if path[1] not in ("driver", "gds", "gdrcopy"):
            if value == {}:  # compile may fill an empty map (daemonsets.updateStrategy)
                assert isinstance(_at(cp, path), dict), path
            else:
                assert _at(cp, path) == value, path
