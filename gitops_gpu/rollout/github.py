"""GitHub (and GitHub Enterprise Server) commit statuses as the promotion record.

POST /repos/{owner}/{repo}/statuses/{sha} and GET /repos/{owner}/{repo}/commits/{ref}/statuses
(newest first, paginated by Link header). API version 2022-11-28; states map one to one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gitops_gpu.rollout.forge import Dialect, ForgeBackend, Query, quote
from gitops_gpu.rollout.httpclient import HttpClient, Response, Retry, next_link

API_URL = "https://api.github.com"


class GitHub(Dialect):
    name = "github"

    def headers(self, token: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }

    def first_query(self) -> Query:
        return {"per_page": self.per_page}

    def next_page(
        self, reply: Response, url: str, query: Query | None, seen: int
    ) -> tuple[str, Query | None] | None:
        link = next_link(reply.headers.get("link"))
        return (link, None) if link else None

    def team_member(self, client: HttpClient, team: str, user: str) -> bool:
        org, _, slug = team.partition("/")
        path = f"/orgs/{quote(org)}/teams/{quote(slug)}/memberships/{quote(user)}"
        reply = client.request("GET", path)  # 404: not a member (or no such team)
        return isinstance(reply.data, dict) and reply.data.get("state") == "active"


class GitHubBackend(ForgeBackend):
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
        dialect = GitHub(f"/repos/{quote(owner)}/{quote(repo)}", per_page)
        web = "https://github.com" if api_url == API_URL else api_url.rstrip("/")
        dialect.web_url = f"{web.removesuffix('/api/v3')}/{quote(owner)}/{quote(repo)}"
        super().__init__(
            dialect, api_url, token, token_source=token_source, retry=retry, sleep=sleep
        )
