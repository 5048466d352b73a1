"""One commit-status backend for every forge API; a ``Dialect`` says where each forge differs.

The shape is the same everywhere: GET the commit's statuses page by page (de-duplicated by the
forge's status id, oldest first by id, since ids grow with time and pages shift while statuses
are added), POST one status. A dialect names the paths, the auth headers, the JSON keys, the
state maps, how pages go on, and two hooks: ``state_for`` (GitLab's job transitions) and
``explain`` (Gitea's answers for a commit it lacks).
"""

from __future__ import annotations

import abc
import logging
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gitops_gpu import peer_limits, timefmt
from gitops_gpu.errors import StatusBackendError
from gitops_gpu.rollout import pr_comment
from gitops_gpu.rollout.httpclient import (
    MAX_PAGES,
    HttpClient,
    HttpStatusError,
    Response,
    Retry,
    check_sha,
)
from gitops_gpu.rollout.status import (
    STATES,
    CommitStatus,
    StatusBackend,
    fit_description,
)

log = logging.getLogger(__name__)
Item = dict[str, Any]
# A status's seal travels in its target_url's fragment: every forge stores that URL verbatim,
# and a browser following the link ignores the fragment.
SEAL_FRAGMENT = "#gitops-gpu-seal="
TEAM_TTL_SECONDS = 60.0
Query = dict[str, str | int]


def quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


class Dialect(abc.ABC):
    name: str
    state_key = "state"  # the listing's key for the state (Gitea: "status")
    context_key = "context"  # GitLab: "name"
    always_target_url = False  # Gitea takes an empty target_url; others omit it

    def __init__(self, repo_path: str, per_page: int) -> None:
        self.repo_path, self.per_page = repo_path, per_page
        self.web_url = ""  # the repository's web page, for sealed statuses' links

    def commit_url(self, sha: str) -> str:
        return f"{self.web_url}/commit/{sha}"

    def creator_of(self, item: Item) -> str:
        """The account that posted the status, as the forge reports it (GitHub, Gitea)."""
        creator = item.get("creator")
        return str(creator.get("login") or "") if isinstance(creator, dict) else ""

    @abc.abstractmethod
    def headers(self, token: str) -> dict[str, str]: ...

    def list_path(self, sha: str) -> str:
        return f"{self.repo_path}/commits/{sha}/statuses"

    def post_path(self, sha: str) -> str:
        return f"{self.repo_path}/statuses/{sha}"

    # Pull-request comments (rollout/pr_comment.py): GitHub and Gitea keep them on the issue
    # of the PR; GitLab overrides these with merge-request notes.
    edit_method = "PATCH"

    def comments_path(self, number: int) -> str:
        return f"{self.repo_path}/issues/{number}/comments"

    def comment_path(self, number: int, comment_id: int) -> str:
        return f"{self.repo_path}/issues/comments/{comment_id}"

    def pulls_path(self) -> str:
        return f"{self.repo_path}/pulls"

    def pulls_query(self, branch: str) -> Query:
        return {**self.first_query(), "state": "open"}

    def parse_pull(self, item: Item, branch: str) -> PullRequest | None:
        """An open pull request against ``branch``, or None (another base, a bad item)."""
        head, base = item.get("head"), item.get("base")
        if not isinstance(head, dict) or not isinstance(base, dict):
            return None
        if base.get("ref") != branch or not isinstance(item.get("number"), int):
            return None
        number = int(item["number"])
        # The merge base when the forge says it (Gitea), else the base's tip (GitHub).
        against = str(item.get("merge_base") or base.get("sha") or "")
        return PullRequest(number, str(head.get("sha") or ""), against, f"refs/pull/{number}/head")

    def pull_path(self, number: int) -> str:
        return f"{self.repo_path}/pulls/{number}"

    def merge_commit(self, item: Item) -> str | None:
        """The commit a merged pull request landed as on the branch; None: not merged."""
        sha = item.get("merge_commit_sha")
        return str(sha) if item.get("merged") and sha else None

    @abc.abstractmethod
    def first_query(self) -> Query: ...

    @abc.abstractmethod
    def next_page(
        self, reply: Response, url: str, query: Query | None, seen: int
    ) -> tuple[str, Query | None] | None:
        """Where the next page is (url or path, query), or None at the end; ``seen``: the
        distinct statuses read so far."""

    def from_forge(self, state: str) -> str:
        """Our state for the forge's; states we do not know read as failure."""
        return state if state in STATES else "failure"

    def team_member(self, client: HttpClient, team: str, user: str) -> bool:
        """Whether the forge says ``user`` belongs to ``team`` ("org/team"); an error raises."""
        raise NotImplementedError

    def current(self, items: list[Item]) -> Item | None:
        """The item of a context a new post is judged against (oldest first in)."""
        return items[-1] if items else None

    def state_for(self, status: CommitStatus, latest: Item | None) -> str | None:
        """The forge state to post, given the latest item of the context; None: cannot say it."""
        return status.state

    def explain(self, exc: HttpStatusError, sha: str, posting: bool) -> Exception:
        return exc

    def parse(self, sha: str, item: Item) -> CommitStatus:
        url, _, seal = str(item.get("target_url") or "").partition(SEAL_FRAGMENT)
        if seal and url == self.commit_url(sha):
            url = ""  # the link body() put in for a status that had none: not part of it
        return CommitStatus(
            sha=sha,
            context=str(item.get(self.context_key) or "default"),
            state=self.from_forge(str(item.get(self.state_key) or item.get("state") or "")),
            description=str(item.get("description") or ""),
            target_url=url,
            created_at=timefmt.epoch(item.get("created_at")),
            seal=seal,
            creator=self.creator_of(item),
        )

    def body(self, status: CommitStatus, state: str) -> dict[str, str]:
        body = {
            "state": state,
            self.context_key: status.context,
            "description": fit_description(status.description),
        }
        url = status.target_url
        if status.seal:
            url = (url or self.commit_url(status.sha)) + SEAL_FRAGMENT + status.seal
        if url or self.always_target_url:
            body["target_url"] = url
        return body


