"""Gitea (and Forgejo) commit statuses as the promotion record.

POST /api/v1/repos/{owner}/{repo}/statuses/{sha} with {state, target_url, description, context};
GET /api/v1/repos/{owner}/{repo}/commits/{ref}/statuses?page=&limit=. Listings name the state
``status``; Gitea's extra ``warning`` state reads as failure (we never write it).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from gitops_gpu.rollout.httpclient import (
    MAX_PAGES,
    HttpClient,
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
        self._repo_path = f"/repos/{_q(owner)}/{_q(repo)}"
        self._limit = limit

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        path = f"{self._repo_path}/commits/{check_sha(sha)}/statuses"
        seen: dict[int, dict[str, Any]] = {}
        for page in range(1, MAX_PAGES + 1):
            reply = self._client.request("GET", path, query={"page": page, "limit": self._limit})
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
        self._client.request(
            "POST", f"{self._repo_path}/statuses/{check_sha(status.sha)}", body=body
        )


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
