"""GitHub (and GitHub Enterprise Server) commit statuses as the promotion record.

POST /repos/{owner}/{repo}/statuses/{sha} and GET /repos/{owner}/{repo}/commits/{ref}/statuses
(newest first, paginated by Link header). API version 2022-11-28; states map one to one.
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
from gitops_gpu.rollout.status import (
    STATES,
    CommitStatus,
    StatusBackend,
    fit_description,
)

API_URL = "https://api.github.com"


class GitHubBackend(StatusBackend):
    name = "github"

    def __init__(
        self,
        owner: str,
        repo: str,
        token: str,
        *,
        api_url: str = API_URL,
        token_source: str = "the status token",
        retry: Retry | None = None,
        per_page: int = 100,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        self._client = HttpClient(
            "github",
            api_url,
            headers,
            secret=token,
            token_source=token_source,
            retry=retry,
            sleep=sleep,
        )
        self._repo_path = f"/repos/{_q(owner)}/{_q(repo)}"
        self._per_page = per_page

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        url: str | None = f"{self._repo_path}/commits/{check_sha(sha)}/statuses"
        query: dict[str, str | int] | None = {"per_page": self._per_page}
        seen: dict[int, dict[str, Any]] = {}
        for _ in range(MAX_PAGES):
            if url is None:
                break
            reply = self._client.request("GET", url, query=query)
            for item in reply.data or ():
                seen.setdefault(int(item["id"]), item)  # pages shift when statuses are added
            url, query = next_link(reply.headers.get("link")), None
        # Ids grow with time: ascending id is oldest first, whatever order the pages came in.
        return [_status(sha, seen[i]) for i in sorted(seen) if seen[i].get("state") in STATES]

    def _write(self, status: CommitStatus) -> None:
        body: dict[str, str] = {
            "state": status.state,
            "context": status.context,
            "description": fit_description(status.description),
        }
        if status.target_url:
            body["target_url"] = status.target_url
        self._client.request(
            "POST", f"{self._repo_path}/statuses/{check_sha(status.sha)}", body=body
        )


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _status(sha: str, item: dict[str, Any]) -> CommitStatus:
    return CommitStatus(
        sha=sha,
        context=str(item.get("context") or "default"),
        state=str(item["state"]),
        description=str(item.get("description") or ""),
        target_url=str(item.get("target_url") or ""),
        created_at=parse_time(item.get("created_at")),
    )
