"""The controller's HTTP endpoint on loopback by default: /metrics, /healthz, /readyz and
POST /webhook (a push to the fleet repo triggers a pass now instead of at the next poll).

A webhook secret, when configured, is checked like GitHub's X-Hub-Signature-256 (HMAC-SHA256 of
the body) or GitLab's X-Gitlab-Token; bodies are capped so a flood cannot exhaust memory.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gitops_gpu.metrics import Metrics

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20


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
    sig = headers.get("x-hub-signature-256", "")
    want = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(sig, want)


class ControllerServer:
    def __init__(
        self,
        addr: str,
        metrics: Metrics,
        probes: Probes,
        on_webhook: Callable[[], None],
        webhook_secret: bytes | None = None,
    ) -> None:
        host, _, port = addr.rpartition(":")
        self.metrics, self.probes = metrics, probes
        self.on_webhook, self.secret = on_webhook, webhook_secret
        self.webhooks = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                log.debug("http: " + format, *args)

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

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
                if self.path != "/webhook":
                    self._send(404, b"not found")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    self._send(413, b"too large")
                    return
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                if server.secret is not None and not _signature_ok(server.secret, body, headers):
                    self._send(401, b"bad signature")
                    return
                server.webhooks += 1
                server.on_webhook()
                self._send(202, b"queued")

        self.httpd = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> ControllerServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
