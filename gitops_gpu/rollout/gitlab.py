"""GitLab commit statuses (external jobs) as the promotion record.

POST /api/v4/projects/{id}/statuses/{sha} with {state, name, description, target_url};
GET /api/v4/projects/{id}/repository/commits/{sha}/statuses?all=true&per_page=&page= (X-Next-Page).

GitLab keeps a status as a job with its own state machine: pending -> running -> success | failed
| canceled, and it refuses pending->pending and running->running (HTTP 400 "Cannot transition
status"). A finished job is replaced by a new one on the next write. So:

- ours -> GitLab: success -> success, failure -> failed, error (superseded) -> canceled;
  pending -> ``pending`` for the first write of an in-progress job and ``running`` for the next.
- A third in-progress write (e.g. "awaiting approval" after "soaking") cannot be represented:
  it is skipped and logged, and ``set_status`` returns False. The soak start survives (it is the
  second write); the approval wait and a soak interruption are not visible on GitLab.
- GitLab -> ours: created/pending/running/manual -> pending, failed -> failure,
  canceled/skipped -> error.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from gitops_gpu.rollout.httpclient import MAX_PAGES, HttpClient, Retry, check_sha, parse_time
from gitops_gpu.rollout.status import (
    ERROR,
    FAILURE,
    PENDING,
    SUCCESS,
    CommitStatus,
    StatusBackend,
    fit_description,
    should_write,
)

log = logging.getLogger(__name__)

_TO_GITLAB = {SUCCESS: "success", FAILURE: "failed", ERROR: "canceled"}
_FROM_GITLAB = {
    "created": PENDING,
    "waiting_for_resource": PENDING,
    "preparing": PENDING,
    "pending": PENDING,
    "running": PENDING,
    "manual": PENDING,
    "scheduled": PENDING,
    "success": SUCCESS,
    "failed": FAILURE,
    "canceled": ERROR,
    "skipped": ERROR,
}


class GitLabBackend(StatusBackend):
    name = "gitlab"

    def __init__(
        self,
        server_url: str,
        project: str,
        token: str,
        *,
        ref: str | None = None,
        token_source: str = "the status token",
        retry: Retry | None = None,
        per_page: int = 100,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = HttpClient(
            "gitlab",
            server_url.rstrip("/") + "/api/v4",
            {"PRIVATE-TOKEN": token, "Accept": "application/json"},
            secret=token,
            token_source=token_source,
            retry=retry,
            sleep=sleep,
        )
        # A numeric id or a namespaced path ("group/sub/project"), which must be URL-encoded.
        self._project_path = f"/projects/{urllib.parse.quote(project, safe='')}"
        self._ref = ref
        self._per_page = per_page

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        return [_status(sha, item) for item in self._jobs(sha)]

    def set_status(self, status: CommitStatus) -> bool:
        jobs = [j for j in self._jobs(status.sha) if j.get("name") == status.context]
        latest_job = jobs[-1] if jobs else None
        latest = _status(status.sha, latest_job) if latest_job else None
        if not should_write(latest, status):
            return False
        state = _TO_GITLAB.get(status.state, "pending")
        if status.state == PENDING and latest_job is not None:
            current = str(latest_job.get("status"))
            if current == "running":
                log.info(
                    "gitlab cannot change a running status' description; skipped %s on %s",
                    status.context,
                    status.sha[:7],
                )
                return False
            if _FROM_GITLAB.get(current) == PENDING:
                state = "running"  # the one allowed in-progress transition
            # else the job finished: GitLab starts a new one, which begins as "pending"
        self._post(status, state)
        return True

    def _write(self, status: CommitStatus) -> None:
        self._post(status, _TO_GITLAB.get(status.state, "pending"))

    def _post(self, status: CommitStatus, state: str) -> None:
        body: dict[str, str] = {
            "state": state,
            "name": status.context,
            "description": fit_description(status.description),
        }
        if status.target_url:
            body["target_url"] = status.target_url
        if self._ref:
            body["ref"] = self._ref
        path = f"{self._project_path}/statuses/{check_sha(status.sha)}"
        self._client.request("POST", path, body=body)

    def _jobs(self, sha: str) -> list[dict[str, Any]]:
        """Every status job of the commit, oldest first (by id), without duplicates."""
        path = f"{self._project_path}/repository/commits/{check_sha(sha)}/statuses"
        seen: dict[int, dict[str, Any]] = {}
        page = "1"
        for _ in range(MAX_PAGES):
            query: dict[str, str | int] = {"all": "true", "per_page": self._per_page, "page": page}
            if self._ref:
                query["ref"] = self._ref
            reply = self._client.request("GET", path, query=query)
            for item in reply.data or ():
                seen.setdefault(int(item["id"]), item)
            page = reply.headers.get("x-next-page", "").strip()
            if not page or not reply.data:
                break
        return [seen[i] for i in sorted(seen)]


def _status(sha: str, item: dict[str, Any]) -> CommitStatus:
    return CommitStatus(
        sha=sha,
        context=str(item.get("name") or "default"),
        state=_FROM_GITLAB.get(str(item.get("status")), ERROR),
        description=str(item.get("description") or ""),
        target_url=str(item.get("target_url") or ""),
        created_at=parse_time(item.get("created_at")),
    )
