"""CRD conformance: the offline validator itself, and every upstream sample through the fleet.

Upstream samples are read from ``<project>/../shared/upstream`` (never copied here).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops_gpu.fleet import loader
from gitops_gpu.fleet.scaffold import minimal_base, overlay, write_repo
from gitops_gpu.fleet.yamlio import parse_documents
from gitops_gpu.preflight import run_preflight
from gitops_gpu.preflight.schema import CrdSchema, load_crds
from gitops_gpu_dev import paths

UPSTREAM = paths.shared_upstream()
CRDS = paths.default_crds_dir()
CP_API, NVD_API = ("nvidia.com/v1", "ClusterPolicy"), ("nvidia.com/v1alpha1", "NVIDIADriver")


def _crd(api: tuple[str, str]) -> CrdSchema:
    return load_crds(CRDS)[api]


def _paths(issues: list[Any]) -> list[str]:
    return [i.message.split(":")[0] for i in issues]


def _samples(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, object) of every upstream ClusterPolicy/NVIDIADriver: YAML (several docs per
    file allowed) and the JSON alm-examples (arrays or single objects)."""
    files = sorted((UPSTREAM / "gpu-operator" / "samples").glob("*")) + sorted(
        (UPSTREAM / "more-samples").glob("*")
    )
    for path in files:
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            docs = data if isinstance(data, list) else [data]
        elif path.suffix == ".yaml":
            docs = [d.data for d in parse_documents(path.name, path.read_text())]
        else:
            continue
        for i, doc in enumerate(docs):
            if isinstance(doc, dict) and doc.get("kind") == kind:
                yield f"{path.name}#{i}", doc


# collected at import: a missing upstream folder fails test_samples_found, it never skips
CLUSTER_POLICIES = list(_samples("ClusterPolicy")) if UPSTREAM.is_dir() else []
DRIVERS = list(_samples("NVIDIADriver")) if UPSTREAM.is_dir() else []


def test_samples_found() -> None:
    assert UPSTREAM.is_dir(), f"upstream data missing at {UPSTREAM} (GITOPS_GPU_UPSTREAM)"
    # v1_clusterpolicy, the alm examples (array + single), redhat full + patch
    assert len(CLUSTER_POLICIES) >= 5 and len(DRIVERS) >= 7


def _is_patch(doc: dict[str, Any]) -> bool:
    return not {"driver", "toolkit", "operator"} <= set(doc.get("spec", {}))


@pytest.mark.parametrize(("name", "doc"), CLUSTER_POLICIES, ids=[n for n, _ in CLUSTER_POLICIES])
def test_upstream_cluster_policy_as_base_and_as_pool_policy(
    tmp_path: Path, name: str, doc: dict[str, Any]
) -> None:
    full = next(d for n, d in CLUSTER_POLICIES if n.startswith("v1_clusterpolicy"))
    pool = {"a": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}}
    layouts = [(full, doc)] if _is_patch(doc) else [(doc, None), (full, doc)]
    for i, (base, pool_policy) in enumerate(layouts):
        root = write_repo(
            tmp_path / str(i), pool, base=base, overlays={"a": pool_policy} if pool_policy else None
        )
        findings = run_preflight(root, commit="c").findings
        schema = [f.text() for f in findings if f.code in ("GG010", "GG011", "GG001", "GG002")]
        assert schema == [], f"{name} layout {i}"


