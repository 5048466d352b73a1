"""What a CRD change does to the fields an object sets (pure, on plain schemas)."""

from __future__ import annotations

from typing import Any

from gitops_gpu.fleet.operator_chart import Chart
from gitops_gpu.preflight import crd_change
from gitops_gpu.preflight.operator_release import split


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


STR = {"type": "string"}
OLD = obj(
    spec=obj(
        driver=obj(version=STR, env={"type": "array", "items": obj(name=STR)}),
        labels={"type": "object", "additionalProperties": STR},
        raw={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    ),
    metadata={"type": "object"},
)
NEW = obj(
    spec=obj(
        driver=obj(
            version=STR,
            env={"type": "array", "items": obj(name=STR, value=STR)},
            upgradePolicy=obj(
                autoUpgrade={"type": "boolean"}, drain=obj(enable={"type": "boolean"})
            ),
        ),
        labels={"type": "object", "additionalProperties": STR},
        raw={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        hostPaths=obj(kubeletRootDir=STR),
    ),
    metadata={"type": "object"},
)


def test_fields_the_old_schema_lacks_are_the_ones_pruned_topmost_only() -> None:
    value = {
        "metadata": {"name": "x", "labels": {"a": "b"}},
        "spec": {
            "driver": {
                "version": "580",
                "upgradePolicy": {"autoUpgrade": True},
                "env": [{"name": "A", "value": "1"}],
            },
            "labels": {"any": "thing"},
            "raw": {"kept": {"whole": 1}},
        },
    }
    paths = [crd_change.dotted(p) for p in crd_change.pruned(OLD, value)]
    assert sorted(paths) == ["spec.driver.env[0].value", "spec.driver.upgradePolicy"]
    assert list(crd_change.pruned(NEW, value)) == []


def test_missing_lists_what_a_newer_schema_adds() -> None:
    assert sorted(crd_change.missing(OLD, NEW)) == [
        "spec.driver.env[].value",
        "spec.driver.upgradePolicy",
        "spec.hostPaths",
    ]
    assert list(crd_change.missing(NEW, OLD)) == []  # a downgrade's removals are not this


def test_a_stored_version_the_new_crd_no_longer_lists_is_dropped() -> None:
    live = {
        "spec": {"versions": [{"name": "v1alpha1"}, {"name": "v1"}]},
        "status": {"storedVersions": ["v1alpha1", "v1"]},
    }
    target = {"spec": {"versions": [{"name": "v1"}]}}
    assert crd_change.dropped_stored_versions(live, target) == ["v1alpha1"]
    assert crd_change.dropped_stored_versions(live, live) == []


def test_a_render_splits_into_crds_the_operator_and_what_is_left_out() -> None:
    chart = Chart("gpu-operator", "v26.7.0", "v26.7.0", {}, frozenset())
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpu-operator"},
        "spec": {
            "template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/gpu-operator:v26.7.0"}]}}
        },
    }
    docs = [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "clusterpolicies.nvidia.com"},
        },
        deployment,
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
        },
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": "default"},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "upgrade-crd", "annotations": {"helm.sh/hook": "pre-upgrade"}},
        },
        None,
    ]
    release = split("default", "v26.7.0", chart, docs)
    assert [c["metadata"]["name"] for c in release.crds] == ["clusterpolicies.nvidia.com"]
    assert release.objects == (deployment,)
    assert release.operator_image == "nvcr.io/nvidia/gpu-operator:v26.7.0"
    assert [d[0] for d in release.dropped] == [
        "ClusterPolicy/cluster-policy",
        "NVIDIADriver/default",
        "Job/upgrade-crd",
    ]
    assert "hook" in release.dropped[2][1]
