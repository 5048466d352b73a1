"""Delivers transitions to one webhook from a thread of its own, so a slow or dead receiver
never holds a pass.

- Deduplicated: each (commit, context, state, phase) is sent once per process; the machine
  writes a phase once, so a restarted controller does not repeat what it announced before.
- Rate-limited: a token bucket (``per_minute``, bursts of ``burst``). Transitions the bucket
  holds back go out together, as one digest message, when the next token comes: nothing is
  dropped while the queue has room (``MAX_QUEUE``).
- Retried: connection errors, 429 (its Retry-After) and 5xx, a few times with backoff; any
  other answer, and the last failure, are logged and counted, and the message is given up
  (delivery is at most once: a receiver that was down misses what it missed).
- The URL is a secret (Slack's carries its token): read from a file, never logged past its
  origin. An optional HMAC key signs the body (``X-Gitops-Gpu-Signature-256: sha256=<hex>``).
- No redirect is followed, every request has a total deadline and a capped answer.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from gitops_gpu import boundedhttp, osthread
from gitops_gpu.metrics import Metrics
from gitops_gpu.notify import FORMATS, messages
from gitops_gpu.notify.transitions import Transition, of_pass
from gitops_gpu.rollout.httpclient import Retry
from gitops_gpu.ui.facts import PassFacts

log = logging.getLogger(__name__)
MAX_QUEUE = 1000
MAX_REMEMBERED = 4096  # keys of sent transitions: far more than a history window holds
DEADLINE_S = 15.0
SIGNATURE_HEADER = "X-Gitops-Gpu-Signature-256"


def origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


class Notifier:
    def __init__(
        self,
        url: str,
        fmt: str = "slack",
        *,
        key: bytes | None = None,
        link: str = "",
        per_minute: float = 12.0,
        burst: int = 5,
        retry: Retry | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        timeout: float = 10.0,
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown notification format {fmt!r}")
        self.url, self.fmt, self.link = url, fmt, link
        self.origin = origin(url)
        self._key = key
        self._rate = per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._filled = clock()
        self._clock = clock
        self._retry = retry or Retry(attempts=3, base_delay=1.0, max_delay=30.0)
        self._timeout = timeout
        self.metrics = metrics or Metrics()
        self._sent: OrderedDict[tuple[str, str, str, str], None] = OrderedDict()
        self._queue: deque[Transition] = deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._sleep = sleep or self._wait
        self._opener = boundedhttp.opener()
        self._thread: threading.Thread | None = None

    # -- the pass's side: cheap, never blocks -------------------------------------------------
    def publish(self, facts: PassFacts) -> None:
        if not facts.written:
            return
        self.offer(of_pass(facts))

    def offer(self, transitions: Sequence[Transition]) -> None:
        with self._cond:
            for t in transitions:
                if t.key in self._sent:
                    self.metrics.notifications.labels("duplicate").inc()
                    continue
                self._sent[t.key] = None
                while len(self._sent) > MAX_REMEMBERED:
                    self._sent.popitem(last=False)
                if len(self._queue) >= MAX_QUEUE:
                    self._queue.popleft()
                    self.metrics.notifications.labels("dropped").inc()
                self._queue.append(t)
            self._cond.notify()

    # -- the sender thread --------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _wait(self, seconds: float) -> None:
        with self._cond:
            if not self._stopped:
                self._cond.wait(seconds)

    def _run(self) -> None:
        osthread.name_current()
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
            try:
                self.deliver_once()
            except Exception:  # a bug must cost a message, never the sender
                self.metrics.notifications.labels("failed").inc()
                log.exception("notification to %s failed unexpectedly", self.origin)

    def deliver_once(self) -> int:
        """Send what the bucket allows now (each alone, or all as one digest when more wait
        than tokens are left), or wait for the next token; the messages sent."""
        self._refill()
        if self._tokens < 1.0:
            self._sleep((1.0 - self._tokens) / self._rate)
            return 0
        with self._cond:
            batch = list(self._queue)
            self._queue.clear()
        if not batch:
            return 0
        if len(batch) <= self._tokens:
            for t in batch:
                self._tokens -= 1.0
                self._send([t], "sent")
            return len(batch)
        self._tokens -= 1.0
        self._send(batch, "digest")
        return 1

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._filled) * self._rate)
        self._filled = now

    def _send(self, batch: Sequence[Transition], result: str) -> None:
        body = json.dumps(messages.render(self.fmt, batch, self.link)).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "gitops-gpu"}
        if self._key is not None:
            digest = hmac.new(self._key, body, hashlib.sha256).hexdigest()
            headers[SIGNATURE_HEADER] = f"sha256={digest}"
        problem = ""
        for attempt in range(1, self._retry.attempts + 1):
            retry_after: str | None = None
            try:
                status, retry_after = self._post(body, headers)
                if status < 300:
                    self.metrics.notifications.labels(result).inc()
                    return
                problem = f"HTTP {status} {http.client.responses.get(status, '')}".strip()
                if status != 429 and not 500 <= status < 600:
                    break  # the receiver refuses it: sending again would not change that
            except (OSError, http.client.HTTPException) as exc:
                problem = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                problem = problem.replace(self.url, self.origin)
            if attempt < self._retry.attempts:
                self._sleep(self._retry.delay(attempt, retry_after))
        self.metrics.notifications.labels("failed").inc()
        log.warning(
            "notification to %s given up (%d transitions): %s", self.origin, len(batch), problem
        )

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, str | None]:
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        what = f"notification to {self.origin}"
        with boundedhttp.deadline(DEADLINE_S) as dl:
            try:
                reply = boundedhttp.open_request(self._opener, request, self._timeout, dl, what)
            except urllib.error.HTTPError as exc:
                with exc:
                    boundedhttp.read_capped(exc, 2000, dl, what, truncate=True)
                    return exc.code, exc.headers.get("Retry-After") if exc.headers else None
            with reply:
                boundedhttp.read_capped(reply, 64 * 1024, dl, what, truncate=True)
                return reply.status, None
