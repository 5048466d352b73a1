"""Preflight's CRDs never default into a checkout: --crds, the cluster, or the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.preflight import crd_source, run_preflight


def test_without_crds_anywhere_the_error_names_every_way_to_give_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(crd_source.ENV, raising=False)
    with pytest.raises(GitopsGpuError) as err:
        run_preflight(tmp_path, commit="c")
    text = str(err.value)
    for way in ("--crds", "--kubeconfig", crd_source.ENV):
        assert way in text


def test_an_explicit_directory_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(crd_source.ENV, "/elsewhere")
    assert crd_source.resolve(tmp_path, None, tmp_path / "cache") == tmp_path
    assert crd_source.resolve(None, None, tmp_path / "cache") == Path("/elsewhere")
