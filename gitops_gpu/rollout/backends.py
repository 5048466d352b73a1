"""Choosing a status backend from the command line.

``--status-backend`` takes one of:

    gitnotes                              git notes in the fleet repo, pushed to origin (default)
    gitnotes:<remote>                     ... pushed to another remote; ``gitnotes:.`` = local only
    github:<owner>/<repo>                 github.com
    github:https://<host>/<owner>/<repo>  GitHub Enterprise Server (API at https://<host>/api/v3)
    gitea:https://<host>/<owner>/<repo>   Gitea / Forgejo (API at https://<host>/api/v1)
    gitlab:https://<host>/<project>       GitLab; <project> is the numeric id or group/sub/name

The API backends need a token with permission to write commit statuses. It is read from the
file given with ``--status-token-file`` if any, else from the environment variable
``GITOPS_GPU_STATUS_TOKEN`` (``--status-token-env`` names another). The token is never logged
and never part of an error message; errors say which file or variable it came from.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout.gitea import GiteaBackend
from gitops_gpu.rollout.github import API_URL, GitHubBackend
from gitops_gpu.rollout.gitlab import GitLabBackend
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.httpclient import Retry
from gitops_gpu.rollout.status import StatusBackend

TOKEN_ENV = "GITOPS_GPU_STATUS_TOKEN"
_FORMS = (
    "gitnotes, gitnotes:<remote>, github:<owner>/<repo>, github:https://<host>/<owner>/<repo>, "
    "gitea:https://<host>/<owner>/<repo>, gitlab:https://<host>/<project>"
)


def load_token(
    *,
    token_file: str | Path | None = None,
    token_env: str = TOKEN_ENV,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """The token and a description of where it came from (safe to show)."""
    if token_file is not None:
        source = f"the file {token_file}"
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise StatusBackendError(
                f"cannot read the status token from {source}: {exc.strerror}",
                fix="point --status-token-file at a readable file holding only the token",
            ) from None
    else:
        source = f"the environment variable {token_env}"
        token = (os.environ if environ is None else environ).get(token_env, "").strip()
    if not token:
        raise StatusBackendError(
            f"no status token: {source} is empty or unset",
            fix=f"set {token_env} or pass --status-token-file with a token that may write "
            "commit statuses",
        )
    return token, source


def make_backend(
    spec: str,
    repo_path: str | Path,
    *,
    token_file: str | Path | None = None,
    token_env: str = TOKEN_ENV,
    retry: Retry | None = None,
    environ: Mapping[str, str] | None = None,
    git_env: Mapping[str, str] | None = None,
) -> StatusBackend:
    kind, _, rest = spec.partition(":")
    if kind == "gitnotes":
        remote = rest or "origin"
        return GitNotesBackend(repo_path, remote=None if remote == "." else remote, git_env=git_env)
    if kind not in ("github", "gitea", "gitlab") or not rest:
        raise _bad(spec)
    token, source = load_token(token_file=token_file, token_env=token_env, environ=environ)
    if kind == "github" and "://" not in rest:
        owner, repo = _owner_repo(spec, rest)
        return GitHubBackend(owner, repo, token, api_url=API_URL, token_source=source, retry=retry)
    server, path = _split_url(spec, rest)
    if kind == "github":
        owner, repo = _owner_repo(spec, path)
        return GitHubBackend(
            owner, repo, token, api_url=f"{server}/api/v3", token_source=source, retry=retry
        )
    if kind == "gitea":
        owner, repo = _owner_repo(spec, path)
        return GiteaBackend(server, owner, repo, token, token_source=source, retry=retry)
    return GitLabBackend(server, path, token, token_source=source, retry=retry)


def _split_url(spec: str, url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    path = parts.path.strip("/").removesuffix(".git")
    if parts.scheme not in ("http", "https") or not parts.netloc or not path:
        raise _bad(spec)
    return f"{parts.scheme}://{parts.netloc}", path


def _owner_repo(spec: str, path: str) -> tuple[str, str]:
    pieces = path.strip("/").removesuffix(".git").split("/")
    if len(pieces) != 2 or not all(pieces):
        raise _bad(spec)
    return pieces[0], pieces[1]


def _bad(spec: str) -> StatusBackendError:
    return StatusBackendError(f"unknown status backend {spec!r}", fix=f"use one of: {_FORMS}")
