"""A GPU Operator Helm chart as the fleet repo holds it (a directory or a .tgz), read without
Helm: its Chart.yaml, its default values, the values its templates read, its subcharts.

The chart ships no values schema, so Helm ignores a misspelt key silently
(``daemonset.updateStrategy`` for ``daemonsets.updateStrategy``). A key of the fleet's values
file is known when the chart's values.yaml has it, a template reads it (``.Values.a.b``: the
operator's image ``operator.version`` is commented out in values.yaml and read in
_helpers.tpl), or it lies below a value the chart leaves free (a map with no keys, a list, a
scalar: ``nodeSelector: {}``). Values under a subchart's name are checked against the
subchart; ``global`` is any chart's.
"""

from __future__ import annotations

import difflib
import io
import re
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet.yamlio import Document, PathKey

MAX_CHART_BYTES = 64 << 20  # unpacked; the GPU Operator's chart is about 1 MiB
MAX_MEMBERS = 5000
_VALUES_REF = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


@dataclass(frozen=True)
class Chart:
    name: str
    version: str
    app_version: str
    defaults: Mapping[str, Any]
    referenced: frozenset[str]  # dotted .Values paths the templates read
    subcharts: Mapping[str, Chart] = field(default_factory=dict)  # by values key (alias)
    # crds/*.yaml of this chart and its subcharts, unparsed (preflight parses them, cached)
    crd_files: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class UnknownKey:
    path: PathKey  # in the values file
    line: int
    suggestion: str | None


def chart_files(path: Path) -> dict[str, bytes]:
    """Chart-relative name -> content, from a chart directory or a packaged .tgz."""
    if path.is_dir():
        out: dict[str, bytes] = {}
        total = 0
        for p in sorted(path.rglob("*")):
            if p.is_symlink():
                raise FleetError("a chart may hold no symlink", file=str(p), fix="vendor the file")
            if p.is_file():
                data = p.read_bytes()
                total += len(data)
                _bound(total, len(out), path)
                out[p.relative_to(path).as_posix()] = data
        return out
    return _tgz_files(path.read_bytes(), str(path))


def _bound(total: int, count: int, where: Path | str) -> None:
    if total > MAX_CHART_BYTES or count > MAX_MEMBERS:
        raise FleetError(
            f"the chart unpacks to over {MAX_CHART_BYTES} bytes or {MAX_MEMBERS} files",
            file=str(where),
            fix="name the GPU Operator's own chart",
        )


def _tgz_files(blob: bytes, where: str) -> dict[str, bytes]:
    """A packaged chart: its one top folder (``gpu-operator/``) stripped."""
    out: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                parts = PurePosixPath(member.name).parts
                if len(parts) < 2 or ".." in parts or member.name.startswith("/"):
                    continue
                total += member.size
                _bound(total, len(out), where)
                fh = tar.extractfile(member)
                if fh is not None:
                    out["/".join(parts[1:])] = fh.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise FleetError(
            f"is not a packaged Helm chart: {exc}", file=where, fix="run `helm package` on it"
        ) from None
    return out


def _yaml_map(files: Mapping[str, bytes], name: str, where: str) -> dict[str, Any]:
    data = files.get(name)
    if data is None:
        return {}
    try:
        doc = YAML(typ="safe", pure=True).load(data.decode("utf-8"))
    except (YAMLError, UnicodeDecodeError) as exc:
        raise FleetError(f"{name} does not parse: {exc}", file=where, fix="fix the chart") from None
    return doc if isinstance(doc, dict) else {}


def read_chart(files: Mapping[str, bytes], where: str = "chart") -> Chart:
    if "Chart.yaml" not in files:
        raise FleetError(
            "is not a Helm chart: it has no Chart.yaml",
            file=where,
            fix="name the chart's folder (deployments/gpu-operator in the operator's source) "
            "or its packaged .tgz",
        )
    meta = _yaml_map(files, "Chart.yaml", where)
    referenced: set[str] = set()
    for name, data in files.items():
        if name.startswith("templates/"):
            referenced.update(m[1:] for m in _VALUES_REF.findall(data.decode("utf-8", "replace")))
    aliases = {
        str(d.get("name")): str(d.get("alias") or d.get("name"))
        for d in meta.get("dependencies") or []
        if isinstance(d, dict)
    }
    subcharts: dict[str, Chart] = {}
    crds: dict[str, bytes] = {}
    for sub_name, sub_files in _subchart_files(files, where):
        sub = read_chart(sub_files, f"{where}/charts/{sub_name}")
        subcharts[aliases.get(sub.name, sub.name)] = sub
        crds.update({f"charts/{sub_name}/{k}": v for k, v in sub.crd_files.items()})
    for name in sorted(files):
        if name.startswith("crds/") and name.endswith((".yaml", ".yml")):
            crds[name] = files[name]
    return Chart(
        name=str(meta.get("name", "")),
        version=str(meta.get("version", "")),
        app_version=str(meta.get("appVersion", "")),
        defaults=_yaml_map(files, "values.yaml", where),
        referenced=frozenset(referenced),
        subcharts=subcharts,
        crd_files=crds,
    )


def _subchart_files(
    files: Mapping[str, bytes], where: str
) -> Iterator[tuple[str, dict[str, bytes]]]:
    dirs: dict[str, dict[str, bytes]] = {}
    for name, data in files.items():
        parts = name.split("/")
        if parts[0] != "charts" or len(parts) < 2:
            continue
        if len(parts) == 2 and name.endswith(".tgz"):
            yield parts[1], _tgz_files(data, f"{where}/{name}")
        elif len(parts) > 2:
            dirs.setdefault(parts[1], {})["/".join(parts[2:])] = data
    yield from sorted(dirs.items())


def unknown_keys(chart: Chart, values: Document) -> list[UnknownKey]:
    """The keys of ``values`` that ``chart`` neither defaults nor reads."""
    out: list[UnknownKey] = []
    if isinstance(values.data, dict):
        _walk(chart, values, values.data, (), (), chart.defaults, out)
    return out


def _walk(
    chart: Chart,
    values: Document,
    given: Mapping[str, Any],
    path: PathKey,
    rel: tuple[str, ...],
    defaults: Mapping[str, Any],
    out: list[UnknownKey],
) -> None:
    for raw, value in given.items():
        key = str(raw)
        here = (*path, key)
        if not rel and key == "global":
            continue
        if not rel and key in chart.subcharts:
            sub = chart.subcharts[key]
            if isinstance(value, dict):
                _walk(sub, values, value, here, (), sub.defaults, out)
            continue
        dotted = ".".join((*rel, key))
        if key in defaults:
            child = defaults[key]
            if isinstance(child, dict) and child and isinstance(value, dict):
                _walk(chart, values, value, here, (*rel, key), child, out)
            continue
        if _read(chart.referenced, dotted):
            continue  # read by a template: what lies below is the template's business
        siblings = set(defaults) | _children(chart.referenced, ".".join(rel))
        close = difflib.get_close_matches(key, sorted(siblings), n=1, cutoff=0.75)
        out.append(UnknownKey(here, values.where(here)[0], close[0] if close else None))


def _read(referenced: frozenset[str], dotted: str) -> bool:
    return dotted in referenced or any(r.startswith(dotted + ".") for r in referenced)


def _children(referenced: frozenset[str], prefix: str) -> set[str]:
    lead = prefix + "." if prefix else ""
    return {r[len(lead) :].split(".")[0] for r in referenced if r.startswith(lead) and r != prefix}
