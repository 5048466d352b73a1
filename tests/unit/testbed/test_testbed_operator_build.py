"""Where the real GPU Operator is built from, and how a missing or bad source fails."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from gitops_gpu.errors import BuildError
from gitops_gpu_dev.testbed import operator_build


def test_neither_source_exists_names_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nope.tar.gz"
    monkeypatch.setenv(operator_build.SRC_ENV, str(missing))
    monkeypatch.setattr(operator_build, "default_source", lambda: tmp_path / "default.tar.gz")
    with pytest.raises(BuildError) as err:
        operator_build.source(lambda _m: None)
    text = str(err.value)
    assert str(missing) in text and str(tmp_path / "default.tar.gz") in text
    assert operator_build.SRC_ENV in text


def test_env_source_wins_and_a_missing_one_falls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    default = tmp_path / "default.tar.gz"
    default.write_bytes(b"")
    other = tmp_path / "checkout"
    other.mkdir()
    monkeypatch.setattr(operator_build, "default_source", lambda: default)
    monkeypatch.setenv(operator_build.SRC_ENV, str(other))
    assert operator_build.source(lambda _m: None) == other.resolve()
    said: list[str] = []
    monkeypatch.setenv(operator_build.SRC_ENV, str(tmp_path / "gone"))
    assert operator_build.source(said.append) == default
    assert said and "does not exist" in said[0]
    # Another source is cached under its own key, never as the release's.
    assert operator_build._cache_key(other).startswith("src-")
    assert operator_build._cache_key(default) == operator_build.OPERATOR_VERSION


def test_a_tarball_without_the_operator_fails_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        data = b"hello"
        info = tarfile.TarInfo("README.md")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(BuildError, match="no gpu-operator module"):
        operator_build._unpack(bad, tmp_path / "x")
    checkout = tmp_path / "co"
    (checkout / "cmd" / "gpu-operator").mkdir(parents=True)
    (checkout / "go.mod").write_text("module github.com/NVIDIA/gpu-operator\n")
    with pytest.raises(BuildError, match=r"missing vendor/modules\.txt, assets, manifests"):
        operator_build._check_tree(checkout, checkout)
