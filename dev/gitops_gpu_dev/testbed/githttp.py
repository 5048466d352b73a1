"""The fleet remote over smart HTTP: `git http-backend` behind a small threaded server on
127.0.0.1, so gitops-gpu and Flux (whose GitRepository takes http(s) or ssh URLs only) fetch
the same bare repo the same way. Counts ref advertisements (one per poll) by client."""

from __future__ import annotations

import collections
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class GitHTTP:
    def __init__(self, root: Path) -> None:
        """Serve every bare repo under ``root`` at http://127.0.0.1:PORT/<name>."""
        self.root = root
        self.polls: collections.Counter[str] = collections.Counter()  # user agent -> info/refs
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._serve(self)

            def do_POST(self) -> None:
                server._serve(self)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        path, _, query = req.path.partition("?")
        agent = (req.headers.get("User-Agent") or "?").split("/")[0]
        if path.endswith("/info/refs"):
            self.polls[agent] += 1
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "bench",  # lets the controller push its git notes
            "REQUEST_METHOD": req.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": req.headers.get("Content-Type") or "",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": req.headers.get("Content-Encoding") or "",
            "GIT_PROTOCOL": req.headers.get("Git-Protocol") or "",
        }
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.split(b"\r\n"):
            key, _, value = line.decode("latin-1").partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        req.send_response(status)
        for key, value in headers:
            req.send_header(key, value)
        req.send_header("Content-Length", str(len(payload)))
        req.end_headers()
        req.wfile.write(payload)
