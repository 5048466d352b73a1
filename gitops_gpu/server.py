"""The controller's HTTP endpoint on loopback by default: /metrics, /healthz, /readyz and
POST /webhook (a push to the fleet repo triggers a pass now instead of at the next poll).

The port may be reachable by anyone, so /webhook is guarded:
- it is off unless a secret is configured (or ``insecure`` is asked for, in a lab);
- the signature is checked as GitHub (X-Hub-Signature-256), Gitea (X-Gitea-Signature) or GitLab
  (X-Gitlab-Token) send it;
- the body is read up to MAX_BODY whatever the headers claim (negative, non-numeric or absent
  Content-Length, chunked); every connection has a read timeout, and at most
  MAX_CONCURRENT_WEBHOOKS bodies are read at once, so slow or huge requests cost bounded
  memory and threads while /metrics and the probes keep answering;
- a delivery seen in the last DEDUP_WINDOW seconds (same delivery id, or the same signed body
  replayed) is acknowledged and ignored;
- triggers coalesce in the controller: at most one pass is queued whatever arrives.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gitops_gpu.metrics import Metrics

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20
READ_TIMEOUT = 10.0  # seconds a client may take to send its request
MAX_CONCURRENT_WEBHOOKS = 4
# After an early answer (413, 400, 404, 503) the rest of the body is read and dropped for at
# most this long and this much, so the client sees the answer instead of a connection reset.
LINGER_SECONDS, LINGER_BYTES = 2.0, 4 << 20
DEDUP_WINDOW = 600.0
DEDUP_MAX = 4096
DELIVERY_HEADERS = (
    "x-github-delivery",
    "x-gitea-delivery",
    "x-gogs-delivery",
    "x-gitlab-event-uuid",
    "x-gitlab-webhook-uuid",
)


class BadRequestError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Probes:
    """What /healthz and /readyz answer: alive while the loop keeps beating, ready after the
    first pass (or standby check) completed."""

    def __init__(self, stall_after: float = 600.0) -> None:
        self.ready = False
        self.stall_after = stall_after
        self._last_beat = time.monotonic()

    def beat(self) -> None:
        self._last_beat = time.monotonic()
        self.ready = True

    @property
    def alive(self) -> bool:
        return time.monotonic() - self._last_beat < self.stall_after


def _signature_ok(secret: bytes, body: bytes, headers: dict[str, str]) -> bool:
    gitlab = headers.get("x-gitlab-token")
    if gitlab is not None:
        return hmac.compare_digest(gitlab.encode(), secret)
    digest = hmac.new(secret, body, hashlib.sha256).hexdigest()
    hub = headers.get("x-hub-signature-256")
    if hub is not None:
        return hmac.compare_digest(hub, "sha256=" + digest)
    return hmac.compare_digest(headers.get("x-gitea-signature", ""), digest)


class Deliveries:
    """Webhook deliveries seen recently: by the forge's delivery id and by body digest (a
    captured, validly signed request replayed under a new id is still the same body)."""

    def __init__(self, window: float = DEDUP_WINDOW, limit: int = DEDUP_MAX) -> None:
        self.window, self.limit = window, limit
        self._seen: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, keys: list[str], now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._seen and (
                len(self._seen) > self.limit or next(iter(self._seen.values())) < now - self.window
            ):
                self._seen.popitem(last=False)
            if any(k in self._seen for k in keys):
                return False
            for k in keys:
                self._seen[k] = now
            return True


def read_body(rfile: BufferedIOBase, headers: dict[str, str], cap: int = MAX_BODY) -> bytes:
    """The request body, never more than ``cap`` bytes read, whatever the headers say."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            line = rfile.readline(64).split(b";", 1)[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise BadRequestError(400, "malformed chunk") from None
            if size < 0 or len(body) + size > cap:
                raise BadRequestError(413, "too large")
            if size == 0:
                return bytes(body)
            body += rfile.read(size)
            rfile.read(2)  # CRLF after each chunk
    raw = headers.get("content-length")
    if raw is None:
        return b""
    if not raw.strip().isdigit():
        raise BadRequestError(400, "bad Content-Length")
    length = int(raw)
    if length > cap:
        raise BadRequestError(413, "too large")
    return rfile.read(length)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


