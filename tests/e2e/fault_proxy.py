"""A loopback TLS proxy between a controller process and the testbed's apiserver that sees every
request line, counts the writes, and calls back after the k-th one has been forwarded: so a
test can `kill -9` the controller at a chosen point inside a pass from outside, with no hook
in production code. It terminates TLS with a throw-away certificate (the controller's
kubeconfig skips verification for this loopback hop) and opens TLS to the apiserver.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import subprocess
import threading
import time
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
        self._down_until = 0.0
        self._open: set[ssl.SSLSocket] = set()
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

    def outage(self, seconds: float) -> None:
        """What a restarting apiserver looks like from the client: every open connection is
        reset, and new ones are refused until ``seconds`` have passed."""
        self._down_until = time.monotonic() + seconds
        with self._lock:
            open_now = list(self._open)
        for s in open_now:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while not self._closed:
            try:
                raw, _ = self._sock.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                raw.close()
                continue
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        """One thread per connection for both directions: an SSL object must never be used
        by two threads at once (a reader and a writer on one TLS socket can hang)."""
        try:
            client = self._server_ctx.wrap_socket(raw, server_side=True)
            upstream = self._client_ctx.wrap_socket(socket.create_connection(self.upstream))
        except OSError:
            raw.close()
            return
        with self._lock:
            self._open.update((client, upstream))
        try:
            self._relay(client, upstream)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.difference_update((client, upstream))
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()

    def _relay(self, client: ssl.SSLSocket, upstream: ssl.SSLSocket) -> None:
        # Both sockets are tried on every turn, not only those select() reports: TLS may
        # already hold a record it read with the handshake, which select() cannot see.
        for sock in (client, upstream):
            sock.setblocking(False)
        pending = b""  # bytes from the client not yet forwarded: a partial request
        while True:
            select.select([client, upstream], [], [], 0.05)
            data = _read(upstream)
            if data == b"":
                return  # the apiserver closed: close the client too
            if data:
                _send(client, data)
            data = _read(client)
            if data == b"":
                return
            if data:
                pending = self._forward(pending + data, upstream)

    def _forward(self, buf: bytes, upstream: ssl.SSLSocket) -> bytes:
        """Forward every complete request in ``buf``; return the incomplete rest."""
        while b"\r\n\r\n" in buf:
            head, _, rest = buf.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(rest) < length:
                return buf
            _send(upstream, head + b"\r\n\r\n" + rest[:length])
            buf = rest[length:]
            method, _, target = lines[0].partition(b" ")
            counted = not any(u in target for u in UNCOUNTED) and b"dryRun=" not in target
            if method in WRITES and counted:
                with self._lock:
                    self.writes.append(lines[0].decode(errors="replace"))
                    n = len(self.writes)
                self.on_write(n, lines[0].decode(errors="replace"))
        return buf


def _read(sock: ssl.SSLSocket) -> bytes | None:
    """Up to 64 KiB, b"" when the peer closed, None when nothing is there yet."""
    try:
        return sock.recv(65536)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return None


def _send(sock: ssl.SSLSocket, data: bytes) -> None:
    sock.setblocking(True)
    try:
        sock.sendall(data)
    finally:
        sock.setblocking(False)
