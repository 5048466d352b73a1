"""A cluster's ``gpuOperator`` release: its chart read and rendered by Helm, and checked.

What the render becomes (docs/operator-upgrades.md): the CRDs, applied first; the operator
(Deployment, RBAC, NFD); and what gitops-gpu leaves out: the chart's ClusterPolicy and
NVIDIADriver (the fleet repo's pools compile those) and Helm hooks (the CRD upgrade Job is what
"CRDs first" replaces; the cleanup Jobs run on ``helm uninstall`` only).

Findings: GG088 (no chart or values file where fleet.yaml says), GG089 (a values key the
chart neither defaults nor reads: Helm ignores it silently), GG090 (operand DaemonSets not
OnDelete: the new operator's operands would move everywhere at once), GG091 (Helm cannot
render the chart), GG092 (the operator image the chart runs is not the declared version).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitops_gpu import helm, names
from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import operator_chart, yamlio
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.loader import FleetRepo
from gitops_gpu.fleet.models import ClusterRef
from gitops_gpu.fleet.render import render_yaml
from gitops_gpu.preflight import crd_cache
from gitops_gpu.preflight.findings import Finding

RELEASE = "gpu-operator"  # the Helm release name NVIDIA's install guide uses
_LEFT_TO_POOLS = {
    ("nvidia.com/v1", "ClusterPolicy"): "compiled from the fleet repo's pools",
    ("nvidia.com/v1alpha1", "NVIDIADriver"): "compiled per pool from the fleet repo",
}


@dataclass(frozen=True)
class Release:
    """One cluster's rendered operator release."""

    cluster: str
    version: str
    chart: operator_chart.Chart
    crds: tuple[Mapping[str, Any], ...]
    objects: tuple[Mapping[str, Any], ...]
    dropped: tuple[tuple[str, str], ...]  # ("Kind/name", why it is not applied)

    @property
    def operator_image(self) -> str | None:
        for obj in self.objects:
            if obj.get("kind") == "Deployment" and _name(obj) == names.OPERATOR_DEPLOYMENT:
                containers = obj["spec"]["template"]["spec"].get("containers") or []
                return str(containers[0].get("image")) if containers else None
        return None


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def split(cluster: str, version: str, chart: operator_chart.Chart, docs: Sequence[Any]) -> Release:
    """The rendered documents as CRDs, the operator's objects and what is left out."""
    crds: list[Mapping[str, Any]] = []
    objects: list[Mapping[str, Any]] = []
    dropped: list[tuple[str, str]] = []
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            continue
        what = f"{doc['kind']}/{_name(doc)}"
        hook = ((doc.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook")
        if hook:
            dropped.append((what, f"a Helm {hook} hook: gitops-gpu runs no hooks"))
        elif (why := _LEFT_TO_POOLS.get((str(doc.get("apiVersion")), doc["kind"]))) is not None:
            dropped.append((what, why))
        elif doc["kind"] == "CustomResourceDefinition":
            crds.append(doc)
        else:
            objects.append(doc)
    return Release(cluster, version, chart, tuple(crds), tuple(objects), tuple(dropped))


def _field(index: int, key: str) -> str:
    return f"spec.clusters[{index}].gpuOperator.{key}"


class _Cluster:
    """Where one cluster's gpuOperator fields are, for findings."""

    def __init__(self, repo: FleetRepo, index: int, ref: ClusterRef) -> None:
        self.repo, self.index, self.ref = repo, index, ref
        assert ref.gpu_operator is not None
        self.op = ref.gpu_operator

    def at(self, key: str) -> tuple[str, int]:
        doc = self.repo.fleet_doc
        return doc.file, doc.where(("spec", "clusters", self.index, "gpuOperator", key))[0]

    def finding(self, code: str, message: str, key: str, fix: str, **kw: Any) -> Finding:
        file, line = self.at(key)
        return Finding.make(
            code,
            f"cluster '{self.ref.name}': {message}",
            file=file,
            line=line,
            field=_field(self.index, key),
            cluster=self.ref.name,
            fix=fix,
            **kw,
        )


def _clusters(repo: FleetRepo) -> Iterator[_Cluster]:
    for index, ref in enumerate(repo.fleet.spec.clusters or []):
        if ref.gpu_operator is not None:
            yield _Cluster(repo, index, ref)


def releases(repo: FleetRepo, tree: Path) -> tuple[dict[str, Release], list[Finding]]:
    """Every cluster's release rendered from ``tree`` (the exported fleet repo)."""
    out: dict[str, Release] = {}
    findings: list[Finding] = []
    for c in _clusters(repo):
        found, release = _one(c, tree)
        findings += found
        if release is not None:
            out[c.ref.name] = release
    return out, findings


def unstaged(repo: FleetRepo, compiled: CompiledFleet) -> Iterator[Finding]:
    """GG090: an operator release moves operands by stage only when they are OnDelete."""
    for c in _clusters(repo):
        if c.ref.name in compiled.clusters:
            yield from _staged(c, compiled)


def _one(c: _Cluster, tree: Path) -> tuple[list[Finding], Release | None]:
    op = c.op
    chart_rel = op.local_chart
    if chart_rel is None:
        chart = None  # remote: Helm fetches it; its values.yaml is not read here
    else:
        try:
            chart = operator_chart.read_chart(
                operator_chart.chart_files(_existing(c, tree, chart_rel, "chart")), chart_rel
            )
        except FleetError as exc:
            return [c.finding("GG088", _plain(exc), "chart", exc.fix)], None
    values_path = None
    found: list[Finding] = []
    if op.values is not None:
        try:
            values_path = _existing(c, tree, op.values, "values")
            doc = yamlio.load_file(values_path, tree)
        except FleetError as exc:
            return [c.finding("GG088", _plain(exc), "values", exc.fix)], None
        if chart is not None:
            found += _unknown(c, chart, doc)
    try:
        text = helm.template(
            # ./ so Helm never reads a local path as a <repo>/<chart> reference
            op.chart if chart_rel is None else f"./{chart_rel}",
            cwd=tree,
            release=RELEASE,
            namespace=c.ref.operator_namespace,
            values=values_path,
            version=op.version,
        )
    except helm.HelmError as exc:
        return [*found, c.finding("GG091", exc.args[0], "chart", exc.fix)], None
    if chart is None:
        return found, None
    release = split(c.ref.name, op.version, chart, crd_cache.load_all_bytes(text.encode()))
    found += _image(c, release)
    return found, release


def _existing(c: _Cluster, tree: Path, rel: str, key: str) -> Path:
    path = tree / rel
    if not path.exists():
        what = "chart (a folder with Chart.yaml, or a .tgz)" if key == "chart" else "values file"
        raise FleetError(
            f"gpuOperator.{key} '{rel}' is not in the fleet repo",
            fix=f"commit the {what} at {rel}, or correct the path",
        )
    return path


def _plain(exc: FleetError) -> str:
    return str(exc.args[0]) if exc.args else str(exc)


def _unknown(c: _Cluster, chart: operator_chart.Chart, doc: yamlio.Document) -> Iterator[Finding]:
    for key in operator_chart.unknown_keys(chart, doc):
        dotted = ".".join(str(p) for p in key.path)
        hint = f"did you mean '{key.suggestion}'? " if key.suggestion else ""
        yield Finding.make(
            "GG089",
            f"cluster '{c.ref.name}': values key '{dotted}' is neither in the chart's "
            f"values.yaml nor read by its templates ({chart.name} {chart.version}): Helm "
            "ignores it without a word",
            file=doc.file,
            line=key.line,
            field=dotted,
            cluster=c.ref.name,
            fix=f"{hint}the chart ships no values schema, so only keys it knows take effect",
        )


def _image(c: _Cluster, release: Release) -> Iterator[Finding]:
    image = release.operator_image
    tag = image.rsplit(":", 1)[-1] if image and ":" in image.rsplit("/", 1)[-1] else None
    if tag is None or tag.lstrip("v") == c.op.version.lstrip("v"):
        return
    yield c.finding(
        "GG092",
        f"the chart runs the operator image {image}, not the declared release {c.op.version}",
        "version",
        f"set operator.version: {c.op.version} in the values file (a chart from the operator's "
        "source tree defaults to its appVersion), or name the release's packaged chart",
    )


def _staged(c: _Cluster, compiled: CompiledFleet) -> Iterator[Finding]:
    policy = compiled.clusters[c.ref.name].cluster_policy
    daemonsets = policy["spec"].get("daemonsets")
    strategy = daemonsets.get("updateStrategy") if isinstance(daemonsets, dict) else None
    if strategy in (None, "OnDelete"):
        return
    allowed = c.op.allow_unstaged_upgrade
    yield c.finding(
        "GG090",
        f"daemonsets.updateStrategy is {strategy}: when the new operator starts, its operand "
        "DaemonSets roll on every node of the cluster at once, not stage by stage"
        + (" (allowUnstagedUpgrade: true says this is meant)" if allowed else ""),
        "allowUnstagedUpgrade" if allowed else "version",
        "remove daemonsets.updateStrategy from the ClusterPolicy (gitops-gpu compiles OnDelete), "
        "or set gpuOperator.allowUnstagedUpgrade: true",
        severity="warning" if allowed else None,
    )


def render_release(release: Release) -> dict[str, str]:
    """``gpu-operator/...`` -> YAML for ``compile --out``: what the release applies, CRDs
    first, and what it leaves out, with why."""
    out: dict[str, str] = {}
    for crd in release.crds:
        out[f"gpu-operator/crds/{_name(crd)}.yaml"] = render_yaml(crd)
    for obj in release.objects:
        kind = str(obj["kind"]).lower()
        out[f"gpu-operator/{kind}-{_name(obj)}.yaml"] = render_yaml(obj)
    out["gpu-operator/left-out.yaml"] = render_yaml(
        {
            "release": release.version,
            "chart": f"{release.chart.name} {release.chart.version}",
            "leftOut": [{"object": what, "why": why} for what, why in release.dropped],
        }
    )
    return out
