"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's leaderelection semantics.

- The leader renews on its own timer every ``retry_period``, independent of how long a pass
  takes; a leader that has not renewed within ``renew_deadline`` stops leading by itself.
- Expiry is judged by when THIS replica last saw the record change (its monotonic clock), never
  by comparing the holder's ``renewTime`` with the local wall clock: a skewed clock on either
  side cannot make two leaders. A standby takes over only after the record stayed unchanged
  for ``lease_duration``.
- ``holds()`` is the fence: a pass asks it before every write batch and stops writing when the
  last successful renew is older than ``renew_deadline`` (which is shorter than the duration
  the others wait, so the old leader stops before a new one can start).
- Writes carry the Lease's resourceVersion: two replicas racing for it cannot both win (409).
- ``release()`` (SIGTERM) empties the holder so a standby takes over at its next retry.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import kube, osthread
from gitops_gpu.errors import KubeError

log = logging.getLogger(__name__)
LEASE_API = ("coordination.k8s.io/v1", "Lease")
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0  # client-go's defaults


def _fmt(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    spec = lease.get("spec") or {}
    return (
        spec.get("holderIdentity"),
        spec.get("renewTime"),
        spec.get("acquireTime"),
        spec.get("leaseTransitions"),
        lease.get("metadata", {}).get("resourceVersion"),
    )


class LeaseLock:
    def __init__(
        self,
        client: kube.Client,
        *,
        name: str = "gitops-gpu-controller",
        namespace: str = "default",
        identity: str | None = None,
        duration: float = LEASE_DURATION,
        renew_deadline: float | None = None,
        retry_period: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.duration = duration
        # Scaled like client-go's 15/10/2 when only the duration is given.
        self.renew_deadline = renew_deadline if renew_deadline is not None else duration * 2 / 3
        self.retry_period = retry_period if retry_period is not None else duration * 2 / 15
        if not self.retry_period < self.renew_deadline < self.duration:
            raise ValueError("need retry period < renew deadline < lease duration")
        self.clock = clock
        self.is_leader = False
        self.transitions_seen = 0  # leaseTransitions as last read: hand-overs, for tests/bench
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._written: dict[str, Any] | None = None  # the Lease as this replica last wrote it
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one attempt ----------------------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Acquire or renew once; returns whether this replica leads now."""
        now = self.clock()
        if self.is_leader and self._written is not None:
            # Renew with one PUT of the Lease as we last wrote it: a 409 means another
            # replica wrote since, and only then is it read and judged below.
            try:
                self._written = self.client.replace(self._body(self._written))
                return self._won(now)
            except kube.ConflictError:
                self._written = None
            except KubeError as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                return self._lost("unknown (API error)")
        self._written = None
        try:
            lease = self.client.get(*LEASE_API, self.name, self.namespace)
            if lease is None:
                self._written = self.client.create(self._body(None))
                return self._won(now)
            spec = lease.get("spec") or {}
            self.transitions_seen = int(spec.get("leaseTransitions") or 0)
            record = _record(lease)
            if record != self._observed:
                self._observed, self._observed_at = record, now
            holder = spec.get("holderIdentity")
            duration = float(spec.get("leaseDurationSeconds") or self.duration)
            if holder not in (None, "", self.identity) and now < self._observed_at + duration:
                return self._set(False, holder)
            self._written = self.client.replace(self._body(lease))
            return self._won(now)
        except kube.ConflictError:
            return self._lost("another replica (lost the race)")
        except KubeError as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return self._lost("unknown (API error)")

    def holds(self) -> bool:
        """The fence: True only while the last successful renew is within the renew deadline."""
        renewed = self._renewed_at
        return (
            self.is_leader and renewed is not None and self.clock() - renewed < self.renew_deadline
        )

    # -- on its own timer -----------------------------------------------------------------------
    def start(self) -> LeaseLock:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def wait_changed(self, timeout: float) -> None:
        """Sleep up to ``timeout`` or until leadership changes (a standby wakes on takeover)."""
        self._changed.wait(timeout)
        self._changed.clear()

    def _loop(self) -> None:
        osthread.name_current()
        while not self._stop.is_set():
            self.try_acquire()
            if self.is_leader and not self.holds():
                self._lost("renew deadline passed")
            # Jitter keeps two standbys from retrying in lockstep (client-go's JitterUntil).
            # The leader renews every 2/5 of its renew deadline (4-4.8 s at 10 s: one more try
            # before its fence drops), not every retry period: the Lease is most of an idle
            # controller's API traffic (issue 32: <= 1.5 requests per 5 s).
            period = max(self.retry_period, self.renew_deadline / 2.5) if self.holds() else 0
            self._stop.wait((period or self.retry_period) * (1 + 0.2 * random.random()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def release(self) -> None:
        """Give the Lease up now (SIGTERM): holder emptied, so a standby need not wait."""
        self.stop()
        if not self.is_leader:
            return
        self._set(False, None)
        try:
            lease = self.client.get(*LEASE_API, self.name, self.namespace)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["renewTime"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                self.client.replace(lease)
        except KubeError as exc:
            log.info("lease release failed (it will expire): %s", exc)

    # -- helpers --------------------------------------------------------------------------------
    def _body(self, lease: dict[str, Any] | None) -> dict[str, Any]:
        now = _fmt(datetime.now(UTC))  # informational for humans; never compared
        spec = dict((lease or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=round(self.duration),
            renewTime=now,
        )
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": LEASE_API[0], "kind": LEASE_API[1], "metadata": meta, "spec": spec}

    def _won(self, now: float) -> bool:
        self._renewed_at = now
        self._observed = None  # our own write: re-observed on the next read
        self._observed_at = now
        return self._set(True, self.identity)

    def _lost(self, holder: str) -> bool:
        # A failed renew keeps leadership until the deadline; holds() fences writes meanwhile.
        if self.is_leader and self.holds():
            return True
        return self._set(False, holder)

    def _set(self, leader: bool, holder: str | None) -> bool:
        if leader != self.is_leader:
            log.info(
                "leader election: %s (holder %s)", "leading" if leader else "standing by", holder
            )
            self.is_leader = leader
            self._changed.set()
        if not leader:
            self._renewed_at = None
        return leader