class ControllerServer:
    def __init__(
        self,
        addr: str,
        metrics: Metrics,
        probes: Probes,
        on_webhook: Callable[[], None],
        webhook_secret: bytes | None = None,
        *,
        webhook_insecure: bool = False,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        host, _, port = addr.rpartition(":")
        self.metrics, self.probes = metrics, probes
        self.on_webhook, self.secret = on_webhook, webhook_secret
        self.webhook_enabled = webhook_secret is not None or webhook_insecure
        self.webhooks = 0
        self.deliveries = Deliveries()
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT_WEBHOOKS)
        if not self.webhook_enabled:
            log.info(
                "POST /webhook is off: give it a secret (--webhook-secret-file) to enable it, "
                "or --webhook-insecure in a lab"
            )
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = read_timeout  # a half-sent request frees its thread after this

            def log_message(self, format: str, *args: object) -> None:
                log.debug("http: " + format, *args)

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _linger(self) -> None:
                """Stop writing, then drop what the client still sends, bounded: closing a
                socket with unread input resets it, and the reset can destroy the answer."""
                try:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_WR)
                    self.connection.settimeout(LINGER_SECONDS)
                    left, deadline = LINGER_BYTES, time.monotonic() + LINGER_SECONDS
                    while left > 0 and time.monotonic() < deadline:
                        data = self.connection.recv(min(1 << 16, left))
                        if not data:
                            break
                        left -= len(data)
                except OSError:
                    pass  # the client went away or was slow: nothing more to do for it

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, generate_latest(server.metrics.registry), CONTENT_TYPE_LATEST)
                elif self.path == "/healthz":
                    ok = server.probes.alive
                    self._send(200 if ok else 500, b"ok" if ok else b"loop stalled")
                elif self.path == "/readyz":
                    ok = server.probes.ready
                    self._send(200 if ok else 503, b"ok" if ok else b"not ready")
                else:
                    self._send(404, b"not found")

            def do_POST(self) -> None:
                if self.path != "/webhook" or not server.webhook_enabled:
                    self.close_connection = True
                    self._send(404, b"not found")
                    self._linger()
                    return
                if not server._slots.acquire(blocking=False):
                    self.close_connection = True
                    server._rejected("busy")
                    self._send(503, b"busy")
                    self._linger()
                    return
                try:
                    self._webhook()
                finally:
                    server._slots.release()

            def _webhook(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    body = read_body(self.rfile, headers)
                except BadRequestError as exc:
                    self.close_connection = True
                    server._rejected("too_large" if exc.code == 413 else "malformed")
                    self._send(exc.code, str(exc).encode())
                    self._linger()
                    return
                except TimeoutError:
                    self.close_connection = True
                    server._rejected("timeout")
                    return
                if server.secret is not None and not _signature_ok(server.secret, body, headers):
                    server._rejected("signature")
                    self._send(401, b"bad signature")
                    return
                keys = [f"body:{hashlib.sha256(body).hexdigest()}"]
                keys += [f"id:{headers[h]}" for h in DELIVERY_HEADERS if headers.get(h)]
                if not server.deliveries.first_time(keys):
                    server._rejected("duplicate")
                    self._send(200, b"duplicate delivery, ignored")
                    return
                server.webhooks += 1
                server.on_webhook()
                self._send(202, b"queued")

        self.httpd = _Server((host or "127.0.0.1", int(port)), Handler)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    def _rejected(self, reason: str) -> None:
        self.metrics.webhook_rejected.labels(reason).inc()
        log.info("webhook request rejected: %s", reason)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> ControllerServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
