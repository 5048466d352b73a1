"""The controller's HTTP endpoint on loopback by default: /metrics, /healthz, /readyz,
POST /webhook (a push to the fleet repo triggers a pass now instead of at the next poll) and,
with ``--ui``, the read-only web view at /ui/ (its live updates at /ui/events; gitops_gpu/ui).

The port may be reachable by anyone, so /webhook is guarded:
- it is off unless a secret is configured (or ``insecure`` is asked for, in a lab);
- the signature is checked as GitHub (X-Hub-Signature-256), Gitea (X-Gitea-Signature) or GitLab
  (X-Gitlab-Token) send it;
- the body is read up to MAX_BODY whatever the headers claim (negative, non-numeric or absent
  Content-Length, chunked);
- a delivery seen in the last DEDUP_WINDOW seconds (same delivery id, or the same signed body
  replayed) is acknowledged and ignored;
- triggers coalesce in the controller: at most one pass is queued whatever arrives.

Slow and many peers cost bounded memory and no threads: one asyncio loop in one thread serves
every connection (plus one worker that renders /metrics), with these limits (constructor
keywords; controller flags in brackets):
- ``request_deadline`` REQUEST_DEADLINE = 10 s [--webhook-request-deadline]: the whole request
  (request line, headers and body) must arrive within it, counted from the accept (or from the
  first byte of a keep-alive request), however steadily the bytes trickle; past it the peer gets
  408 and is dropped (webhook_rejected reason "deadline");
- ``max_connections`` MAX_CONNECTIONS = 256 [--webhook-max-connections] open connections in all,
  and ``max_per_source`` MAX_PER_SOURCE = 32 [--webhook-max-per-source] from one IP address: past
  them a new connection gets a short 503 at accept, before anything of it is read (reasons
  "connections", "per_source"). When the server is full, a connection that has sat on an
  unfinished request for EVICT_AFTER = 1 s (or idles between keep-alive requests) is dropped to
  make room first (reason "evicted"), so slow peers cannot hold every slot against a quick,
  valid delivery;
- ``idle_timeout`` IDLE_TIMEOUT = 5 s: a keep-alive connection idle that long is closed;
- ``body_budget`` BODY_BUDGET = 32 MiB of request bodies buffered at once, all connections
  together (each at most MAX_BODY); past it the stalest partial bodies are dropped first, then
  the request gets 503 (reason "busy").
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import hashlib
import hmac
import http
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gitops_gpu import osthread
from gitops_gpu.metrics import Metrics

if TYPE_CHECKING:
    from gitops_gpu.ui.app import WebView

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20
MAX_LINE = 16 << 10  # one request or header line; also the reader's buffer size (x2)
MAX_HEAD = 64 << 10  # request line and headers together
MAX_HEADERS = 100
REQUEST_DEADLINE = 10.0
READ_TIMEOUT = REQUEST_DEADLINE  # the old name (a per-read timeout then); now the same deadline
IDLE_TIMEOUT = 5.0
MAX_CONNECTIONS = 256
MAX_PER_SOURCE = 32
BODY_BUDGET = 32 << 20
EVICT_AFTER = 1.0
BACKLOG = 1024  # bursts wait in the kernel's queue instead of SYN retries seconds later
# After an early answer (413, 400, 404, 503) the rest of the body is read and dropped for at
# most this long and this much, so the client sees the answer instead of a connection reset.
LINGER_SECONDS, LINGER_BYTES = 2.0, 4 << 20
MAX_STREAMS = 32  # /ui/events streams open at once (each holds a connection slot)
STREAM_PING = 15.0
DEDUP_WINDOW = 600.0
DEDUP_MAX = 4096
DELIVERY_HEADERS = (
    "x-github-delivery",
    "x-gitea-delivery",
    "x-gogs-delivery",
    "x-gitlab-event-uuid",
    "x-gitlab-webhook-uuid",
)
_HEX = re.compile(rb"[0-9a-fA-F]{1,15}")
# Connection phases. Only a connection waiting on its peer may be evicted to make room.
_READING, _IDLE, _ANSWERING, _LINGER = "reading", "idle", "answering", "linger"
_EVICTABLE = (_READING, _IDLE, _LINGER)


class BadRequestError(Exception):
    """Answer ``code`` and close; ``reason`` (if any) is counted in webhook_rejected."""

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason


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


def _response(code: int, body: bytes, ctype: str = "text/plain", *, close: bool) -> bytes:
    head = (
        f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}\r\n"
        f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode("latin-1") + body


_BUSY = _response(503, b"busy", close=True)


class _Request:
    __slots__ = ("body", "headers", "keep", "linger", "method", "path", "target")

    def __init__(self, method: str, target: str, headers: dict[str, str], keep: bool) -> None:
        self.method, self.target, self.headers, self.keep = method, target, headers, keep
        self.path = target.partition("?")[0]
        self.body, self.linger = b"", False


class _Conn:
    """One accepted connection: where it stands, and what it holds of the body budget."""

    __slots__ = ("buffered", "phase", "since", "source", "task", "transport")

    def __init__(
        self, source: str, task: asyncio.Task[Any], transport: asyncio.WriteTransport, now: float
    ) -> None:
        self.source, self.task, self.transport = source, task, transport
        self.phase, self.since, self.buffered = _READING, now, 0


class _Listener:
    """The bound socket, with ``server_address`` as the ThreadingHTTPServer had it."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self.server_address: Any = sock.getsockname()


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
        read_timeout: float | None = None,
        request_deadline: float = REQUEST_DEADLINE,
        idle_timeout: float = IDLE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_per_source: int = MAX_PER_SOURCE,
        body_budget: int = BODY_BUDGET,
        evict_after: float = EVICT_AFTER,
        ui: WebView | None = None,
    ) -> None:
        host, _, port = addr.rpartition(":")
        self.metrics, self.probes = metrics, probes
        self.on_webhook, self.secret = on_webhook, webhook_secret
        self.webhook_enabled = webhook_secret is not None or webhook_insecure
        self.webhooks = 0
        self.deliveries = Deliveries()
        # read_timeout is the old keyword: callers that set it meant "give up on slow clients".
        self.request_deadline = request_deadline if read_timeout is None else read_timeout
        self.idle_timeout, self.evict_after = idle_timeout, evict_after
        self.max_connections, self.max_per_source = max_connections, max_per_source
        self.body_budget = body_budget
        self.ui = ui  # --ui: GET /ui/... pages and /ui/events, else 404
        self._streams = 0
        self._passed: asyncio.Event | None = None  # set (and replaced) when a pass publishes
        if not self.webhook_enabled:
            log.info(
                "POST /webhook is off: give it a secret (--webhook-secret-file) to enable it, "
                "or --webhook-insecure in a lab"
            )
        host = (host or "127.0.0.1").strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Bound here, not in start(): the port is known at once and early peers wait queued.
        sock = socket.create_server((host, int(port)), family=family, backlog=BACKLOG)
        self.httpd = _Listener(sock)
        self._conns: set[_Conn] = set()  # these three: on the loop thread only
        self._per_source: collections.Counter[str] = collections.Counter()
        self._buffered = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._render: asyncio.Future[bytes] | None = None
        self._renderer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="metrics")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def connections(self) -> int:
        """Connections open now (for tests and debugging)."""
        return len(self._conns)

    def start(self) -> ControllerServer:
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            raise self._failed
        return self

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stopping.set)
            self._thread.join(10)
        self.httpd.socket.close()
        self._renderer.shutdown(wait=False, cancel_futures=True)

    # -- the loop thread -------------------------------------------------------------------------
    def _run(self) -> None:
        osthread.name_current()
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start() when it failed to come up
            self._failed = exc
            log.exception("http server failed")
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        if self.ui is not None:
            self._passed = asyncio.Event()
            loop = self._loop

            def announce(_seq: int) -> None:  # from the pass's thread
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(self._announce)

            self.ui.listen(announce)
        server = await asyncio.start_server(
            self._client, sock=self.httpd.socket, limit=MAX_LINE, backlog=BACKLOG
        )
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _rejected(self, reason: str, *, quiet: bool = False) -> None:
        self.metrics.webhook_rejected.labels(reason).inc()
        # A flood of refused connections must not become a flood of log lines.
        (log.debug if quiet else log.info)("webhook request rejected: %s", reason)

    def _admit(self, source: str) -> str | None:
        """Why a new connection from ``source`` is refused, or None to serve it."""
        if self._per_source[source] >= self.max_per_source:
            return "per_source"
        if len(self._conns) >= self.max_connections and not self._evict_stalest():
            return "connections"
        return None

    def _evict_stalest(self, holding_besides: _Conn | None = None) -> bool:
        """Drop the connection that has waited longest on its peer (at least evict_after);
        with ``holding_besides``, only another one holding body bytes. False if none does."""
        now = asyncio.get_running_loop().time()
        stale = [
            c
            for c in self._conns
            if c.phase in _EVICTABLE
            and now - c.since >= self.evict_after
            and (holding_besides is None or (c.buffered and c is not holding_besides))
        ]
        if not stale:
            return False
        conn = min(stale, key=lambda c: c.since)
        self._forget(conn)
        if conn.phase == _READING:  # mid-request: tell it (best effort), and count it
            self._rejected("evicted", quiet=True)
            conn.transport.write(_BUSY)
        conn.transport.abort()
        conn.task.cancel()
        return True

    def _forget(self, conn: _Conn) -> None:
        if conn in self._conns:  # once: an evicted connection's task forgets it again
            self._conns.remove(conn)
            self._per_source[conn.source] -= 1
            if self._per_source[conn.source] <= 0:
                del self._per_source[conn.source]
            self._release(conn)

    def _release(self, conn: _Conn) -> None:
        self._buffered -= conn.buffered
        conn.buffered = 0

    def _take(self, conn: _Conn, n: int) -> None:
        """Count ``n`` more body bytes buffered for ``conn``, within the shared budget."""
        while self._buffered + n > self.body_budget and self._evict_stalest(conn):
            pass
        if self._buffered + n > self.body_budget:
            raise BadRequestError(503, "busy", "busy")
        self._buffered += n
        conn.buffered += n

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        transport = writer.transport
        try:
            peer = writer.get_extra_info("peername")
            source = str(peer[0]) if peer else "?"
            refused = self._admit(source)
            if refused is not None:
                self._rejected(refused, quiet=True)
                transport.write(_BUSY)  # sent now, before anything of the request is read
                return
            conn = _Conn(source, task, transport, asyncio.get_running_loop().time())
            self._conns.add(conn)
            self._per_source[source] += 1
            try:
                await self._serve(conn, reader, writer)
            finally:
                self._forget(conn)
        except asyncio.CancelledError:
            pass  # evicted, or the server stops
        except OSError:
            pass  # the peer went away, or would not read its answer in time
        except Exception:
            log.exception("http connection failed")
        finally:
            transport.abort()  # whatever was answered is in the kernel's send buffer already
            self._tasks.discard(task)

    async def _serve(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = conn.since + self.request_deadline  # the first request: from the accept
        first = b""
        while True:
            conn.phase, conn.since = _READING, loop.time()
            try:
                async with asyncio.timeout_at(deadline):
                    req = await self._read_request(conn, reader, writer, first)
            except TimeoutError:
                self._rejected("deadline", quiet=True)
                writer.write(_response(408, b"request took too long", close=True))
                return
            except BadRequestError as exc:
                if exc.reason:
                    self._rejected(exc.reason)
                await self._send(writer, _response(exc.code, str(exc).encode(), close=True))
                await self._linger(conn, reader, writer)
                return
            if req is None:
                return  # the peer closed
            conn.phase = _ANSWERING
            await self._answer(req, writer)
            self._release(conn)
            if req.linger:
                await self._linger(conn, reader, writer)
                return
            if not req.keep:
                return
            conn.phase, conn.since = _IDLE, loop.time()
            try:
                async with asyncio.timeout(self.idle_timeout):
                    first = await reader.readexactly(1)
            except (TimeoutError, asyncio.IncompleteReadError):
                return
            deadline = loop.time() + self.request_deadline  # a keep-alive request: its 1st byte

    async def _line(self, reader: asyncio.StreamReader, what: str) -> bytes:
        try:
            return await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            if what == "header":
                raise BadRequestError(431, "header too long", "too_large") from None
            raise BadRequestError(400, f"{what} too long", "malformed") from None

    async def _read_request(
        self,
        conn: _Conn,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        first: bytes,
    ) -> _Request | None:
        """The next request, its body read if it is a webhook delivery; None if the peer
        closed before sending one."""
        lines: list[bytes] = []
        size = 0
        try:
            while True:
                line = first + await self._line(reader, "header")
                first = b""
                size += len(line)
                if size > MAX_HEAD or len(lines) > MAX_HEADERS:
                    raise BadRequestError(431, "headers too large", "too_large")
                if line.strip(b"\r\n"):
                    lines.append(line)
                elif lines:
                    break  # empty lines before the request line are ignored (RFC 9112 2.2)
        except asyncio.IncompleteReadError:
            return None
        req = _parse_head(lines)
        if req.method == "GET":
            # A body nobody reads would be taken for the next request: answer, then close.
            req.linger = req.headers.get("content-length", "0") != "0" or (
                "transfer-encoding" in req.headers
            )
            return req
        if req.method != "POST":
            raise BadRequestError(501, "unsupported method")
        if req.path != "/webhook" or not self.webhook_enabled:
            raise BadRequestError(404, "not found")
        coding = req.headers.get("transfer-encoding")
        chunked = coding is not None and coding.lower().rsplit(",", 1)[-1].strip() == "chunked"
        if coding is not None and not chunked:
            raise BadRequestError(400, "unsupported Transfer-Encoding", "malformed")  # RFC 9112
        length = 0
        if not chunked and "content-length" in req.headers:
            raw = req.headers["content-length"]
            if not raw.isdigit():
                raise BadRequestError(400, "bad Content-Length", "malformed")
            length = int(raw)
            if length > MAX_BODY:
                raise BadRequestError(413, "too large", "too_large")
        if req.headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = bytearray()
        try:
            if chunked:
                await self._read_chunked(conn, reader, body)
            else:
                await self._read_exactly(conn, reader, length, body)
        except asyncio.IncompleteReadError:
            return None  # the peer closed mid-body: nobody to answer
        req.body = bytes(body)
        return req

    async def _read_exactly(
        self, conn: _Conn, reader: asyncio.StreamReader, n: int, body: bytearray
    ) -> None:
        while n > 0:
            data = await reader.read(min(n, MAX_LINE))
            if not data:
                raise asyncio.IncompleteReadError(bytes(body), None)
            self._take(conn, len(data))
            body += data
            n -= len(data)

    async def _read_chunked(
        self, conn: _Conn, reader: asyncio.StreamReader, body: bytearray
    ) -> None:
        while True:
            line = (await self._line(reader, "chunk size")).split(b";", 1)[0].strip()
            if not _HEX.fullmatch(line):
                raise BadRequestError(400, "malformed chunk", "malformed")
            size = int(line, 16)
            if len(body) + size > MAX_BODY:
                raise BadRequestError(413, "too large", "too_large")
            if size == 0:
                break
            await self._read_exactly(conn, reader, size, body)
            if (await self._line(reader, "chunk")).strip(b"\r\n"):
                raise BadRequestError(400, "malformed chunk", "malformed")
        for _ in range(MAX_HEADERS):  # trailers, ignored, up to the empty line
            if not (await self._line(reader, "trailer")).strip(b"\r\n"):
                return
        raise BadRequestError(400, "too many trailers", "malformed")

    async def _answer(self, req: _Request, writer: asyncio.StreamWriter) -> None:
        code, body, ctype = 404, b"not found", "text/plain"
        if req.method == "POST":
            code, body = self._webhook(req)
        elif self.ui is not None and req.path == "/ui/events":
            req.keep = False  # the stream ends with the connection
            await self._events(writer)
            return
        elif self.ui is not None and (req.path == "/ui" or req.path.startswith("/ui/")):
            fragment = req.headers.get("x-ui-fragment") == "1"
            code, body, ctype = await self._page(req.target, fragment)
        elif req.path == "/metrics":
            code, body, ctype = 200, await self._metrics_text(), CONTENT_TYPE_LATEST
        elif req.path == "/healthz":
            ok = self.probes.alive
            code, body = (200, b"ok") if ok else (500, b"loop stalled")
        elif req.path == "/readyz":
            ok = self.probes.ready
            code, body = (200, b"ok") if ok else (503, b"not ready")
        await self._send(writer, _response(code, body, ctype, close=not req.keep or req.linger))

    def _webhook(self, req: _Request) -> tuple[int, bytes]:
        headers, body = req.headers, req.body
        if self.secret is not None and not _signature_ok(self.secret, body, headers):
            self._rejected("signature")
            return 401, b"bad signature"
        keys = [f"body:{hashlib.sha256(body).hexdigest()}"]
        keys += [f"id:{headers[h]}" for h in DELIVERY_HEADERS if headers.get(h)]
        if not self.deliveries.first_time(keys):
            self._rejected("duplicate")
            return 200, b"duplicate delivery, ignored"
        self.webhooks += 1
        self.on_webhook()  # sets an event: never blocks the loop
        return 202, b"queued"

    async def _metrics_text(self) -> bytes:
        """generate_latest off the loop, one render at a time: scrapes arriving together share
        it, so a scrape flood costs neither threads nor a stalled loop."""
        if self._render is None or self._render.done():
            loop = asyncio.get_running_loop()
            self._render = loop.run_in_executor(
                self._renderer, generate_latest, self.metrics.registry
            )
        return await asyncio.shield(self._render)

    async def _page(self, target: str, fragment: bool) -> tuple[int, bytes, str]:
        """Rendered off the loop (a 5,000-node stage is milliseconds, not nothing), on the
        /metrics worker: pages and scrapes queue behind one another, never on the loop."""
        assert self.ui is not None
        ui = self.ui
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._renderer, ui.page, target, fragment)

    def _announce(self) -> None:
        if self._passed is not None:
            self._passed.set()
            self._passed = asyncio.Event()

    async def _events(self, writer: asyncio.StreamWriter) -> None:
        """Server-sent events: ``pass`` after each pass (``WebView.event``: its number and
        version), a comment every STREAM_PING seconds so proxies keep the stream open; at most
        MAX_STREAMS at once."""
        assert self.ui is not None
        if self._streams >= MAX_STREAMS:
            await self._send(writer, _response(503, b"too many event streams", close=True))
            return
        self._streams += 1
        try:
            await self._send(
                writer,
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Cache-Control: no-store\r\nConnection: close\r\n\r\nretry: 2000\n\n",
            )
            while True:
                passed = self._passed
                assert passed is not None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STREAM_PING):
                        await passed.wait()
                data = self.ui.event()
                if passed.is_set() and data is not None:
                    await self._send(writer, f"event: pass\ndata: {data}\n\n".encode())
                else:
                    await self._send(writer, b": ping\n\n")
        finally:
            self._streams -= 1

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        async with asyncio.timeout(self.request_deadline):  # a peer that never reads is dropped
            await writer.drain()

    async def _linger(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Stop writing, then drop what the client still sends, bounded: closing a socket with
        unread input resets it, and the reset can destroy the answer."""
        conn.phase, conn.since = _LINGER, asyncio.get_running_loop().time()
        self._release(conn)
        try:
            async with asyncio.timeout(LINGER_SECONDS):
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                left = LINGER_BYTES
                while left > 0:
                    data = await reader.read(min(1 << 16, left))
                    if not data:
                        break
                    left -= len(data)
        except (TimeoutError, OSError):
            pass  # the client went away or was slow: nothing more to do for it


def _parse_head(lines: list[bytes]) -> _Request:
    parts = lines[0].decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequestError(400, "bad request line", "malformed")
    method, target, version = parts
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequestError(400, "bad header", "malformed")  # incl. obsolete line folding
        name, value = name.lower(), value.strip()
        if name in ("content-length", "transfer-encoding") and name in headers:
            raise BadRequestError(400, f"repeated {name}", "malformed")  # request smuggling
        headers[name] = value
    tokens = {t.strip() for t in headers.get("connection", "").lower().split(",")}
    keep = version == "HTTP/1.1" and "close" not in tokens  # HTTP/1.0: one request
    return _Request(method, target, headers, keep)
