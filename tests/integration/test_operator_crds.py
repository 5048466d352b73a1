"""Stale GPU Operator CRDs on a real apiserver: the v26.3.3 NVIDIADriver CRD (no upgradePolicy)
against what the fleet compiles and against the v26.7.0 release's chart, read with
``--kubeconfig``; and a release CRD that drops a version the cluster stores objects in."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_operator_release import CRDS, fleet, helm_env, line_of

from gitops_gpu.preflight import Finding, run_preflight
from gitops_gpu_dev import paths
from gitops_gpu_dev.testbed import crds
from gitops_gpu_dev.testbed.session import Testbed

__all__ = ["helm_env"]  # the fixture: gpuOperator charts render with the pinned Helm
DRIVER_CRD = "deployments/gpu-operator/crds/nvidia.com_nvidiadrivers.yaml"


def _old_driver_crd() -> dict[str, Any]:
    with tarfile.open(paths.operator_source("v26.3.3")) as tar:
        fh = tar.extractfile(DRIVER_CRD)
        assert fh is not None
        doc: dict[str, Any] = YAML(typ="safe").load(fh.read())
    return doc


@pytest.fixture
def old_driver_crd(clean_cluster: Testbed) -> Iterator[Testbed]:
    """The cluster's NVIDIADriver CRD as v26.3.3 left it (Helm never upgraded it)."""
    crds.install_objects(clean_cluster.client, [_old_driver_crd()])
    try:
        yield clean_cluster
    finally:
        crds.install(
            clean_cluster.client, [paths.default_crds_dir() / "nvidia.com_nvidiadrivers.yaml"]
        )


def _check(root: Path, tb: Testbed) -> list[Finding]:
    return run_preflight(root, crds_dir=CRDS, kubeconfig=tb.kubeconfig).findings


def test_fields_the_stale_crd_would_prune_are_named_per_pool(
    old_driver_crd: Testbed, tmp_path: Path
) -> None:
    root = fleet(tmp_path / "declared")  # the v26.7.0 release, over the v26.3.3 CRDs
    found = _check(root, old_driver_crd)
    pruned = [f for f in found if f.code == "GG094"]
    # every pool's NVIDIADriver sets spec.upgradePolicy, which v26.3.3's CRD lacks
    assert {f.pool for f in pruned} == {"canary", "infer-l40s", "train-h100", "train-b200"}
    assert all(
        "spec.upgradePolicy" in f.message and f.field == "spec.upgradePolicy" for f in pruned
    )
    assert all("kubectl apply --server-side" in f.fix for f in pruned)
    (stale,) = [f for f in found if f.code == "GG095"]
    assert "nvidiadrivers.nvidia.com" in stale.message and "the release v26.7.0" in stale.message
    assert "v1alpha1: spec.upgradePolicy" in stale.message
    assert (stale.file, stale.line) == (
        "fleet.yaml",
        line_of(root / "fleet.yaml", "version: v26.7.0"),
    )

    # No release declared: the stale CRD is still visible, against the CRDs checked with.
    plain = _check(paths.fleet_example(), old_driver_crd)
    assert {f.pool for f in plain if f.code == "GG094"} == {f.pool for f in pruned}
    (stale,) = [f for f in plain if f.code == "GG095"]
    assert "older than the CRDs preflight checks against" in stale.message


def test_current_crds_say_nothing(clean_cluster: Testbed, tmp_path: Path) -> None:
    found = _check(fleet(tmp_path), clean_cluster)
    assert [f.text() for f in found if f.code in ("GG093", "GG094", "GG095")] == []


WIDGETS = "widgets.example.com"


def _widget_crd(*versions: str, storage: str) -> dict[str, Any]:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": WIDGETS},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
            },
            "versions": [
                {"name": v, "served": True, "storage": v == storage, "schema": schema}
                for v in versions
            ],
        },
    }


def test_a_release_crd_that_drops_a_stored_version_is_refused(
    clean_cluster: Testbed, tmp_path: Path
) -> None:
    client = clean_cluster.client
    crds.install_objects(client, [_widget_crd("v1", storage="v1")])
    try:
        client.request(
            "POST",
            "/apis/example.com/v1/widgets",
            body={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
        )

        def v2_only(root: Path) -> None:
            text = YAML(typ="safe")
            out = root / "operator" / "gpu-operator" / "crds" / "example.com_widgets.yaml"
            buf = io.StringIO()
            text.dump(_widget_crd("v2", storage="v2"), buf)
            out.write_text(buf.getvalue())

        root = fleet(tmp_path, edit=v2_only)
        (bad,) = [f for f in _check(root, clean_cluster) if f.code == "GG093"]
        assert WIDGETS in bad.message and "drops version v1" in bad.message
        assert bad.severity.value == "error" and bad.file == "fleet.yaml"
    finally:
        client.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", WIDGETS)
