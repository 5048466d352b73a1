"""Hostile fleet repos, generated: any value anywhere, any bytes in any file, deep nesting.

Whatever hypothesis writes into a copy of fleet-repo-example, preflight returns findings (or a
GitopsGpuError for usage problems) and never raises anything else; a repo that still compiles
carries no NaN, infinity or newline-carrying label into the compiled objects.
"""

from __future__ import annotations

import io
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.fleet import yamlio
from gitops_gpu.preflight import run_preflight
from gitops_gpu_dev import paths

FILES = (
    "fleet.yaml",
    "base/clusterpolicy.yaml",
    "nodepools/canary/pool.yaml",
    "nodepools/canary/clusterpolicy.yaml",
    "nodepools/infer-l40s/pool.yaml",
)

hostile_scalars = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 10**30, -(10**30), 0, -1, "", "x\n"]),
    st.sampled_from(["25%\n", "150%", "0%", "99999999999d", ".nan", "1e400", "\x00", None]),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=80),
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*prefix, i))
    return out


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    data[path[0]] = _set(data[path[0]], path[1:], value)
    return data


def _dump(data: Any) -> str:
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(data, out)
    return out.getvalue()


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, str | bytes]:
    rel = draw(st.sampled_from(FILES))
    original = (paths.fleet_example() / rel).read_text()
    kind = draw(st.sampled_from(["value", "value", "value", "text", "bytes", "deep"]))
    if kind == "text":
        return rel, draw(st.text(max_size=400))
    if kind == "bytes":
        return rel, draw(st.binary(max_size=400))
    if kind == "deep":
        depth = draw(st.integers(50, 5000))
        return rel, original + "\nzz: " + "[" * depth + "]" * depth + "\n"
    data = yamlio.parse_single(rel, original).data
    where = draw(st.sampled_from(_paths(data)))
    return rel, _dump(_set(data, where, draw(hostile_values)))


def _no_bad_values(obj: Any) -> None:
    if isinstance(obj, float):
        assert math.isfinite(obj), obj
    elif isinstance(obj, str):
        assert "\n" not in obj or len(obj) > 63, repr(obj)  # only free text may span lines
    elif isinstance(obj, dict):
        for k, v in obj.items():
            assert "\n" not in str(k), repr(k)
            _no_bad_values(v)
    elif isinstance(obj, list):
        for v in obj:
            _no_bad_values(v)


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.lists(mutations(), min_size=1, max_size=3))
def test_preflight_never_raises_on_a_hostile_repo(changes: list[tuple[str, str | bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        shutil.copytree(paths.fleet_example(), root)
        for rel, content in changes:
            target = root / rel
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8", errors="surrogatepass")
        try:
            result = run_preflight(root, commit="hostile", crds_dir=paths.default_crds_dir())
        except GitopsGpuError:
            return  # a usage error, said in one line by the CLI
        if result.compiled is None or not result.ok:
            assert result.findings, "refused without saying why"
            return  # never applied: a commit with error findings fails preflight
        for cluster in result.compiled.clusters.values():
            _no_bad_values(cluster.cluster_policy)
            for pool in cluster.pools.values():
                _no_bad_values(pool.driver)
                for key, value in pool.node_labels.items():
                    assert "\n" not in key and "\n" not in str(value), (key, value)


def test_a_nul_byte_in_spec_base_is_a_finding(tmp_path: Path) -> None:
    """Found by the generator above: `base: "\\0"` raised ValueError out of the loader."""
    root = tmp_path / "fleet"
    shutil.copytree(paths.fleet_example(), root)
    fleet = root / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("base: base/clusterpolicy.yaml", 'base: "\\0"'))
    result = run_preflight(root, commit="nul", crds_dir=paths.default_crds_dir())
    assert any(f.field == "spec.base" and f.severity == "error" for f in result.findings)
