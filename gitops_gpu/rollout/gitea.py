"""Gitea (and Forgejo) commit statuses as the promotion record.

POST /api/v1/repos/{owner}/{repo}/statuses/{sha} with {state, target_url, description, context};
GET /api/v1/repos/{owner}/{repo}/commits/{ref}/statuses?page=&limit=. Listings name the state
``status``; Gitea's extra ``warning`` and ``skipped`` states read as failure (we never write
them). Listings are newest first by creation second, equal seconds by ascending id: we sort by id.

A commit the forge does not have answers 404 on GET and 500 (!) on POST; both are reported as
"commit <sha> is not on the forge", not as a missing repository or an unhealthy server.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout.httpclient import (
    MAX_PAGES,
    HttpClient,
    HttpStatusError,
    Retry,
    check_sha,
    next_link,
    parse_time,
)
from gitops_gpu.rollout.status import FAILURE, STATES, CommitStatus, StatusBackend, fit_description


class GiteaBackend(StatusBackend):
    name = "gitea"

    def __init__(
        self,
        server_url: str,
        owner: str,
        repo: str,
        token: str,
        *,
        token_source: str = "the status token",
        retry: Retry | None = None,
        limit: int = 50,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        headers = {"Authorization": f"token {token}", "Accept": "application/json"}
        self._client = HttpClient(
            "gitea",
            server_url.rstrip("/") + "/api/v1",
            headers,
            secret=token,
            token_source=token_source,
            retry=retry,
            sleep=sleep,
        )
        # Diagnosis after a failure: one attempt each, no retries.
        self._probe = HttpClient(
            "gitea",
            server_url.rstrip("/") + "/api/v1",
            headers,
            secret=token,
            token_source=token_source,
            retry=Retry(attempts=1),
            sleep=sleep,
        )
        self._repo_path = f"/repos/{_q(owner)}/{_q(repo)}"
        self._repo = f"{owner}/{repo}"
        self._server = server_url.rstrip("/")
        self._limit = limit

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        path = f"{self._repo_path}/commits/{check_sha(sha)}/statuses"
        seen: dict[int, dict[str, Any]] = {}
        for page in range(1, MAX_PAGES + 1):
            try:
                reply = self._client.request(
                    "GET", path, query={"page": page, "limit": self._limit}
                )
            except HttpStatusError as exc:
                raise self._explain(exc, sha, exc.status == 404) from None
            items = reply.data or []
            for item in items:
                seen.setdefault(int(item["id"]), item)
            # The server may cap `limit` below ours, so a short page is not the end; an empty
            # page, a Link header without rel=next, or the total count is.
            total = reply.headers.get("x-total-count", "")
            link = reply.headers.get("link")
            if not items or (link is not None and next_link(link) is None):
                break
            if total.isdigit() and len(seen) >= int(total):
                break
        return [_status(sha, seen[i]) for i in sorted(seen)]

    def _write(self, status: CommitStatus) -> None:
        body: dict[str, str] = {
            "state": status.state,
            "context": status.context,
            "description": fit_description(status.description),
            "target_url": status.target_url,
        }
        try:
            self._client.request(
                "POST", f"{self._repo_path}/statuses/{check_sha(status.sha)}", body=body
            )
        except HttpStatusError as exc:
            raise self._explain(exc, status.sha, 500 <= exc.status < 600) from None

    def _explain(self, exc: HttpStatusError, sha: str, suspect: bool) -> StatusBackendError:
        """Gitea answers a commit it lacks with 404 (GET) or 500 (POST): say so when it is that."""
        if not suspect:
            return exc
        try:
            self._probe.request("GET", self._repo_path)
        except HttpStatusError:
            return exc  # the repository itself is missing or the server is down: as reported
        try:
            self._probe.request("GET", f"{self._repo_path}/git/commits/{sha}")
        except HttpStatusError as probe:
            if probe.status in (404, 422):
                return StatusBackendError(
                    f"gitea: commit {sha} is not on the forge ({self._repo} at {self._server})",
                    fix="push the commit to that repository first (a status can only be set on "
                    "a commit the forge has), and check that the status backend names the "
                    "repository the fleet is read from",
                )
        return exc


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _status(sha: str, item: dict[str, Any]) -> CommitStatus:
    state = str(item.get("status") or item.get("state") or "")
    return CommitStatus(
        sha=sha,
        context=str(item.get("context") or "default"),
        state=state if state in STATES else FAILURE,
        description=str(item.get("description") or ""),
        target_url=str(item.get("target_url") or ""),
        created_at=parse_time(item.get("created_at")),
    )
