"""A scripted hostile HTTP peer on 127.0.0.1: the git server, forge or Prometheus the controller
talks to, answering as an attacker would. Tests and bench/hostile.py replay each case with it.

``HostilePeer(script)`` serves every request with ``script(req, peer)``; the answers below are
the cases: an endless or oversized body, a body dribbled one byte at a time, a redirect to
another origin, a plain forward to a real server. Every request's method, path and headers are
kept in ``seen`` (so a test can prove a token never arrived).
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GIT_ADVERTISEMENT = "application/x-git-upload-pack-advertisement"
Script = Callable[[BaseHTTPRequestHandler, "HostilePeer"], None]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names


class HostilePeer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.stopping = threading.Event()
        self._request = threading.local()  # the body of the request this thread serves
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                peer._serve(self)

            def do_POST(self) -> None:
                peer._serve(self)

            def log_message(self, *_args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def request_body(self) -> bytes:
        """The body of the request the calling script answers (already read)."""
        return bytes(getattr(self._request, "body", b""))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def authorizations(self) -> list[str]:
        return [s.headers["authorization"] for s in self.seen if "authorization" in s.headers]

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        headers = {k.lower(): v for k, v in req.headers.items()}
        self.seen.append(Seen(req.command, req.path, headers))
        # Read the request body first: closing with it unread makes the kernel send a RST,
        # which can discard the answer before the client reads it (a flake, not a finding).
        self._request.body = b""
        with contextlib.suppress(ValueError, OSError):
            length = min(int(headers.get("content-length") or 0), 1 << 20)
            self._request.body = req.rfile.read(length) if length else b""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.script(req, self)  # the client giving up on us is the point
        req.close_connection = True


def _head(req: BaseHTTPRequestHandler, status: int, ctype: str, length: int | None) -> None:
    req.send_response(status)
    req.send_header("Content-Type", ctype)
    if length is not None:
        req.send_header("Content-Length", str(length))
    req.send_header("Connection", "close")
    req.end_headers()


def endless(ctype: str, first: bytes, unit: bytes) -> Script:
    """``first``, then ``unit`` forever (no Content-Length): the 8.5 GB info/refs."""

    def script(req: BaseHTTPRequestHandler, peer: HostilePeer) -> None:
        _head(req, 200, ctype, None)
        req.wfile.write(first)
        block = unit * max(1, (1 << 16) // len(unit))
        while not peer.stopping.is_set():
            req.wfile.write(block)

    return script


def oversized(ctype: str, body: bytes) -> Script:
    """One large answer, with an honest Content-Length (the 150 MB status list)."""

    def script(req: BaseHTTPRequestHandler, peer: HostilePeer) -> None:
        _head(req, 200, ctype, len(body))
        view = memoryview(body)
        for at in range(0, len(body), 1 << 20):
            if peer.stopping.is_set():
                return
            req.wfile.write(view[at : at + (1 << 20)])

    return script


def dribble(ctype: str, body: bytes, every: float) -> Script:
    """``body`` one byte per ``every`` seconds: no single read ever times out."""

    def script(req: BaseHTTPRequestHandler, peer: HostilePeer) -> None:
        _head(req, 200, ctype, len(body))
        for byte in body:
            if peer.stopping.wait(every):
                return
            req.wfile.write(bytes([byte]))
            req.wfile.flush()

    return script


def redirect(location: Callable[[str], str], status: int = 302) -> Script:
    """A redirect of every request to ``location(path)`` (another origin, say)."""

    def script(req: BaseHTTPRequestHandler, peer: HostilePeer) -> None:
        req.send_response(status)
        req.send_header("Location", location(req.path))
        req.send_header("Content-Length", "0")
        req.send_header("Connection", "close")
        req.end_headers()

    return script


def forward(base: str) -> Script:
    """Pass every request on to ``base`` (a real git or forge server) and its answer back."""

    def script(req: BaseHTTPRequestHandler, peer: HostilePeer) -> None:
        data = peer.request_body() or None
        skip = {"host", "content-length", "connection", "accept-encoding"}
        headers = {k: v for k, v in req.headers.items() if k.lower() not in skip}
        out = urllib.request.Request(
            base + req.path, data=data, headers=headers, method=req.command
        )
        try:
            with urllib.request.urlopen(out, timeout=30) as resp:
                status, body, reply = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as exc:
            status, body, reply = exc.code, exc.read(), exc.headers
        req.send_response(status)
        for key, value in reply.items():
            if key.lower() not in ("content-length", "connection", "transfer-encoding"):
                req.send_header(key, value)
        req.send_header("Content-Length", str(len(body)))
        req.send_header("Connection", "close")
        req.end_headers()
        req.wfile.write(body)

    return script


def pkt(payload: bytes) -> bytes:
    return b"%04x" % (len(payload) + 4) + payload


ADVERTISEMENT_HEAD = pkt(b"# service=git-upload-pack\n") + b"0000"


def endless_refs() -> Script:
    """A valid advertisement that never ends: one more ref forever."""
    return endless(GIT_ADVERTISEMENT, ADVERTISEMENT_HEAD, pkt(b"1" * 40 + b" refs/heads/x\n"))


def slow_refs(every: float) -> Script:
    return dribble(GIT_ADVERTISEMENT, ADVERTISEMENT_HEAD + b"0000", every)


def wait_for(cond: Callable[[], bool], deadline: float, what: str) -> None:
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(0.05)
