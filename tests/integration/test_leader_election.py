"""Leader election against the real apiserver's Lease, with each replica's clock injected so
expiry can be walked through without waiting: client-go semantics, no clock comparisons."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gitops_gpu.leader import LEASE_API, LeaseLock
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration
NAME = "election-test"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fresh(testbed: Testbed) -> Iterator[Testbed]:
    testbed.client.delete(*LEASE_API, NAME, "default")
    yield testbed
    testbed.client.delete(*LEASE_API, NAME, "default")


def _lock(tb: Testbed, who: str, clock: Clock) -> LeaseLock:
    return LeaseLock(tb.client, name=NAME, identity=who, clock=clock)


def test_standby_waits_a_full_duration_from_its_own_observation(fresh: Testbed) -> None:
    ca, cb = Clock(), Clock()
    a, b = _lock(fresh, "a", ca), _lock(fresh, "b", cb)
    assert a.try_acquire() and a.holds()
    assert not b.try_acquire()
    cb.now += 14.0
    assert not b.try_acquire()  # unchanged record, but not yet 15 s since b first saw it
    ca.now += 2.0
    assert a.try_acquire()  # a renews: the record changes
    cb.now += 2.0  # 16 s after b's first look, 2 s after the renew it just sees
    assert not b.try_acquire()
    cb.now += 15.1  # a stopped renewing (killed): b's observation of it is 15.1 s old
    assert b.try_acquire() and b.holds()
    ca.now += 10.0  # a, frozen mid-pass, wakes up: its last renew is past the deadline
    assert not a.holds()
    assert not a.try_acquire() and not a.is_leader
    lease = fresh.client.get(*LEASE_API, NAME, "default")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


def test_expiry_is_not_read_from_the_holders_clock(fresh: Testbed) -> None:
    """A renewTime far in the past (a holder whose clock is wrong) does not hand the Lease
    over: only a record that stays unchanged for the duration does."""
    ca, cb = Clock(), Clock()
    a, b = _lock(fresh, "a", ca), _lock(fresh, "b", cb)
    assert a.try_acquire()
    lease = fresh.client.get(*LEASE_API, NAME, "default")
    lease["spec"]["renewTime"] = "2001-01-01T00:00:00.000000Z"
    fresh.client.replace(lease)
    assert not b.try_acquire()
    cb.now += 5.0
    assert not b.try_acquire()


def test_release_hands_over_at_once(fresh: Testbed) -> None:
    ca, cb = Clock(), Clock()
    a, b = _lock(fresh, "a", ca), _lock(fresh, "b", cb)
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert not a.is_leader and not a.holds()
    assert b.try_acquire()


def test_renew_deadline_fences_a_leader_that_cannot_renew(fresh: Testbed) -> None:
    ca = Clock()
    a = _lock(fresh, "a", ca)
    assert a.try_acquire()
    ca.now += a.renew_deadline - 0.5
    assert a.holds()
    ca.now += 1.0
    assert not a.holds()  # no write after this, whatever the renew thread is doing


def test_timer_renews_independently_of_the_pass(fresh: Testbed) -> None:
    a = LeaseLock(fresh.client, name=NAME, identity="a", duration=3.0).start()
    try:
        deadline = time.monotonic() + 5
        while not a.holds() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.holds()
        first = fresh.client.get(*LEASE_API, NAME, "default")["spec"]["renewTime"]
        time.sleep(2 * a.retry_period + 0.3)  # no pass runs: only the timer can renew
        later = fresh.client.get(*LEASE_API, NAME, "default")["spec"]["renewTime"]
        assert later != first and a.holds()
    finally:
        a.release()
    assert not fresh.client.get(*LEASE_API, NAME, "default")["spec"]["holderIdentity"]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseLock(None, duration=10, renew_deadline=12)  # type: ignore[arg-type]
