"""A GPU Operator chart read without Helm: its values, the values its templates read, its
subcharts, and which of the fleet's values keys it would ignore."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import operator_chart
from gitops_gpu.fleet.models import ClusterRef
from gitops_gpu.fleet.yamlio import parse_single

CHART = {
    "Chart.yaml": b"name: gpu-operator\nversion: v26.7.0\nappVersion: v26.7.0\n"
    b"dependencies:\n- name: node-feature-discovery\n  alias: nfd\n",
    "values.yaml": b"operator:\n  repository: nvcr.io/nvidia\n  nodeSelector: {}\n"
    b"daemonsets:\n  updateStrategy: RollingUpdate\n  tolerations: []\n"
    b"driver:\n  upgradePolicy:\n    autoUpgrade: true\n    maxParallelUpgrades: 1\n",
    "templates/_helpers.tpl": b"{{ .Values.operator.version | default .Chart.AppVersion }}\n"
    b"{{ with .Values.operator.resources }}{{ toYaml . }}{{ end }}\n",
    "crds/nvidia.com_clusterpolicies.yaml": b"kind: CustomResourceDefinition\n",
    "charts/node-feature-discovery/Chart.yaml": b"name: node-feature-discovery\nversion: 0.19.0\n",
    "charts/node-feature-discovery/values.yaml": b"worker:\n  tolerations: []\n",
    "charts/node-feature-discovery/crds/nfd.yaml": b"kind: CustomResourceDefinition\n",
}


def unknown(values: str) -> list[tuple[str, int, str | None]]:
    chart = operator_chart.read_chart(CHART)
    doc = parse_single("operator/values.yaml", values)
    return [
        (".".join(map(str, u.path)), u.line, u.suggestion)
        for u in operator_chart.unknown_keys(chart, doc)
    ]


def test_known_keys_pass_whether_defaulted_read_by_a_template_or_free_below() -> None:
    assert (
        unknown(
            "operator:\n"
            "  version: v26.7.0\n"  # commented out in values.yaml, read by _helpers.tpl
            "  resources: {limits: {cpu: 1}}\n"  # read whole by a template
            "  nodeSelector: {pool: gpu}\n"  # an empty map: any key below
            "daemonsets:\n  updateStrategy: OnDelete\n  tolerations: [{key: a}]\n"
            "nfd:\n  worker: {tolerations: []}\n"  # the subchart, by its alias
            "global:\n  anything: 1\n"
        )
        == []
    )


def test_misspelt_keys_are_named_with_their_line_and_the_key_meant() -> None:
    assert unknown(
        "daemonset:\n  updateStrategy: OnDelete\n"
        "driver:\n  upgradePolicy:\n    maxParalelUpgrades: 2\n"
        "nfd:\n  wroker: {}\n"
        "frobnicate: true\n"
    ) == [
        ("daemonset", 1, "daemonsets"),
        ("driver.upgradePolicy.maxParalelUpgrades", 5, "maxParallelUpgrades"),
        ("nfd.wroker", 7, "worker"),
        ("frobnicate", 8, None),
    ]


def test_chart_metadata_subcharts_and_crds() -> None:
    chart = operator_chart.read_chart(CHART)
    assert (chart.name, chart.version, chart.app_version) == ("gpu-operator", "v26.7.0", "v26.7.0")
    assert set(chart.subcharts) == {"nfd"}
    assert "operator.version" in chart.referenced
    assert set(chart.crd_files) == {
        "crds/nvidia.com_clusterpolicies.yaml",
        "charts/node-feature-discovery/crds/nfd.yaml",
    }


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_packaged_chart_reads_as_its_folder_and_never_outside_it(tmp_path: Path) -> None:
    path = tmp_path / "gpu-operator-v26.7.0.tgz"
    evil = {"../../etc/passwd": b"x", "/abs/file": b"y"}
    path.write_bytes(_tgz({f"gpu-operator/{k}": v for k, v in CHART.items()} | evil))
    files = operator_chart.chart_files(path)
    assert set(files) == set(CHART)
    assert files["values.yaml"] == CHART["values.yaml"]


def test_not_a_chart_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "chart.tgz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(FleetError, match="is not a packaged Helm chart"):
        operator_chart.chart_files(bad)
    with pytest.raises(FleetError, match=r"no Chart\.yaml"):
        operator_chart.read_chart({"values.yaml": b"a: 1\n"})


def test_fleet_yaml_gpu_operator_is_validated() -> None:
    ref = ClusterRef.model_validate(
        {
            "name": "a",
            "gpuOperator": {
                "version": "v26.7.0",
                "chart": "./operator//chart",
                "values": "operator/v.yaml",
            },
        }
    )
    assert ref.operator_release == "v26.7.0" and ref.gpu_operator is not None
    assert ref.gpu_operator.local_chart == "operator/chart"
    remote = ClusterRef.model_validate(
        {
            "name": "a",
            "gpuOperator": {"version": "v26.7.0", "chart": "oci://nvcr.io/nvidia/gpu-operator"},
        }
    )
    assert remote.gpu_operator is not None and remote.gpu_operator.local_chart is None
    assert (
        ClusterRef.model_validate({"name": "a", "gpuOperatorVersion": "v26.3.3"}).operator_release
        == "v26.3.3"
    )
    for bad, says in (
        ({"version": "latest", "chart": "c"}, "is not a release"),
        ({"version": "v26.7.0", "chart": "../elsewhere"}, "inside the fleet repo"),
        ({"version": "v26.7.0", "chart": "/abs"}, "inside the fleet repo"),
        ({"version": "v26.7.0", "chart": "c", "values": "../v.yaml"}, "inside the fleet repo"),
    ):
        with pytest.raises(ValidationError, match=says):
            ClusterRef.model_validate({"name": "a", "gpuOperator": bad})
    with pytest.raises(ValidationError, match="disagree"):
        ClusterRef.model_validate(
            {
                "name": "a",
                "gpuOperatorVersion": "v26.3.3",
                "gpuOperator": {"version": "v26.7.0", "chart": "c"},
            }
        )
