"""Choosing a status backend from its spec, and reading the token, without any network."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout.backends import TOKEN_ENV, load_token, make_backend
from gitops_gpu.rollout.forge import ForgeBackend
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.github import GitHubBackend
from gitops_gpu.rollout.gitlab import GitLabBackend
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.httpclient import Retry, next_link

TOKEN = "tok_FAKE_factory_SECRET_42"
ENV = {TOKEN_ENV: TOKEN}


def test_gitnotes_specs(tmp_path: Path) -> None:
    default = make_backend("gitnotes", tmp_path)
    assert isinstance(default, GitNotesBackend) and default.remote == "origin"
    assert make_backend("gitnotes:upstream", tmp_path).remote == "upstream"  # type: ignore[attr-defined]
    assert make_backend("gitnotes:.", tmp_path).remote is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "kind", "base"),
    [
        ("github:fleet-org/gpu-fleet", GitHubBackend, "https://api.github.com"),
        ("github:https://ghe.corp/fleet-org/gpu-fleet", GitHubBackend, "https://ghe.corp/api/v3"),
        ("gitea:https://git.corp/fleet-org/gpu-fleet.git", GiteaBackend, "https://git.corp/api/v1"),
        ("gitlab:https://gitlab.corp/infra/gpu/fleet", GitLabBackend, "https://gitlab.corp/api/v4"),
        ("gitlab:https://gitlab.corp/1234", GitLabBackend, "https://gitlab.corp/api/v4"),
    ],
)
def test_api_specs(spec: str, kind: type, base: str, tmp_path: Path) -> None:
    backend = make_backend(spec, tmp_path, environ=ENV)
    assert isinstance(backend, kind)
    assert backend._client.base_url == base  # type: ignore[attr-defined]


def test_gitlab_project_paths_are_encoded(tmp_path: Path) -> None:
    backend = make_backend("gitlab:https://gitlab.corp/infra/gpu/fleet", tmp_path, environ=ENV)
    assert isinstance(backend, ForgeBackend)
    assert backend.dialect.repo_path == "/projects/infra%2Fgpu%2Ffleet"


@pytest.mark.parametrize(
    "spec",
    ["", "svn", "github:", "github:only-owner", "gitea:fleet-org/gpu-fleet", "gitlab:https://h/"],
)
def test_bad_specs_say_what_is_accepted(spec: str, tmp_path: Path) -> None:
    with pytest.raises(StatusBackendError) as info:
        make_backend(spec, tmp_path, environ=ENV)
    assert "gitnotes, gitnotes:<remote>, github:<owner>/<repo>" in info.value.fix


def test_token_from_file_wins_over_env(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  from-file\n")
    assert load_token(token_file=path, environ=ENV) == ("from-file", f"the file {path}")
    assert load_token(environ=ENV) == (TOKEN, f"the environment variable {TOKEN_ENV}")
    assert load_token(token_env="OTHER", environ={"OTHER": "x"})[0] == "x"


def test_missing_token_names_its_source_not_a_value(tmp_path: Path) -> None:
    with pytest.raises(StatusBackendError) as info:
        make_backend("github:o/r", tmp_path, environ={})
    assert TOKEN_ENV in str(info.value)
    with pytest.raises(StatusBackendError) as info:
        load_token(token_file=tmp_path / "missing")
    assert "missing" in str(info.value) and "--status-token-file" in info.value.fix


def test_token_never_in_the_backend_repr(tmp_path: Path) -> None:
    backend = make_backend("gitea:https://git.corp/o/r", tmp_path, environ=ENV)
    assert TOKEN not in repr(backend) and TOKEN not in repr(vars(backend))


def test_link_header_and_backoff() -> None:
    header = '<https://api/x?page=1>; rel="prev", <https://api/x?page=3>; rel="next"'
    assert next_link(header) == "https://api/x?page=3"
    assert next_link('<https://api/x?page=1>; rel="last"') is None
    assert next_link(None) is None
    retry = Retry(attempts=5, base_delay=0.5, max_delay=3.0)
    assert [retry.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert retry.delay(1, retry_after="2") == 2.0
    assert retry.delay(1, retry_after="600") == 3.0
