"""A loopback TLS proxy between a controller process and the testbed's apiserver that sees every
request line, counts the writes, and calls back after the k-th one has been forwarded: so a
test can `kill -9` the controller at a chosen point inside a pass from outside, with no hook
in production code. It terminates TLS with a throw-away certificate (the controller's
kubeconfig skips verification for this loopback hop) and opens TLS to the apiserver.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import yaml

WRITES = {b"POST", b"PUT", b"PATCH", b"DELETE"}
# Not counted: heartbeats that would make k mean nothing (Lease renewals, Events); dry runs
# (dryRun=All) are not writes.
UNCOUNTED = (b"/leases/", b"/events")


class WriteCountingProxy:
    def __init__(self, upstream: str, workdir: Path) -> None:
        host, _, port = upstream.removeprefix("https://").rpartition(":")
        self.upstream = (host, int(port))
        self.writes: list[str] = []
        self.on_write: Callable[[int, str], None] = lambda n, line: None
        self._lock = threading.Lock()
        cert, key = workdir / "proxy.crt", workdir / "proxy.key"
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(cert, key)
        self._client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._client_ctx.check_hostname = False
        self._client_ctx.verify_mode = ssl.CERT_NONE  # loopback to the testbed's own apiserver
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def kubeconfig(self, original: Path, out: Path) -> Path:
        cfg = yaml.safe_load(original.read_text())
        for cluster in cfg["clusters"]:
            c = cluster["cluster"]
            c.pop("certificate-authority", None)
            c.pop("certificate-authority-data", None)
            c["server"] = f"https://127.0.0.1:{self.port}"
            c["insecure-skip-tls-verify"] = True
        out.write_text(yaml.safe_dump(cfg))
        return out

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                raw, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self._server_ctx.wrap_socket(raw, server_side=True)
            upstream = self._client_ctx.wrap_socket(socket.create_connection(self.upstream))
        except OSError:
            raw.close()
            return
        threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
        try:
            self._requests(client, upstream)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()

    def _requests(self, client: ssl.SSLSocket, upstream: ssl.SSLSocket) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = client.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(buf) < length:
                chunk = client.recv(65536)
                if not chunk:
                    return
                buf += chunk
            body, buf = buf[:length], buf[length:]
            upstream.sendall(head + b"\r\n\r\n" + body)
            method, _, rest = lines[0].partition(b" ")
            if (
                method in WRITES
                and not any(u in rest for u in UNCOUNTED)
                and b"dryRun=" not in rest
            ):
                with self._lock:
                    self.writes.append(lines[0].decode(errors="replace"))
                    n = len(self.writes)
                self.on_write(n, lines[0].decode(errors="replace"))

    @staticmethod
    def _pipe(src: ssl.SSLSocket, dst: ssl.SSLSocket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        # The apiserver closed its side: close the client's too, or the client would send its
        # next request on a connection nobody answers (and wait for its read timeout).
        for s in (dst, src):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
