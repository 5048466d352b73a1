"""POST /webhook against hostile clients: lying headers, floods, replays, slow senders.

Each request goes over a real socket to the real server on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from gitops_gpu import server as server_mod
from gitops_gpu.metrics import Metrics
from gitops_gpu.server import ControllerServer, Deliveries, Probes

SECRET = b"abuse-secret"


@pytest.fixture
def hits() -> list[int]:
    return []


@pytest.fixture
def served(hits: list[int]) -> Iterator[ControllerServer]:
    srv = ControllerServer("127.0.0.1:0", Metrics(), Probes(), lambda: hits.append(1), SECRET)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _raw(srv: ControllerServer, data: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(data)
        if not read:
            return b""
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def _sig(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()


def _request(body: bytes, headers: dict[str, str]) -> bytes:
    head = "POST /webhook HTTP/1.1\r\nHost: x\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()
    )
    return head.encode() + b"\r\n" + body


def _rejected(srv: ControllerServer, reason: str) -> float:
    value = srv.metrics.registry.get_sample_value(
        "gitops_gpu_webhook_rejected_total", {"reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", " "])
def test_lying_content_length_is_refused_without_reading(
    served: ControllerServer, hits: list[int], length: str
) -> None:
    reply = _raw(served, _request(b"x" * 1000, {"Content-Length": length}))
    assert _status(reply) == 400
    assert hits == [] and _rejected(served, "malformed") == 1


def test_oversized_body_is_refused_before_it_is_read(
    served: ControllerServer, hits: list[int]
) -> None:
    big = server_mod.MAX_BODY + 1
    # Only the headers are sent: a 413 that arrives anyway proves nothing was waited for.
    reply = _raw(served, _request(b"", {"Content-Length": str(big)}))
    assert _status(reply) == 413 and hits == []


def test_chunked_body_is_capped(served: ControllerServer, hits: list[int]) -> None:
    chunk = b"a" * 65536
    one = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    count = server_mod.MAX_BODY // len(chunk) + 2
    reply = _raw(served, _request(one * count + b"0\r\n\r\n", {"Transfer-Encoding": "chunked"}))
    assert _status(reply) == 413 and hits == []


def test_a_client_that_keeps_sending_after_the_answer_is_cut_off_in_bounded_time(
    served: ControllerServer,
) -> None:
    head = _request(b"", {"Content-Length": str(100 * server_mod.MAX_BODY)})
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as s:
        s.sendall(head)
        started, reply, sent = time.monotonic(), b"", 0
        s.setblocking(False)
        while time.monotonic() - started < 10:
            try:
                sent += s.send(b"x" * 65536)  # never stops on its own
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break  # the server closed the connection
            try:
                chunk = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not chunk:
                break
            reply += chunk
        took = time.monotonic() - started
    assert _status(reply) == 413  # the answer arrived, not a reset
    assert took < server_mod.LINGER_SECONDS + 3  # and the connection did not stay open
    assert sent <= server_mod.LINGER_BYTES + 8 * (1 << 20)  # nor read without bound


def test_chunked_signed_body_is_accepted(served: ControllerServer, hits: list[int]) -> None:
    body = b'{"ref":"refs/heads/main"}'
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    reply = _raw(
        served,
        _request(chunked, {"Transfer-Encoding": "chunked", "X-Hub-Signature-256": _sig(body)}),
    )
    assert _status(reply) == 202 and hits == [1]


def test_gitea_signature_header_is_accepted(served: ControllerServer, hits: list[int]) -> None:
    body = b'{"after":"abc"}'
    hexdigest = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    headers = {"Content-Length": str(len(body)), "X-Gitea-Signature": hexdigest}
    assert _status(_raw(served, _request(body, headers))) == 202
    headers["X-Gitea-Signature"] = "0" * 64
    assert _status(_raw(served, _request(b'{"after":"abd"}', headers))) == 401
    assert hits == [1]


def test_replayed_delivery_is_ignored(served: ControllerServer, hits: list[int]) -> None:
    body = b'{"after":"1234"}'
    headers = {
        "Content-Length": str(len(body)),
        "X-Hub-Signature-256": _sig(body),
        "X-GitHub-Delivery": "d-1",
    }
    assert _status(_raw(served, _request(body, headers))) == 202
    assert _status(_raw(served, _request(body, headers))) == 200  # same id
    headers["X-GitHub-Delivery"] = "d-2"  # a captured request under a new id: same body
    assert _status(_raw(served, _request(body, headers))) == 200
    assert hits == [1] and _rejected(served, "duplicate") == 2


def test_deliveries_forget_after_the_window() -> None:
    seen = Deliveries(window=10.0, limit=3)
    assert seen.first_time(["a"], now=0.0)
    assert not seen.first_time(["a"], now=5.0)
    assert seen.first_time(["a"], now=20.0)
    for key in "bcdef":
        assert seen.first_time([key], now=21.0)
    assert len(seen._seen) <= 4  # bounded whatever arrives


def test_webhook_is_off_without_a_secret(hits: list[int]) -> None:
    srv = ControllerServer("127.0.0.1:0", Metrics(), Probes(), lambda: hits.append(1))
    srv.start()
    try:
        reply = _raw(srv, _request(b"{}", {"Content-Length": "2"}))
        assert _status(reply) == 404 and hits == []
    finally:
        srv.stop()
    lab = ControllerServer(
        "127.0.0.1:0", Metrics(), Probes(), lambda: hits.append(1), webhook_insecure=True
    )
    lab.start()
    try:
        assert _status(_raw(lab, _request(b"{}", {"Content-Length": "2"}))) == 202
        assert hits == [1]
    finally:
        lab.stop()


@pytest.fixture
def impatient(hits: list[int]) -> Iterator[ControllerServer]:
    srv = ControllerServer(
        "127.0.0.1:0", Metrics(), Probes(), lambda: hits.append(1), SECRET, read_timeout=1.0
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_half_sent_requests_do_not_starve_probes_or_webhooks(
    impatient: ControllerServer, hits: list[int]
) -> None:
    served = impatient
    # Eight clients announce 1000 bytes and send 10: they hold a connection, not a slot.
    slow = []
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", served.port), timeout=5)
        s.sendall(_request(b"x" * 10, {"Content-Length": "1000"}))
        slow.append(s)
    try:
        t = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/metrics", timeout=5) as r:
            assert r.status == 200
        assert time.monotonic() - t < 2.0
        body = b'{"after":"fresh"}'
        headers = {"Content-Length": str(len(body)), "X-Hub-Signature-256": _sig(body)}
        t = time.monotonic()
        assert _status(_raw(served, _request(body, headers))) == 202  # at once, no 503
        assert time.monotonic() - t < 2.0 and hits == [1]
        for s in slow:  # and the slow ones are cut at the deadline (1 s here)
            assert s.recv(4096).startswith(b"HTTP/1.1 408")
        assert _rejected(served, "deadline") == 8
    finally:
        for s in slow:
            s.close()


def test_a_flood_triggers_bounded_work(served: ControllerServer, hits: list[int]) -> None:
    """Unsigned posts never trigger; many valid ones arriving at once are all answered."""
    for i in range(50):
        body = f'{{"n":{i}}}'.encode()
        _raw(served, _request(body, {"Content-Length": str(len(body))}))
    assert hits == [] and _rejected(served, "signature") == 50
    errors: list[BaseException] = []

    def post(i: int) -> None:
        try:
            body = f'{{"push":{i}}}'.encode()
            sig = {"Content-Length": str(len(body)), "X-Hub-Signature-256": _sig(body)}
            assert _status(_raw(served, _request(body, sig))) in (202, 503)
        except BaseException as exc:  # collected: asserts in threads are otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors and 1 <= len(hits) <= 16
