"""Parsed CRD files cached as JSON by content hash (preflight/crd_cache.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gitops_gpu.preflight import crd_cache
from gitops_gpu.preflight.schema import load_crds


def _parse(path: Path) -> list[object]:
    return list(YAML(typ="safe", pure=True).load_all(path.read_text()))


def test_the_operators_crds_load_the_same_from_the_cache(upstream: Path, tmp_path: Path) -> None:
    crd = upstream / "gpu-operator" / "crds" / "nvidia.com_clusterpolicies.yaml"
    root = tmp_path / "cache"
    first = crd_cache.load_all(crd, root)
    (cached,) = root.glob("*.json")
    assert first == _parse(crd)
    assert crd_cache.load_all(crd, root) == first
    # The second load read the cache: what the cache says is what comes back.
    cached.write_text(json.dumps([{"kind": "from-cache"}]))
    assert crd_cache.load_all(crd, root) == [{"kind": "from-cache"}]


def test_a_changed_file_is_parsed_again(tmp_path: Path) -> None:
    crd, root = tmp_path / "crd.yaml", tmp_path / "cache"
    crd.write_text("kind: A\n")
    assert crd_cache.load_all(crd, root) == [{"kind": "A"}]
    crd.write_text("kind: B\n")
    assert crd_cache.load_all(crd, root) == [{"kind": "B"}]
    assert len(list(root.glob("*.json"))) == 2


def test_documents_json_would_change_are_not_cached(tmp_path: Path) -> None:
    crd, root = tmp_path / "crd.yaml", tmp_path / "cache"
    crd.write_text("when: 2026-12-03\n1: one\n")  # a timestamp and an int key
    docs = crd_cache.load_all(crd, root)
    assert docs == _parse(crd)
    assert not root.exists() or not list(root.glob("*.json"))


def test_an_unwritable_or_corrupt_cache_costs_only_the_parse(tmp_path: Path) -> None:
    crd = tmp_path / "crd.yaml"
    crd.write_text("kind: A\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert crd_cache.load_all(crd, blocker / "cache") == [{"kind": "A"}]  # cannot mkdir
    root = tmp_path / "cache"
    crd_cache.load_all(crd, root)
    (cached,) = root.glob("*.json")
    cached.write_text("{truncated")
    assert crd_cache.load_all(crd, root) == [{"kind": "A"}]


def test_load_crds_reads_through_the_cache(
    upstream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(upstream / "gpu-operator" / "crds", crds)
    monkeypatch.setenv("GITOPS_GPU_CACHE", str(tmp_path / "home"))
    schemas = load_crds(crds)
    assert ("nvidia.com/v1", "ClusterPolicy") in schemas
    assert len(list((tmp_path / "home" / "crds").glob("*.json"))) == 3
