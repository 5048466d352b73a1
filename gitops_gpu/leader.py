"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

The holder renews ``renewTime`` every ``renew`` seconds; another replica takes over only when
``renewTime + leaseDurationSeconds`` has passed. Writes use the Lease's resourceVersion, so two
replicas racing for an expired lease cannot both win (the loser gets 409).
"""

from __future__ import annotations

import logging
import socket
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from gitops_gpu import kube
from gitops_gpu.errors import KubeError

log = logging.getLogger(__name__)
LEASE_API = ("coordination.k8s.io/v1", "Lease")


def _now() -> datetime:
    return datetime.now(UTC)


def _fmt(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def default_identity() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class LeaseLock:
    def __init__(
        self,
        client: kube.Client,
        *,
        name: str = "gitops-gpu-controller",
        namespace: str = "default",
        identity: str | None = None,
        duration: int = 15,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.duration = duration
        self.is_leader = False

    def _body(self, lease: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
        spec = dict((lease or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = _fmt(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions", 0)) + (1 if lease else 0)
        spec.update(
            holderIdentity=self.identity, leaseDurationSeconds=self.duration, renewTime=_fmt(now)
        )
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": LEASE_API[0], "kind": LEASE_API[1], "metadata": meta, "spec": spec}

    def try_acquire(self) -> bool:
        """Acquire or renew; returns whether this replica leads now."""
        now = _now()
        try:
            lease = self.client.get(*LEASE_API, self.name, self.namespace)
            if lease is None:
                self.client.create(self._body(None, now))
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity")
                renewed = _parse(spec.get("renewTime"))
                duration = int(spec.get("leaseDurationSeconds") or self.duration)
                expired = renewed is None or renewed + timedelta(seconds=duration) < now
                if holder not in (None, "", self.identity) and not expired:
                    return self._set(False, holder)
                self.client.replace(self._body(lease, now))
        except kube.ConflictError:
            return self._set(False, "another replica (lost the race)")
        except KubeError as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return self._set(False, "unknown (API error)")
        return self._set(True, self.identity)

    def release(self) -> None:
        if not self.is_leader:
            return
        lease = self.client.get(*LEASE_API, self.name, self.namespace)
        if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["renewTime"] = None
            try:
                self.client.replace(lease)
            except KubeError as exc:
                log.info("lease release failed (it will expire): %s", exc)
        self.is_leader = False

    def _set(self, leader: bool, holder: str | None) -> bool:
        if leader != self.is_leader:
            log.info(
                "leader election: %s (holder %s)", "leading" if leader else "standing by", holder
            )
        self.is_leader = leader
        return leader
