"""HTTP reads from peers that may be hostile: a total deadline per request, a byte cap per answer,
and no redirect followed.

A socket timeout bounds one read, not a request: a server sending one byte every few seconds
never trips it. So every socket this module's opener connects inside ``deadline(s)`` is shut
down when the block's time is up (one watchdog thread for all of them), which ends any read in
progress. ``read_capped`` stops at ``cap`` bytes whatever Content-Length says. urllib stays the
transport, so proxies from the environment still apply.
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import itertools
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from gitops_gpu import osthread, peer_limits

CHUNK = 1 << 16


class PeerLimitError(OSError):
    """The peer's answer passed a limit: ``reason`` is "too_large" or "deadline"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _Watchdog:
    """Shuts sockets down at their deadlines; one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadline, socket.socket]] = []
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, end: float, owner: Deadline, sock: socket.socket) -> None:
        with self._cond:
            heapq.heappush(self._heap, (end, next(self._ids), owner, sock))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="http-deadline", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        osthread.name_current()
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                end, _, owner, sock = self._heap[0]
                wait = end - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
            if not owner.done:
                owner.expired = True
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()
_local = threading.local()


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self.done = False

    def watch(self, sock: socket.socket) -> None:
        _WATCHDOG.add(self.end, self, sock)

    def check(self, what: str) -> None:
        if self.expired or time.monotonic() > self.end:
            self.expired = True
            raise PeerLimitError("deadline", f"{what}: no complete answer within {self.seconds:g}s")


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[Deadline]:
    """Sockets this module's openers connect inside the block are shut down after ``seconds``."""
    dl = Deadline(seconds)
    previous = getattr(_local, "deadline", None)
    _local.deadline = dl
    try:
        yield dl
    finally:
        dl.done = True  # the watchdog leaves a finished request's socket alone
        _local.deadline = previous


def _watched(sock: socket.socket | None) -> None:
    dl: Deadline | None = getattr(_local, "deadline", None)
    if dl is not None and sock is not None:
        dl.watch(sock)


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _watched(self.sock)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _watched(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPSConnection, req, context=self._context)  # type: ignore[attr-defined]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx comes back as an HTTPError: urllib would replay the Authorization header to
    wherever a redirect points, another origin included."""

    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


def opener(context: Any = None) -> urllib.request.OpenerDirector:
    """An opener whose connections obey ``deadline`` and which follows no redirect."""
    return urllib.request.build_opener(_HTTPHandler, _HTTPSHandler(context=context), NoRedirect)


def read_capped(
    resp: Any, cap: int, dl: Deadline | None, what: str, *, truncate: bool = False
) -> bytes:
    """The body, at most ``cap`` bytes (PeerLimitError "too_large" past it, or only its first
    ``cap`` bytes with ``truncate``), read in chunks so a slow peer is cut at the deadline, not
    at a read's end."""
    body = bytearray()
    try:
        while True:
            chunk = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
            if not chunk:
                break
            body += chunk
            if len(body) > cap and truncate:
                return bytes(body[:cap])
            if len(body) > cap:
                raise PeerLimitError("too_large", f"{what}: answer larger than {cap} bytes")
            if dl is not None:
                dl.check(what)
    except (OSError, http.client.HTTPException, urllib.error.URLError):
        if dl is not None:
            dl.check(what)  # the watchdog cut it: say so, not "connection reset"
        raise
    if dl is not None and dl.expired:
        dl.check(what)
    return bytes(body)


def open_request(
    op: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    timeout: float,
    dl: Deadline,
    what: str,
) -> Any:
    """``op.open``; a failure caused by the deadline is PeerLimitError "deadline". An HTTP error
    status (3xx included, see NoRedirect) raises urllib's HTTPError as usual."""
    try:
        return op.open(request, timeout=min(timeout, dl.seconds))
    except urllib.error.HTTPError:
        raise
    except (OSError, http.client.HTTPException):
        dl.check(what)
        raise


class PeerJSONError(ValueError):
    """An answer with more JSON values than a peer may send (or nested past Python's limit)."""


def parse_json(raw: bytes, what: str) -> Any:
    """json.loads, refusing first what would cost more than a few dozen MB to hold: each ``{``
    or ``[`` (an upper bound on objects, arrays and depth) costs far more parsed than sent."""
    cap = peer_limits.current().response_objects
    if raw.count(b"{") + raw.count(b"[") > cap:
        raise PeerJSONError(f"{what}: answer holds more than {cap} JSON objects and arrays")
    try:
        return json.loads(raw)
    except RecursionError:
        raise PeerJSONError(f"{what}: answer nested too deep") from None
