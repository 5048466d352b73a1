"""The controller's HTTP endpoint against slow and many peers: trickling senders, slowloris,
connection floods from one address and from many.

Real sockets on 127.0.0.1. Linux loopback answers for all of 127.0.0.0/8, so a client socket
bound to 127.0.0.N before it connects is another source address to the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from gitops_gpu.metrics import Metrics
from gitops_gpu.server import ControllerServer, Probes

SECRET = b"slow-peers-secret"
SLOW_HEAD = b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx"
SLOWLORIS_HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"


def _server(hits: list[int], **limits: float) -> ControllerServer:
    probes = Probes()
    probes.beat()
    srv = ControllerServer(
        "127.0.0.1:0", Metrics(), probes, lambda: hits.append(1), SECRET, **limits
    )
    return srv.start()


@pytest.fixture
def hits() -> list[int]:
    return []


@pytest.fixture
def served(hits: list[int]) -> Iterator[ControllerServer]:
    srv = _server(hits)
    try:
        yield srv
    finally:
        srv.stop()


def _rejected(srv: ControllerServer, reason: str) -> float:
    value = srv.metrics.registry.get_sample_value(
        "gitops_gpu_webhook_rejected_total", {"reason": reason}
    )
    return value or 0.0


def _connect(srv: ControllerServer, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", srv.port))
    return s


def _exchange(srv: ControllerServer, data: bytes, source: str = "127.0.0.1") -> bytes:
    with _connect(srv, source) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply else 0


def _delivery(srv: ControllerServer, n: int, source: str = "127.0.0.1") -> tuple[int, float]:
    """A validly signed push: its status and how long it took to be answered."""
    body = f'{{"after":"{n:040x}"}}'.encode()
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    head = (
        f"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        f"X-Hub-Signature-256: {sig}\r\nX-GitHub-Delivery: d-{n}\r\n\r\n"
    )
    started = time.monotonic()
    status = _status(_exchange(srv, head.encode() + body, source))
    return status, time.monotonic() - started


def _get(srv: ControllerServer, path: str) -> tuple[int, float]:
    started = time.monotonic()
    reply = _exchange(srv, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return _status(reply), time.monotonic() - started


def _refused(s: socket.socket) -> bool:
    """The server turned this connection away: a 503 and a close, or a reset."""
    try:
        data = s.recv(4096)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return data == b"" or data.startswith(b"HTTP/1.1 503")


def _open(s: socket.socket) -> bool:
    """The server has neither answered nor closed this connection."""
    s.setblocking(False)
    try:
        s.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.settimeout(5)
    return False


def _wait_for(what: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class Trickle:
    """Sends one byte to each socket every ``period`` seconds, from one thread."""

    def __init__(self, socks: list[socket.socket], period: float) -> None:
        self.socks, self.period = socks, period
        self.cut: set[socket.socket] = set()  # sends that failed: the server closed them
        self.rounds = 0
        self._stop = threading.Event()
        self._round = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Trickle:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self.socks:
            s.close()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            for s in list(self.socks):
                if s in self.cut:
                    continue
                try:
                    s.send(b"a")
                except OSError:
                    self.cut.add(s)
            with self._round:
                self.rounds += 1
                self._round.notify_all()

    def wait_rounds(self, n: int, timeout: float = 15.0) -> None:
        """Until ``n`` more full rounds were sent."""
        with self._round:
            goal = self.rounds + n
            assert self._round.wait_for(lambda: self.rounds >= goal, timeout)


def _sources(count: int, first: int = 2) -> list[str]:
    return [f"127.0.0.{first + i}" for i in range(count)]


@pytest.mark.parametrize("slow", [4, 40])
def test_slow_senders_do_not_delay_valid_deliveries_or_probes(
    served: ControllerServer, hits: list[int], slow: int
) -> None:
    # Each announces a 1000-byte body and sends it a byte every 3 s: under the old design four
    # of them held every body slot and valid deliveries got 503 until they finished.
    socks = []
    for i in range(slow):
        s = _connect(served, _sources(8)[i % 8])
        s.sendall(SLOW_HEAD)
        socks.append(s)
    with Trickle(socks, period=3.0):
        status, took = _delivery(served, 1)
        assert status == 202 and took < 2.0 and hits == [1]
        for path in ("/healthz", "/readyz", "/metrics"):
            code, took = _get(served, path)
            assert code == 200 and took < 2.0, path
        assert all(_open(s) for s in socks)  # still held: nothing had to give way
    for reason in ("deadline", "connections", "per_source", "busy", "evicted"):
        assert _rejected(served, reason) == 0, reason


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_steady_trickle_is_cut_at_the_total_deadline(hits: list[int], part: str) -> None:
    srv = _server(hits, request_deadline=1.5)
    try:
        # A byte every 0.3 s: a per-read timeout would never fire.
        head = SLOW_HEAD if part == "body" else b"POST /webhook HTTP/1.1\r\nX-Pad: "
        with _connect(srv) as s:
            started = time.monotonic()
            s.sendall(head)
            s.settimeout(0.3)
            reply = None
            while reply is None and time.monotonic() - started < 10:
                try:
                    s.send(b"a")
                    reply = s.recv(4096)  # the 0.3 s wait between bytes
                except TimeoutError:
                    continue
                except OSError:
                    reply = b""  # reset: cut without an answer reaching us
            took = time.monotonic() - started
        assert reply is not None, "never cut"
        assert reply == b"" or reply.startswith(b"HTTP/1.1 408")
        assert 1.5 <= took < 4.0
        assert _rejected(srv, "deadline") == 1 and hits == []
    finally:
        srv.stop()


def test_one_source_is_capped_early_while_others_are_served(
    served: ControllerServer, hits: list[int]
) -> None:
    cap = served.max_per_source
    held = []
    try:
        for _ in range(cap):
            s = _connect(served, "127.0.0.2")
            s.sendall(SLOWLORIS_HEAD)
            held.append(s)
        with _connect(served, "127.0.0.2") as extra:
            assert _refused(extra)  # on accept: it sent nothing, it was read nothing
        assert _rejected(served, "per_source") == 1
        status, took = _delivery(served, 2)
        assert status == 202 and took < 2.0 and hits == [1]
        assert all(_open(s) for s in held)
        assert _rejected(served, "connections") == 0
    finally:
        for s in held:
            s.close()


def test_the_overall_cap_refuses_early_without_threads_and_recovers(hits: list[int]) -> None:
    # Eviction is put off here so that the cap itself shows (see the slowloris test for it).
    srv = _server(hits, max_connections=40, max_per_source=8, evict_after=60.0)
    threads = threading.active_count()
    socks: list[socket.socket] = []
    try:
        for source in _sources(12):
            for _ in range(5):
                s = _connect(srv, source)
                s.sendall(SLOWLORIS_HEAD)
                socks.append(s)
        held, excess = socks[:40], socks[40:]
        assert all(_refused(s) for s in excess)
        assert all(_open(s) for s in held)
        assert _rejected(srv, "connections") == 20 and _rejected(srv, "per_source") == 0
        assert srv.connections == 40
        assert threading.active_count() <= threads  # connections cost no threads
        with _connect(srv) as late:
            assert _refused(late)  # full, and nobody stale enough to give way
        for s in socks:
            s.close()
        _wait_for(lambda: srv.connections == 0)
        status, took = _delivery(srv, 4)
        assert status == 202 and took < 2.0 and hits == [1]
    finally:
        for s in socks:
            s.close()
        srv.stop()


def test_400_slowloris_connections_do_not_stop_a_valid_delivery(hits: list[int]) -> None:
    # Default caps; a long deadline so that only the caps and eviction are at work here.
    srv = _server(hits, request_deadline=60.0)
    threads = threading.active_count()
    socks = []
    for i in range(400):  # 20 sources x 20: none reaches the per-source cap
        s = _connect(srv, _sources(20)[i % 20])
        with contextlib.suppress(OSError):  # refused already
            s.sendall(SLOWLORIS_HEAD)
        socks.append(s)
    with Trickle(socks, period=0.5) as trickle:
        over = 400 - srv.max_connections
        _wait_for(lambda: _rejected(srv, "connections") + _rejected(srv, "evicted") >= over)
        assert srv.connections == srv.max_connections
        trickle.wait_rounds(3)  # every held one has now stalled past evict_after
        status, took = _delivery(srv, 5)
        assert status == 202 and took < 2.0 and hits == [1]
        assert _rejected(srv, "evicted") >= 1  # the stalest slowloris made room
        for path in ("/healthz", "/readyz", "/metrics"):
            code, took = _get(srv, path)
            assert code == 200 and took < 2.0, path
        assert srv.connections <= srv.max_connections
        # 400 connections, and only the Trickle thread and the /metrics renderer more.
        assert threading.active_count() <= threads + 2
    srv.stop()


def test_a_stale_partial_body_gives_way_to_a_valid_delivery(hits: list[int]) -> None:
    srv = _server(hits, body_budget=64 << 10, evict_after=0.0)
    try:
        with _connect(srv, "127.0.0.2") as hog:
            # 60 KiB of a 100 KiB body, then nothing: it holds most of the budget.
            hog.sendall(b"POST /webhook HTTP/1.1\r\nContent-Length: 102400\r\n\r\n")
            hog.sendall(b"x" * (60 << 10))
            _wait_for(lambda: srv._buffered >= 60 << 10)
            with _connect(srv) as s:  # 20 KiB more would pass the budget
                body = b'{"pad":"' + b"p" * (20 << 10) + b'"}'
                sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
                s.sendall(
                    b"POST /webhook HTTP/1.1\r\nContent-Length: %d\r\n" % len(body)
                    + f"X-Hub-Signature-256: {sig}\r\n\r\n".encode()
                    + body
                )
                assert _status(s.recv(4096)) == 202
            assert _refused(hog)
        assert _rejected(srv, "evicted") == 1 and hits == [1]
    finally:
        srv.stop()
