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
from collections.abc import Callable

from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout.forge import Dialect, ForgeBackend, Query, quote
from gitops_gpu.rollout.httpclient import HttpClient, HttpStatusError, Response, Retry, next_link


class Gitea(Dialect):
    name = "gitea"
    state_key = "status"
    always_target_url = True

    def __init__(self, repo_path: str, per_page: int, repo: str, server: str) -> None:
        super().__init__(repo_path, per_page)
        self.repo, self.server = repo, server
        self.probe: HttpClient | None = None  # one attempt each: diagnosis after a failure

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"token {token}", "Accept": "application/json"}

    def first_query(self) -> Query:
        return {"page": 1, "limit": self.per_page}

    def next_page(
        self, reply: Response, url: str, query: Query | None, seen: int
    ) -> tuple[str, Query | None] | None:
        # The server may cap `limit` below ours, so a short page is not the end; an empty page,
        # a Link header without rel=next, or the total count is.
        link = reply.headers.get("link")
        total = reply.headers.get("x-total-count", "")
        if not reply.data or (link is not None and next_link(link) is None):
            return None
        if total.isdigit() and seen >= int(total):
            return None
        page = int((query or {}).get("page", 1)) + 1
        return url, {**(query or {}), "page": page, "limit": self.per_page}  # state=open kept

    def team_member(self, client: HttpClient, team: str, user: str) -> bool:
        org, _, name = team.partition("/")
        found = client.request("GET", f"/orgs/{quote(org)}/teams/search", query={"q": name})
        teams = (found.data or {}).get("data") if isinstance(found.data, dict) else None
        ids = [t["id"] for t in teams or () if str(t.get("name", "")).lower() == name.lower()]
        if not ids:
            return False
        client.request("GET", f"/teams/{ids[0]}/members/{quote(user)}")  # 404: not a member
        return True

    def explain(self, exc: HttpStatusError, sha: str, posting: bool) -> Exception:
        """Gitea answers a commit it lacks with 404 (GET) or 500 (POST): say so when it is that."""
        suspect = 500 <= exc.status < 600 if posting else exc.status == 404
        if not suspect or self.probe is None:
            return exc
        try:
            self.probe.request("GET", self.repo_path)
        except HttpStatusError:
            return exc  # the repository itself is missing or the server is down: as reported
        try:
            self.probe.request("GET", f"{self.repo_path}/git/commits/{sha}")
        except HttpStatusError as probe:
            if probe.status in (404, 422):
                return StatusBackendError(
                    f"gitea: commit {sha} is not on the forge ({self.repo} at {self.server})",
                    fix="push the commit to that repository first (a status can only be set on "
                    "a commit the forge has), and check that the status backend names the "
                    "repository the fleet is read from",
                )
        return exc


class GiteaBackend(ForgeBackend):
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
        server = server_url.rstrip("/")
        dialect = Gitea(f"/repos/{quote(owner)}/{quote(repo)}", limit, f"{owner}/{repo}", server)
        api = server + "/api/v1"
        dialect.web_url = f"{server}/{quote(owner)}/{quote(repo)}"
        super().__init__(dialect, api, token, token_source=token_source, retry=retry, sleep=sleep)
        dialect.probe = HttpClient(
            "gitea",
            api,
            dialect.headers(token),
            secret=token,
            token_source=token_source,
            retry=Retry(attempts=1),
            sleep=sleep,
        )
