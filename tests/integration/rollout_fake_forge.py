"""A local stand-in for the GitHub, Gitea and GitLab commit-status APIs, strict about requests.

It implements only the documented subset gitops-gpu uses and checks every request: method, path,
auth and content headers, JSON body fields, allowed states, description length; GitLab's job
transitions too. A deviation is answered with HTTP 400 AND recorded in ``errors``, which the test
fixture asserts empty, so a test cannot pass by accident on a malformed request.

Its Gitea agrees with real Gitea 1.27 (tests/integration/test_forge_contract.py runs the same
tests against both): any state Gitea knows is accepted, ``skipped`` included; descriptions have
no length limit; a commit it does not have (when ``commits`` is given) answers 404 on GET and
500 on POST; listings are newest first by creation SECOND, equal seconds by ascending id.
It is kept for what a real server will not do on demand: 429s, 5xx and shifting pages.

Listings are served in tiny pages (``page_size``) so pagination is always exercised; ``fail``
queues error codes for the next requests; ``after_page`` runs after a listing page is served
(tests add a status there, shifting later pages like a real server does); ``page_delay`` makes
every listing page slow.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OWNER, REPO, PROJECT = "fleet-org", "gpu-fleet", "infra/gpu-fleet"
STATES = {
    "github": {"error", "failure", "pending", "success"},
    "gitea": {"pending", "success", "error", "failure", "warning", "skipped"},
    "gitlab": {"pending", "running", "success", "failed", "canceled"},
}
BODY_KEYS = {
    "github": {"state", "target_url", "description", "context"},
    "gitea": {"state", "target_url", "description", "context"},
    "gitlab": {
        "state",
        "ref",
        "name",
        "context",
        "target_url",
        "description",
        "coverage",
        "pipeline_id",
    },
}
_SHA = r"[0-9a-f]{40}"


# GitHub's documented limit; Gitea has none (a 1000-character description is stored whole).
MAX_DESCRIPTION = {"github": 140, "gitlab": 140, "gitea": None}


class FakeForge:
    def __init__(self, kind: str, token: str, commits: set[str] | None = None) -> None:
        self.kind, self.token = kind, token
        # The commits the forge has (Gitea only): None accepts every SHA.
        self.commits = commits
        self.clock = time.time
        self.teams: dict[str, dict[str, int]] = {}  # team -> member -> GitLab access level
        self.user = "gitops-gpu-bot"  # whose token posts: the listings' creator (GitLab: author)
        self.jobs: dict[str, list[dict[str, Any]]] = {}  # sha -> statuses in creation order
        # pull request (GitLab: merge request iid) -> its comments (GitLab: notes), in order
        self.comments: dict[int, list[dict[str, Any]]] = {}
        # pull requests (GitLab: merge requests) as each forge's API shows them
        self.pulls: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.fail: list[int] = []
        self.page_size = 2
        self.page_delay = 0.0  # seconds each listing page takes (a slow server)
        self.after_page: Callable[[int], None] | None = None
        self._next_id = 100
        self._lock = threading.RLock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def posts(self) -> int:
        return sum(1 for method, _ in self.requests if method == "POST")

    def add(
        self,
        sha: str,
        context: str,
        state: str,
        description: str = "",
        *,
        creator: str = "ci-bot",
        target_url: str = "",
    ) -> dict[str, Any]:
        """A status created by someone else (or earlier), with another account's token."""
        with self._lock:
            return self._create(sha, context, state, description, target_url, creator)

    def _create(
        self, sha: str, context: str, state: str, desc: str, url: str, creator: str = ""
    ) -> dict[str, Any]:
        self._next_id += 1
        second = int(self.clock())  # servers keep creation times to the second
        stamp = datetime.fromtimestamp(second, UTC).isoformat().replace("+00:00", "Z")
        job = {"id": self._next_id, "description": desc, "target_url": url, "created_at": stamp}
        user = creator or self.user
        if self.kind == "gitlab":  # UserBasic (docs: "List the statuses of a commit")
            job["author"] = {"id": 7, "username": user, "name": user, "state": "active"}
        else:  # GitHub: simple-user; Gitea: User. Both name the account "login".
            job["creator"] = {"id": 7, "login": user, "type": "User"}
        if self.kind == "gitlab":
            job.update(name=context, status=state, sha=sha)
        elif self.kind == "gitea":
            job.update(context=context, status=state)
        else:
            job.update(context=context, state=state)
        self.jobs.setdefault(sha, []).append(job)
        return job

    # --- request handling ---------------------------------------------------------------------
    def handle(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        self.requests.append((method, raw_path))
        problems = self._check_headers(method, headers)
        if problems:
            if problems[0].startswith("auth"):
                # Echo what was presented, as some servers do: the client must scrub it.
                return (
                    401,
                    {},
                    {
                        "message": "Bad credentials: "
                        + (headers.get("authorization") or headers.get("private-token") or "")
                    },
                )
            self.errors.extend(problems)
            return 400, {}, {"message": "; ".join(problems)}
        with self._lock:
            if self.fail:
                code = self.fail.pop(0)
                return code, {"Retry-After": "0"} if code == 429 else {}, {"message": "injected"}
            path, _, query = raw_path.partition("?")
            params = dict(urllib.parse.parse_qsl(query))
            base = {"github": "", "gitea": "/api/v1", "gitlab": "/api/v4"}[self.kind]
            if self.kind == "gitlab":
                repo = f"{base}/projects/{urllib.parse.quote(PROJECT, safe='')}"
                write, read = (
                    rf"{repo}/statuses/({_SHA})",
                    rf"{repo}/repository/commits/({_SHA})/statuses",
                )
            else:
                repo = f"{base}/repos/{OWNER}/{REPO}"
                write, read = rf"{repo}/statuses/({_SHA})", rf"{repo}/commits/({_SHA})/statuses"
            found = self._comment(method, path, repo, params, body)
            if found is not None:
                return found
            if method == "GET" and (found := self._pull(path, repo, params)) is not None:
                return found
            if method == "POST" and (m := re.fullmatch(write, path)):
                if not self._has(m.group(1)):
                    # Real Gitea: an internal error, not a 404 or 422.
                    return 500, {}, {"message": f"GetCommit[{m.group(1)}]: object does not exist"}
                return self._post(m.group(1), body, headers)
            if method == "GET" and (m := re.fullmatch(read, path)):
                if not self._has(m.group(1)):
                    return 404, {}, {"message": "Not Found", "errors": [f"{m.group(1)}"]}
                return self._list(m.group(1), params, path)
            if self.kind == "gitea" and method == "GET" and path == repo:
                return 200, {}, {"full_name": f"{OWNER}/{REPO}"}
            if (
                self.kind == "gitea"
                and method == "GET"
                and (m := re.fullmatch(rf"{repo}/git/commits/({_SHA})", path))
            ):
                if not self._has(m.group(1)):
                    return 404, {}, {"message": "Not Found"}
                return 200, {}, {"sha": m.group(1)}
            if (
                self.kind == "gitea"
                and path.startswith(f"{base}/repos/")
                and (not path.startswith(f"{repo}/"))
            ):
                return 404, {}, {"message": "The target couldn't be found.", "errors": []}
            if method == "GET" and (found := self._team(path, params)) is not None:
                return found
            self.errors.append(f"unexpected request {method} {raw_path}")
            return 404, {}, {"message": "Not Found"}

    def _comment(
        self, method: str, path: str, repo: str, params: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any] | None:
        """Issue comments (GitHub: POST/GET .../issues/{n}/comments, PATCH
        .../issues/comments/{id}; Gitea the same) and merge-request notes (GitLab: POST/GET
        .../merge_requests/{iid}/notes, PUT .../notes/{id})."""
        if self.kind == "gitlab":
            many, one, edit = (
                rf"{repo}/merge_requests/(\d+)/notes",
                rf"{repo}/merge_requests/(\d+)/notes/(\d+)",
                "PUT",
            )
        else:
            many, one, edit = (
                rf"{repo}/issues/(\d+)/comments",
                rf"{repo}/issues/comments/(\d+)",
                "PATCH",
            )
        if m := re.fullmatch(many, path):
            items = self.comments.setdefault(int(m.group(1)), [])
            if method == "GET":
                headers, chunk = self._paged(items, params, path)
                return 200, headers, chunk
            if method == "POST":
                self._next_id += 1
                item = {"id": self._next_id, "body": json.loads(body)["body"]}
                items.append(item)
                return 201, {}, item
        if method == edit and (m := re.fullmatch(one, path)):
            wanted = int(m.group(m.lastindex or 1))
            for items in self.comments.values():
                for item in items:
                    if item["id"] == wanted:
                        item["body"] = json.loads(body)["body"]
                        return 200, {}, item
            return 404, {}, {"message": "Not Found"}
        return None

    def add_pull(self, number: int, head: str, base: str, target: str = "main") -> None:
        """An open pull request from ``head`` onto ``target`` (merge base ``base``)."""
        if self.kind == "gitlab":
            item = {
                "iid": number,
                "state": "opened",
                "sha": head,
                "target_branch": target,
                "diff_refs": {"base_sha": base, "head_sha": head},
            }
        else:
            item = {
                "number": number,
                "state": "open",
                "merged": False,
                "head": {"sha": head, "ref": f"topic-{number}"},
                "base": {"sha": base, "ref": target},
            }
        self.pulls.append(item)

    def merge_pull(self, number: int, sha: str) -> None:
        for item in self.pulls:
            if item.get("iid", item.get("number")) == number:
                if self.kind == "gitlab":
                    item.update(state="merged", merge_commit_sha=sha)
                else:
                    item.update(state="closed", merged=True, merge_commit_sha=sha)

    def _pull(
        self, path: str, repo: str, params: dict[str, str]
    ) -> tuple[int, dict[str, str], Any] | None:
        many = f"{repo}/merge_requests" if self.kind == "gitlab" else f"{repo}/pulls"
        key = "iid" if self.kind == "gitlab" else "number"
        if path == many:
            wanted = {"gitlab": "opened"}.get(self.kind, "open")
            if params.get("state") != wanted:
                self.errors.append(f"pull listing without state={wanted}")
            shown = [p for p in self.pulls if p["state"] == wanted]
            if self.kind == "gitlab" and "target_branch" in params:
                shown = [p for p in shown if p["target_branch"] == params["target_branch"]]
            headers, chunk = self._paged(shown, params, path)
            return 200, headers, chunk
        if m := re.fullmatch(rf"{many}/(\d+)", path):
            for item in self.pulls:
                if item[key] == int(m.group(1)):
                    return 200, {}, item
            return 404, {}, {"message": "Not Found"}
        return None

    def _team(self, path: str, params: dict[str, str]) -> tuple[int, dict[str, str], Any] | None:
        """Team membership as each forge's API documents it; ``teams`` holds the members."""
        if self.kind == "github" and (
            m := re.fullmatch(r"/orgs/([^/]+)/teams/([^/]+)/memberships/([^/]+)", path)
        ):
            team, user = f"{m.group(1)}/{m.group(2)}", m.group(3)
            if user not in self.teams.get(team, ()):
                return 404, {}, {"message": "Not Found"}
            return 200, {}, {"state": "active", "role": "member"}
        if self.kind == "gitlab" and (
            m := re.fullmatch(r"/api/v4/groups/([^/]+)/members/all", path)
        ):
            group = urllib.parse.unquote(m.group(1))
            query = params.get("query", "")
            return (
                200,
                {},
                [
                    {"id": 7, "username": u, "access_level": level}
                    for u, level in self.teams.get(group, {}).items()
                    if query in u
                ],
            )
        return None

    def _has(self, sha: str) -> bool:
        return self.kind != "gitea" or self.commits is None or sha in self.commits

    def _check_headers(self, method: str, headers: dict[str, str]) -> list[str]:
        expected = {
            "github": {
                "authorization": f"Bearer {self.token}",
                "accept": "application/vnd.github+json",
                "x-github-api-version": "2022-11-28",
            },
            "gitea": {"authorization": f"token {self.token}"},
            "gitlab": {"private-token": self.token},
        }[self.kind]
        auth = {"authorization", "private-token"}
        problems = [
            f"auth: {k}" if k in auth else f"header {k}: {headers.get(k)!r}"
            for k, v in expected.items()
            if headers.get(k) != v
        ]
        problems.sort(key=lambda p: not p.startswith("auth"))
        if self.kind != "gitlab" and "private-token" in headers:
            problems.append("unexpected PRIVATE-TOKEN header")
        if method == "POST" and headers.get("content-type") != "application/json":
            problems.append(f"POST content-type {headers.get('content-type')!r}")
        return problems

    def _post(
        self, sha: str, raw: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], Any]:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        problems = []
        if not isinstance(body, dict):
            problems.append("body is not a JSON object")
            body = {}
        if extra := set(body) - BODY_KEYS[self.kind]:
            problems.append(f"unknown body fields {sorted(extra)}")
        if body.get("state") not in STATES[self.kind]:
            problems.append(f"state {body.get('state')!r} not allowed")
        limit = MAX_DESCRIPTION[self.kind]
        if not isinstance(body.get("description", ""), str) or (
            limit is not None and len(body.get("description", "")) > limit
        ):
            problems.append(f"description not a string or over {limit} characters")
        context = body.get("name") if self.kind == "gitlab" else body.get("context")
        if not isinstance(context, str) or not context:
            problems.append("no context/name")
        if problems:
            self.errors.extend(problems)
            return 422, {}, {"message": "; ".join(problems)}
        state = body["state"]
        if self.kind == "gitlab":
            return self._gitlab_post(sha, body, state)
        description, url = body.get("description", ""), body.get("target_url") or ""
        job = self._create(sha, str(context), state, description, url)
        return 201, {}, job

    def _gitlab_post(
        self, sha: str, body: dict[str, Any], state: str
    ) -> tuple[int, dict[str, str], Any]:
        # GitLab updates the running/pending job of that name, else starts a new one.
        active = [
            j
            for j in self.jobs.get(sha, [])
            if j["name"] == body["name"] and j["status"] in ("pending", "running")
        ]
        if active:
            job = active[-1]
            if (job["status"], state) in (
                ("pending", "pending"),
                ("running", "running"),
                ("running", "pending"),
            ):
                event = {"pending": "enqueue", "running": "run"}[state]
                return (
                    400,
                    {},
                    {"message": f"Cannot transition status via :{event} from :{job['status']}"},
                )
            job.update(status=state, description=body.get("description", ""))
            return 201, {}, job
        job = self._create(
            sha, body["name"], state, body.get("description", ""), body.get("target_url", "")
        )
        return 201, {}, job

    def _list(self, sha: str, params: dict[str, str], path: str) -> tuple[int, dict[str, str], Any]:
        jobs = list(self.jobs.get(sha, []))
        if self.kind == "gitea":
            # ORDER BY created_unix DESC: equal seconds keep insertion (ascending id) order.
            jobs.sort(key=lambda j: (-_second(j["created_at"]), j["id"]))
        elif self.kind == "github":
            jobs.reverse()  # newest first
        if self.kind == "gitlab" and params.get("all") != "true":
            self.errors.append("gitlab listing without all=true returns only the latest per name")
        headers, chunk = self._paged(jobs, params, path)
        if self.after_page is not None:
            self.after_page(int(params.get("page", "1")))
        if self.page_delay:
            time.sleep(self.page_delay)
        return 200, headers, chunk

    def _paged(
        self, items: list[dict[str, Any]], params: dict[str, str], path: str
    ) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """One page of a listing with the forge's own paging headers."""
        size_key = {"github": "per_page", "gitea": "limit", "gitlab": "per_page"}[self.kind]
        size = min(int(params.get(size_key, "30")), self.page_size)
        page = int(params.get("page", "1"))
        chunk = items[(page - 1) * size : page * size]
        more = page * size < len(items)
        headers: dict[str, str] = {}
        if self.kind == "gitlab":
            headers = {
                "X-Page": str(page),
                "X-Per-Page": str(size),
                "X-Total": str(len(items)),
                "X-Next-Page": str(page + 1) if more else "",
            }
        else:
            if more:
                nxt = urllib.parse.urlencode({**params, "page": page + 1})
                headers["Link"] = f'<{self.url}{path}?{nxt}>; rel="next"'
            if self.kind == "gitea":
                headers["X-Total-Count"] = str(len(items))
        return headers, chunk


def _second(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def _handler(forge: FakeForge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            code, extra, payload = forge.handle(self.command, self.path, headers, body)
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_PATCH(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