@dataclass(frozen=True)
class PullRequest:
    number: int  # GitLab: the merge request's iid
    head: str  # the head commit
    base: str  # the commit of the tracked branch it is compared with
    ref: str  # the head's ref on the forge, to fetch it ("refs/pull/7/head")


def check_sha_or_none(sha: str) -> bool:
    return len(sha) == 40 and all(c in "0123456789abcdef" for c in sha)


class ForgeBackend(StatusBackend):
    """Commit statuses through a forge's HTTP API, spoken in ``dialect``."""

    def __init__(
        self,
        dialect: Dialect,
        api_url: str,
        token: str,
        *,
        token_source: str = "the status token",
        retry: Retry | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.dialect = dialect
        self.name = dialect.name
        self._client = HttpClient(
            dialect.name,
            api_url,
            dialect.headers(token),
            secret=token,
            token_source=token_source,
            retry=retry,
            sleep=sleep,
        )
        self._last: dict[str, list[Item]] = {}  # sha -> its items at the last read
        self._members: dict[tuple[str, str], tuple[float, bool]] = {}  # (team, user) -> when, is

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        return [self.dialect.parse(sha, item) for item in self._items(sha)]

    def in_team(self, team: str, user: str) -> bool:
        """Team approvers: the forge's membership, asked at most once a minute per pair. An
        answer the forge cannot give (404, an error) is "no": an approval never counts on doubt."""
        now = time.monotonic()
        cached = self._members.get((team, user))
        if cached is not None and now - cached[0] < TEAM_TTL_SECONDS:
            return cached[1]
        try:
            member = self.dialect.team_member(self._client, team, user)
        except HttpStatusError as exc:
            member = False
            if exc.status != 404:
                log.warning("%s: cannot tell whether %s is in %s: %s", self.name, user, team, exc)
        if len(self._members) >= 1024:
            self._members.clear()
        self._members[(team, user)] = (now, member)
        return member

    def _write(self, status: CommitStatus) -> bool:
        sha = check_sha(status.sha)
        items = self._last.get(sha)
        if items is None:
            items = self._items(sha)
        mine = [i for i in items if self.dialect.parse(sha, i).context == status.context]
        latest = self.dialect.current(mine)
        state = self.dialect.state_for(status, latest)
        if state is None:
            log.info("%s cannot show %s on %s now; skipped", self.name, status.context, sha[:7])
            return False
        try:
            self._client.request(
                "POST", self.dialect.post_path(sha), body=self.dialect.body(status, state)
            )
        except HttpStatusError as exc:
            raise self.dialect.explain(exc, sha, posting=True) from None
        self._last.pop(sha, None)
        return True

    def open_pulls(self, branch: str) -> list[PullRequest]:
        """Open pull requests against ``branch`` (at most MAX_PAGES pages of them)."""
        found: dict[int, PullRequest] = {}
        url: str = self.dialect.pulls_path()
        query: Query | None = self.dialect.pulls_query(branch)
        for _ in range(MAX_PAGES):
            reply = self._client.request("GET", url, query=query)
            for item in reply.data if isinstance(reply.data, list) else ():
                pr = self.dialect.parse_pull(item, branch) if isinstance(item, dict) else None
                if pr is not None and check_sha_or_none(pr.head) and check_sha_or_none(pr.base):
                    found.setdefault(pr.number, pr)
            following = self.dialect.next_page(reply, url, query, len(found))
            if following is None:
                break
            url, query = following
        return [found[n] for n in sorted(found)]

    def merged_as(self, number: int) -> str | None:
        """The merge commit of pull request ``number`` (None while open or when closed
        without merging)."""
        reply = self._client.request("GET", self.dialect.pull_path(number))
        return self.dialect.merge_commit(reply.data) if isinstance(reply.data, dict) else None

    def upsert_comment(self, number: int, body: str) -> str:
        """Keep ONE gitops-gpu comment on pull request ``number``: edit the one carrying the
        marker in place, or create it. "created", "edited" or "unchanged"."""
        mine = pr_comment.ours(self._comments(number))
        if mine is None:
            self._client.request("POST", self.dialect.comments_path(number), body={"body": body})
            return "created"
        if str(mine.get("body") or "") == body:
            return "unchanged"
        path = self.dialect.comment_path(number, int(mine["id"]))
        self._client.request(self.dialect.edit_method, path, body={"body": body})
        return "edited"

    def _comments(self, number: int) -> list[Item]:
        out: dict[int, Item] = {}
        url: str = self.dialect.comments_path(number)
        query: Query | None = self.dialect.first_query()
        for _ in range(MAX_PAGES):
            reply = self._client.request("GET", url, query=query)
            for item in reply.data if isinstance(reply.data, list) else ():
                if isinstance(item, dict) and isinstance(item.get("id"), int):
                    out.setdefault(item["id"], item)
            following = self.dialect.next_page(reply, url, query, len(out))
            if following is None:
                break
            url, query = following
        return [out[i] for i in sorted(out)]

    def _items(self, sha: str) -> list[Item]:
        """Every status item of the commit, oldest first (by id), without duplicates."""
        seen: dict[int, Item] = {}
        cap = peer_limits.current().statuses
        url: str = self.dialect.list_path(check_sha(sha))
        query: Query | None = self.dialect.first_query()
        for _ in range(MAX_PAGES):
            try:
                reply = self._client.request("GET", url, query=query)
            except HttpStatusError as exc:
                raise self.dialect.explain(exc, sha, posting=False) from None
            if not isinstance(reply.data, list | type(None)):
                raise StatusBackendError(
                    f"{self.name}: the status listing of {sha[:12]} is not a list",
                    fix="check that the status backend's API URL is the forge's API",
                )
            for item in reply.data or ():
                if not isinstance(item, dict) or not isinstance(item.get("id"), int):
                    continue  # not a status the forge would send: read as absent
                seen.setdefault(item["id"], item)
            if len(seen) > cap:
                raise StatusBackendError(
                    f"{self.name}: commit {sha[:12]} has more than {cap} statuses",
                    fix="delete stale statuses on the forge, or raise --max-statuses; until "
                    "then this commit's record cannot be read and its stages wait",
                )
            following = self.dialect.next_page(reply, url, query, len(seen))
            if following is None:
                break
            url, query = following
        items = [seen[i] for i in sorted(seen)]
        if len(self._last) >= 64:
            self._last.clear()  # a cache for the write that follows a read, not a store
        self._last[sha] = items
        return items
