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

import time
import urllib.parse
from collections.abc import Callable

from gitops_gpu.rollout.forge import Dialect, ForgeBackend, Item, PullRequest, Query
from gitops_gpu.rollout.httpclient import HttpClient, Response, Retry
from gitops_gpu.rollout.status import ERROR, FAILURE, PENDING, SUCCESS, CommitStatus

_TO_GITLAB: dict[str, str] = {SUCCESS: "success", FAILURE: "failed", ERROR: "canceled"}
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


class GitLab(Dialect):
    name = "gitlab"
    state_key = "status"
    context_key = "name"

    def __init__(self, repo_path: str, per_page: int, ref: str | None) -> None:
        super().__init__(repo_path, per_page)
        self.ref = ref

    def headers(self, token: str) -> dict[str, str]:
        return {"PRIVATE-TOKEN": token, "Accept": "application/json"}

    edit_method = "PUT"

    def pulls_path(self) -> str:
        return f"{self.repo_path}/merge_requests"

    def pulls_query(self, branch: str) -> Query:
        return {**self.first_query(), "state": "opened", "target_branch": branch}

    def pull_path(self, number: int) -> str:
        return f"{self.repo_path}/merge_requests/{number}"

    def merge_commit(self, item: Item) -> str | None:
        sha = item.get("merge_commit_sha") or item.get("squash_commit_sha")
        return str(sha) if item.get("state") == "merged" and sha else None

    def parse_pull(self, item: Item, branch: str) -> PullRequest | None:
        refs = item.get("diff_refs")
        if item.get("target_branch") != branch or not isinstance(item.get("iid"), int):
            return None
        base = str(refs.get("base_sha") or "") if isinstance(refs, dict) else ""
        iid = int(item["iid"])
        return PullRequest(iid, str(item.get("sha") or ""), base, f"refs/merge-requests/{iid}/head")

    def comments_path(self, number: int) -> str:
        return f"{self.repo_path}/merge_requests/{number}/notes"

    def comment_path(self, number: int, comment_id: int) -> str:
        return f"{self.repo_path}/merge_requests/{number}/notes/{comment_id}"

    def list_path(self, sha: str) -> str:
        return f"{self.repo_path}/repository/commits/{sha}/statuses"

    def first_query(self) -> Query:
        query: Query = {"all": "true", "per_page": self.per_page, "page": "1"}
        if self.ref:
            query["ref"] = self.ref
        return query

    def next_page(
        self, reply: Response, url: str, query: Query | None, seen: int
    ) -> tuple[str, Query | None] | None:
        page = reply.headers.get("x-next-page", "").strip()
        if not page or not reply.data:
            return None
        return url, {**(query or {}), "page": page}

    def from_forge(self, state: str) -> str:
        return _FROM_GITLAB.get(state, ERROR)

    def commit_url(self, sha: str) -> str:
        return f"{self.web_url}/-/commit/{sha}"

    def creator_of(self, item: Item) -> str:
        author = item.get("author")
        return str(author.get("username") or "") if isinstance(author, dict) else ""

    def team_member(self, client: HttpClient, team: str, user: str) -> bool:
        """A team is a group (its full path); inherited members count, as GitLab's do."""
        group = urllib.parse.quote(team, safe="")
        found = client.request("GET", f"/groups/{group}/members/all", query={"query": user})
        members = found.data if isinstance(found.data, list) else []
        # access_level 30: Developer and above (GitLab's level for approving merges)
        return any(m.get("username") == user and m.get("access_level", 0) >= 30 for m in members)

    def current(self, items: list[Item]) -> Item | None:
        # GitLab updates the name's unfinished job, whoever posted a finished one after it.
        active = [i for i in items if _FROM_GITLAB.get(str(i.get("status"))) == PENDING]
        return active[-1] if active else super().current(items)

    def state_for(self, status: CommitStatus, latest: Item | None) -> str | None:
        if status.state != PENDING or latest is None:
            return _TO_GITLAB.get(status.state, "pending")
        current = str(latest.get("status"))
        if current == "running":
            return None  # GitLab cannot change a running job's description
        if _FROM_GITLAB.get(current) == PENDING:
            return "running"  # the one allowed in-progress transition
        return "pending"  # the job finished: GitLab starts a new one, which begins as pending

    def body(self, status: CommitStatus, state: str) -> dict[str, str]:
        body = super().body(status, state)
        if self.ref:
            body["ref"] = self.ref
        return body


class GitLabBackend(ForgeBackend):
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
        # A numeric id or a namespaced path ("group/sub/project"), which must be URL-encoded.
        dialect = GitLab(f"/projects/{urllib.parse.quote(project, safe='')}", per_page, ref)
        api = server_url.rstrip("/") + "/api/v4"
        # A numeric id has no web path: link the API's commit instead.
        dialect.web_url = (
            f"{api}{dialect.repo_path}/repository"
            if project.isdigit()
            else f"{server_url.rstrip('/')}/{project}"
        )
        super().__init__(dialect, api, token, token_source=token_source, retry=retry, sleep=sleep)
