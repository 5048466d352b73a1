"""HTTP plumbing for the commit-status APIs: JSON over urllib, bounded retries, no token leaks.

Why not a dependency: four endpoints, JSON in and out; the stdlib does it. What matters:

- The token is sent only as a header, only to the configured origin (redirects are refused, a
  pagination link to another host is refused), and is scrubbed from every message we build (a
  server may echo it back). Errors and logs name where the token came from, never the token.
- 5xx, 429 and connection failures are retried with exponential backoff, bounded in attempts
  and delay (``Retry``; tests pass tiny delays). Other 4xx fail at once with a fix.
- Pagination loops are bounded and callers de-duplicate by the provider's status id, because
  offset paging shifts when a status is created mid-read (notification-controller#1009).
- Every answer is bounded (peer_limits): bytes read, JSON values parsed, and a total deadline
  per request (boundedhttp), so a forge sending 150 MB or one byte every few seconds costs an
  error on the gate, not memory or a hung pass. A limit passed is not retried.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gitops_gpu import boundedhttp, peer_limits
from gitops_gpu.errors import StatusBackendError

log = logging.getLogger(__name__)

MAX_PAGES = 100
_SHA = re.compile(r"[0-9a-fA-F]{7,64}")
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@dataclass(frozen=True)
class Retry:
    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after and retry_after.isdigit():
            return min(float(retry_after), self.max_delay)
        return min(self.base_delay * 2.0 ** (attempt - 1), self.max_delay)


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    data: Any


class HttpStatusError(StatusBackendError):
    """The provider answered with an HTTP error status (``status``; 0: no answer at all)."""

    def __init__(self, message: str, *, fix: str = "", status: int = 0) -> None:
        super().__init__(message, fix=fix)
        self.status = status


def check_sha(sha: str) -> str:
    """SHAs go into URL paths: accept hex only."""
    if not _SHA.fullmatch(sha):
        raise StatusBackendError(f"not a commit SHA: {sha[:80]!r}", fix="pass a full hex SHA")
    return sha


def next_link(link_header: str | None) -> str | None:
    """The rel="next" URL of an RFC 8288 Link header (GitHub, Gitea)."""
    for part in (link_header or "").split(","):
        found = _LINK_NEXT.search(part)
        if found:
            return found.group(1)
    return None


class HttpClient:
    def __init__(
        self,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        *,
        secret: str,
        token_source: str,
        retry: Retry | None = None,
        timeout: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self._origin = _origin(self.base_url)
        self._headers = {"User-Agent": "gitops-gpu", **headers}
        self._secret = secret
        self._token_source = token_source
        self.retry = retry or Retry()
        self._timeout = timeout
        self._sleep = sleep
        self._opener = boundedhttp.opener()  # follows no redirect: the token stays here

    def redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def request(
        self,
        method: str,
        path_or_url: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str | int] | None = None,
    ) -> Response:
        url = self._url(path_or_url, query)
        shown = self.redact(urllib.parse.urlsplit(url).path)
        data = json.dumps(body).encode() if body is not None else None
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        problem, code = "", 0
        for attempt in range(1, self.retry.attempts + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            retry_after: str | None = None
            try:
                status, lowered, raw = self._exchange(request, method, shown)
                if status < 300:
                    return Response(status, lowered, self._json(raw, method, shown))
                text = self.redact(raw.decode("utf-8", "replace").strip())
                reason = http.client.responses.get(status, "")
                problem = f"HTTP {status} {reason}: {text[:300]}"
                code = status
                if status != 429 and not 500 <= status < 600:
                    where = lowered.get("location", "")
                    if 300 <= status < 400 and where:
                        problem += f" (a redirect to {_origin(where)})"
                    raise self._error(method, shown, status, problem) from None
                retry_after = lowered.get("retry-after")
            except boundedhttp.PeerLimitError as exc:
                raise HttpStatusError(
                    self.redact(str(exc)),
                    fix=f"the answer from {self._origin} passed a limit (--max-response-bytes, "
                    "the response deadline): check the server; the pass will retry",
                ) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                problem = self.redact(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")
                code = 0
            if attempt < self.retry.attempts:
                delay = self.retry.delay(attempt, retry_after)
                log.warning(
                    "%s %s %s failed (%s); retry %d/%d in %.2fs",
                    self.provider,
                    method,
                    shown,
                    problem,
                    attempt,
                    self.retry.attempts - 1,
                    delay,
                )
                self._sleep(delay)
        raise HttpStatusError(
            f"{self.provider}: {method} {shown} failed after {self.retry.attempts} attempts: "
            f"{problem}",
            fix=f"check that {self._origin} is reachable and healthy; the pass will retry",
            status=code,
        )

    def _exchange(
        self, request: urllib.request.Request, method: str, shown: str
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, lower-cased headers, body) of one request, all of it read within the
        response deadline; an error status's body is read only up to 2000 bytes."""
        limits = peer_limits.current()
        what = f"{self.provider}: {method} {shown}"
        with boundedhttp.deadline(limits.response_deadline) as dl:
            try:
                reply = boundedhttp.open_request(self._opener, request, self._timeout, dl, what)
            except urllib.error.HTTPError as exc:
                with exc:
                    body = boundedhttp.read_capped(exc, 2000, dl, what, truncate=True)
                    return exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, body
            with reply:
                body = boundedhttp.read_capped(reply, limits.response_bytes, dl, what)
                log.debug("%s %s %s -> %s", self.provider, method, shown, reply.status)
                return reply.status, {k.lower(): v for k, v in reply.headers.items()}, body

    def _url(self, path_or_url: str, query: Mapping[str, str | int] | None) -> str:
        if "://" in path_or_url:
            if _origin(path_or_url) != self._origin:
                # Never send the token to a host the user did not configure.
                raise StatusBackendError(
                    f"{self.provider}: refusing to follow a link to another host "
                    f"({_origin(path_or_url)})",
                    fix=f"check the API URL; expected links under {self._origin}",
                )
            url = path_or_url
        else:
            url = self.base_url + path_or_url
        if query:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(query)
        return url

    def _json(self, raw: bytes, method: str, shown: str) -> Any:
        if not raw.strip():
            return None
        try:
            return boundedhttp.parse_json(raw, f"{self.provider}: {method} {shown}")
        except boundedhttp.PeerJSONError as exc:
            raise StatusBackendError(
                str(exc), fix=f"check that {self.base_url} is the {self.provider} API URL"
            ) from None
        except ValueError:
            raise StatusBackendError(
                f"{self.provider}: {method} {shown} returned a body that is not JSON",
                fix=f"check that {self.base_url} is the {self.provider} API URL",
            ) from None

    def _error(self, method: str, shown: str, code: int, problem: str) -> HttpStatusError:
        fixes = {
            401: f"the token from {self._token_source} was rejected: renew it or point "
            "--status-token-file/the env var at a valid one",
            403: f"the token from {self._token_source} may not write commit statuses: grant "
            "it the commit-status permission for this repository",
            404: "check the repository in the status backend spec, and that the token from "
            f"{self._token_source} can see it",
        }
        if 300 <= code < 400:
            fixes[code] = (
                "the API answered with a redirect, and the token is never sent on to another "
                "URL: set the API URL to where it redirects"
            )
        fix = fixes.get(code, "the provider refused the request; see its message above")
        return HttpStatusError(
            f"{self.provider}: {method} {shown}: {problem}", fix=fix, status=code
        )


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
