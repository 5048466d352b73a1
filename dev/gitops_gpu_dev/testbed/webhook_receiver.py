"""A webhook receiver on loopback for the notifier's tests and the demo: it records each POST
and answers with the next scripted status (then 200)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class Receiver:
    def __init__(self, path: str = "/hook") -> None:
        self.path = path
        self.script: list[tuple[int, dict[str, str]]] = []
        self.got: list[tuple[str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        rx = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with rx.lock:
                    rx.got.append((self.path, dict(self.headers), body))
                    status, headers = rx.script.pop(0) if rx.script else (200, {})
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="webhook-rx", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def bodies(self) -> list[Any]:
        with self.lock:
            return [json.loads(b) for _, _, b in self.got]

    def wait_for(self, what: str, pred: Any, timeout: float = 10.0) -> list[Any]:
        """The bodies once ``pred(bodies)`` holds; AssertionError with them at the deadline."""
        end = time.monotonic() + timeout
        while True:
            bodies = self.bodies()
            if pred(bodies):
                return bodies
            if time.monotonic() > end:
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {what}; got {bodies}"
                )
            time.sleep(0.05)