def _as_pool(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An NVIDIADriver written the fleet way: (pool.yaml spec, ClusterPolicy overlay spec)."""
    spec = copy.deepcopy(doc["spec"])
    pool = {
        "nodeSelector": spec.pop("nodeSelector", {}) or {"driver.config": "sample"},
        "driverType": spec.pop("driverType", "gpu"),
    }
    spec.pop("default", None)
    policy: dict[str, Any] = {"driver": spec}
    for key in ("gds", "gdrcopy"):
        if key in spec:
            policy[key] = spec.pop(key)
    for key in ("repoConfig", "licensingConfig"):
        if isinstance(spec.get(key), dict) and "name" in spec[key]:
            spec[key]["configMapName"] = spec[key].pop("name")
    if "virtualTopologyConfig" in spec:
        spec["virtualTopology"] = {"config": spec.pop("virtualTopologyConfig").get("name", "")}
    return pool, policy


@pytest.mark.parametrize(("name", "doc"), DRIVERS, ids=[n for n, _ in DRIVERS])
def test_upstream_nvidiadriver_conforms_and_round_trips(
    tmp_path: Path, name: str, doc: dict[str, Any]
) -> None:
    assert _crd(NVD_API).validate(doc) == [], name
    pool, policy = _as_pool(doc)
    base = minimal_base()
    del base["spec"]["driver"]["manager"]  # the sample's own manager (or none) round-trips
    root = write_repo(tmp_path, {"p": pool}, base=base, overlays={"p": overlay(policy)})
    result = run_preflight(root, commit="c")
    assert [f.text() for f in result.findings if f.code in ("GG010", "GG011")] == []
    assert result.compiled is not None
    compiled = result.compiled.pool("p").driver["spec"]
    for key, value in doc["spec"].items():
        if key == "nodeSelector" and not value:
            continue
        assert compiled[key] == value, (name, key)


# --- the validator on small schemas ------------------------------------------------------------

S: dict[str, Any] = {
    "type": "object",
    "required": ["need", "withDefault"],
    "properties": {
        "need": {"type": "string"},
        "withDefault": {"type": "boolean", "default": False},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "image": {"type": "string", "pattern": "[a-z]+"},
        "count": {"type": "integer", "minimum": 1, "maximum": 5, "format": "int32"},
        "budget": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
        },
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "x-kubernetes-list-type": "set",
            "maxItems": 2,
        },
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "opt": {"type": "string", "nullable": True},
    },
}


def _check(obj: dict[str, Any]) -> list[str]:
    return _paths(CrdSchema("v1", "Thing", "x.yaml", S).validate(obj))


def test_validator_accepts_valid_and_applies_defaults_for_required() -> None:
    assert (
        _check(
            {
                "need": "x",
                "budget": "25%",
                "free": {"any": {"thing": 1}},
                "labels": {"a": "b"},
                "opt": None,
                "tags": ["p", "q"],
            }
        )
        == []
    )


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({}, "need"),
        ({"need": 1}, "need"),
        ({"need": "x", "mode": "c"}, "mode"),
        ({"need": "x", "image": "123"}, "image"),
        ({"need": "x", "count": 0}, "count"),
        ({"need": "x", "count": 6}, "count"),
        ({"need": "x", "count": 2.5}, "count"),
        ({"need": "x", "count": True}, "count"),
        ({"need": "x", "budget": 1.5}, "budget"),
        ({"need": "x", "tags": ["p", "p"]}, "tags[1]"),
        ({"need": "x", "tags": ["p", "q", "r"]}, "tags"),
        ({"need": "x", "labels": {"a": 1}}, "labels.a"),
        ({"need": "x", "unknown": 1}, "unknown"),
    ],
)
def test_validator_rejects(obj: dict[str, Any], path: str) -> None:
    assert _check(obj) == [path]


def test_cel_rule_default_driver_without_selector() -> None:
    crd = _crd(NVD_API)
    ok = {
        "apiVersion": NVD_API[0],
        "kind": NVD_API[1],
        "metadata": {"name": "d"},
        "spec": {"default": True},
    }
    assert crd.validate(ok) == []
    bad = copy.deepcopy(ok)
    bad["spec"]["nodeSelector"] = {"a": "b"}
    (issue,) = crd.validate(bad)
    assert "default NVIDIADriver must not use nodeSelector" in issue.message


def test_crds_in_use_have_no_untranslated_rules() -> None:
    # transition rules (oldSelf) are checked against --base; the rest are translated
    assert _crd(CP_API).skipped_rules == [] and _crd(NVD_API).skipped_rules == []


def test_yaml_1_1_booleans_get_a_precise_fix() -> None:
    crd = _crd(CP_API)
    (issue,) = [
        i for i in crd.validate({"spec": {"toolkit": {"enabled": "yes"}}}) if "toolkit" in i.message
    ]
    assert "true or false" in issue.fix


def test_a_memo_finds_the_same_issues_in_objects_that_share_maps() -> None:
    # preflight validates every pool's view of one base with one memo; a shared map's issues
    # must appear in each object at that object's path, as a fresh validation finds them
    crd = _crd(CP_API)
    base = minimal_base()
    base["spec"]["toolkit"]["bogus"] = 1  # shared by every object below
    base["spec"]["driver"]["version"] = 580  # a type error, also shared
    objects = []
    for i in range(4):
        spec = dict(base["spec"])
        if i % 2:
            spec["devicePlugin"] = {"enabled": "yes"}  # each odd object's own issue
        objects.append({**base, "spec": spec})
    objects.append({**base, "spec": {"nested": {"toolkit": base["spec"]["toolkit"]}}})
    memo: dict[Any, Any] = {}
    for obj in objects:
        fresh = crd.validate(copy.deepcopy(obj))
        assert crd.validate(obj, memo) == fresh
        assert fresh, "each object has issues to compare"
    assert memo  # it was used


def test_no_check_changes_the_base_the_pools_views_share(monkeypatch: pytest.MonkeyPatch) -> None:
    # every pool's read-only view shares the base's maps (loader.policy_view): a check that
    # changed one would change every pool's policy, and what compile builds from them
    seen: list[tuple[Any, Any]] = []
    shared = loader.merge_shared

    def recording(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        view = shared(base, over)
        seen.extend([(base, copy.deepcopy(base)), (view, copy.deepcopy(view))])
        return view

    monkeypatch.setattr(loader, "merge_shared", recording)
    for root in (
        paths.fleet_example(),
        paths.fleet_example().parent / "fleet-repo-example-two-clusters",
    ):
        result = run_preflight(root, commit="x", crds_dir=CRDS)
        assert result.compiled is not None
    assert len(seen) > 10
    changed = [before for obj, before in seen if obj != before]
    assert changed == []
