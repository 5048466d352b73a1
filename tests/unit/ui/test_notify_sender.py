"""The notifier against a real HTTP receiver on loopback: one message per transition, signed,
deduplicated, rate-limited into digests, retried where retrying can help, and never logging
the URL's secret part."""

from __future__ import annotations

import hashlib
import hmac
import logging
import socket
from collections.abc import Iterator

import pytest

from gitops_gpu.metrics import Metrics
from gitops_gpu.notify import sender
from gitops_gpu.notify.sender import SIGNATURE_HEADER, Notifier
from gitops_gpu.notify.transitions import Transition
from gitops_gpu.rollout.httpclient import Retry
from gitops_gpu.rollout.status import stage_context
from gitops_gpu_dev.testbed.webhook_receiver import Receiver

TOKEN = "T000/B000/s3cr3t-token"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(f"/services/{TOKEN}") as rx:
        yield rx


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _t(stage: str = "canary", state: str = "success", commit: str = "c" * 40) -> Transition:
    return Transition(
        commit=commit,
        subject="bump the driver",
        context=stage_context(stage),
        stage=stage,
        cluster=None,
        state=state,
        phase="",
        previous_state="pending",
        previous_phase="soaking",
        description=f"{stage}: 4/4 healthy",
        at=1_800_000_000.0,
    )


def _count(n: Notifier, result: str) -> float:
    value = n.metrics.registry.get_sample_value(
        "gitops_gpu_notifications_total", {"result": result}
    )
    return value or 0.0


def _notifier(url: str, clock: Clock, **kw: object) -> Notifier:
    return Notifier(url, clock=clock, sleep=clock.sleep, metrics=Metrics(), **kw)  # type: ignore[arg-type]


def test_each_transition_is_one_signed_message_the_receiver_can_verify(
    receiver: Receiver,
) -> None:
    key = b"a shared key"
    n = _notifier(receiver.url, Clock(), fmt="json", key=key)
    n.offer([_t("canary"), _t("inference")])
    assert n.deliver_once() == 2
    assert [b["transitions"][0]["stage"] for b in receiver.bodies()] == ["canary", "inference"]
    for path, headers, body in receiver.got:
        assert path == f"/services/{TOKEN}"
        assert headers["Content-Type"] == "application/json"
        want = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers[SIGNATURE_HEADER], want)
    assert _count(n, "sent") == 2


def test_without_a_key_nothing_is_signed(receiver: Receiver) -> None:
    n = _notifier(receiver.url, Clock())
    n.offer([_t()])
    n.deliver_once()
    ((_, headers, _),) = receiver.got
    assert SIGNATURE_HEADER not in headers


def test_a_transition_offered_again_is_not_sent_again(receiver: Receiver) -> None:
    n = _notifier(receiver.url, Clock())
    n.offer([_t()])
    n.deliver_once()
    n.offer([_t(), _t(state="failure")])  # the next pass reports the first again
    n.deliver_once()
    assert [b["text"] for b in receiver.bodies()] == [
        f"canary: {'c' * 12} succeeded",
        f"canary: {'c' * 12} failed",
    ]
    assert _count(n, "duplicate") == 1


def test_more_transitions_than_tokens_go_out_as_one_digest_and_the_next_waits_for_a_token(
    receiver: Receiver,
) -> None:
    clock = Clock()
    n = _notifier(receiver.url, clock, fmt="json", per_minute=6, burst=2)
    n.offer([_t(c) for c in ("a", "b", "c", "d", "e")])
    assert n.deliver_once() == 1
    (digest,) = receiver.bodies()
    assert [t["stage"] for t in digest["transitions"]] == ["a", "b", "c", "d", "e"]
    n.offer([_t("f")])
    assert n.deliver_once() == 1  # the burst's second token
    n.offer([_t("g")])
    assert n.deliver_once() == 0  # no token: it waits for one (6 a minute: 10 s)
    assert clock.slept == [pytest.approx(10.0)]
    assert n.deliver_once() == 1
    assert [len(b["transitions"]) for b in receiver.bodies()] == [5, 1, 1]
    assert (_count(n, "digest"), _count(n, "sent")) == (1, 2)


def test_a_5xx_is_retried_with_backoff_and_a_429_after_its_retry_after(
    receiver: Receiver,
) -> None:
    clock = Clock()
    receiver.script = [(503, {}), (429, {"Retry-After": "7"})]
    n = _notifier(receiver.url, clock, retry=Retry(attempts=3, base_delay=1.0, max_delay=30.0))
    n.offer([_t()])
    n.deliver_once()
    assert len(receiver.got) == 3
    assert clock.slept == [1.0, 7.0]
    assert (_count(n, "sent"), _count(n, "failed")) == (1, 0)


def test_a_refusal_is_not_retried_and_the_log_names_the_origin_never_the_token(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.script = [(403, {})]
    n = _notifier(receiver.url, Clock())
    n.offer([_t()])
    with caplog.at_level(logging.WARNING, logger=sender.__name__):
        n.deliver_once()
    assert len(receiver.got) == 1
    assert _count(n, "failed") == 1
    assert f"http://127.0.0.1:{receiver.port}" in caplog.text
    assert "HTTP 403 Forbidden" in caplog.text
    assert "s3cr3t" not in caplog.text and "/services" not in caplog.text


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.script = [(302, {"Location": f"http://127.0.0.1:{receiver.port}/elsewhere"})]
    n = _notifier(receiver.url, Clock())
    n.offer([_t()])
    n.deliver_once()
    assert [p for p, _, _ in receiver.got] == [f"/services/{TOKEN}"]
    assert _count(n, "failed") == 1


def test_a_receiver_that_is_down_is_given_up_after_the_retries_without_the_token_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    clock = Clock()
    n = _notifier(f"http://127.0.0.1:{port}/services/{TOKEN}", clock)
    n.offer([_t()])
    with caplog.at_level(logging.WARNING, logger=sender.__name__):
        n.deliver_once()
    assert len(clock.slept) == 2  # three attempts
    assert _count(n, "failed") == 1
    assert "given up" in caplog.text and "s3cr3t" not in caplog.text


def test_a_full_queue_drops_the_oldest_and_counts_it() -> None:
    n = _notifier("http://127.0.0.1:9/", Clock())
    n.offer([_t(commit=f"{i:040x}") for i in range(sender.MAX_QUEUE + 3)])
    assert _count(n, "dropped") == 3


def test_the_sender_thread_delivers_what_passes_offer_and_stops(receiver: Receiver) -> None:
    n = Notifier(receiver.url, metrics=Metrics())
    n.start()
    try:
        n.offer([_t("canary")])
        receiver.wait_for("the first message", lambda got: len(got) == 1)
        n.offer([_t("inference")])
        receiver.wait_for("the second message", lambda got: len(got) == 2)
    finally:
        n.stop()
    assert n._thread is not None and not n._thread.is_alive()
    assert [b["text"] for b in receiver.bodies()] == [
        f"canary: {'c' * 12} succeeded",
        f"inference: {'c' * 12} succeeded",
    ]
