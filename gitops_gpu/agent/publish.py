"""Publishing NodeGPUReports: server-side apply, rate-limited, owned by the Node.

The object is applied once (and again if it disappears) with an ownerReference to the Node, so
the garbage collector deletes it with the node; the status goes through the status subresource
under field manager ``gitops-gpu-agent``. Identical content is not re-sent until the heartbeat is
due: a fleet of agents must not churn resourceVersions (and watchers) every interval, yet a
reader needs a fresh ``observedAt`` now and then to tell a live agent from a dead one.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.agent import report
from gitops_gpu.errors import KubeError

log = logging.getLogger("gitops_gpu.agent")

AGENT_FIELD_MANAGER = "gitops-gpu-agent"
Clock = Callable[[], float]


class _Dedup:
    """Skip content identical to the last publish until ``heartbeat_seconds`` have passed."""

    def __init__(self, heartbeat_seconds: float, clock: Clock) -> None:
        self.heartbeat_seconds = heartbeat_seconds
        self._clock = clock
        self._last: str | None = None
        self._last_at = 0.0

    def due(self, status: Mapping[str, Any]) -> bool:
        if self._last != report.fingerprint(status):
            return True
        return self._clock() - self._last_at >= self.heartbeat_seconds

    def sent(self, status: Mapping[str, Any]) -> None:
        self._last = report.fingerprint(status)
        self._last_at = self._clock()


class KubePublisher:
    """Writes one node's NodeGPUReport to the apiserver."""

    def __init__(
        self,
        client: kube.Client,
        node: str,
        *,
        heartbeat_seconds: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self.client = client
        self.node = node
        self._dedup = _Dedup(heartbeat_seconds, clock)
        self._ensured = False

    def publish(self, status: Mapping[str, Any]) -> bool:
        """Apply ``status``; False when skipped as unchanged. Raises KubeError on API failure."""
        if not self._dedup.due(status):
            return False
        if not self._ensured:
            self._ensure_object()
        try:
            self._apply_status(status)
        except kube.NotFoundError:  # deleted under us (GC after a node re-register): recreate
            self._ensure_object()
            self._apply_status(status)
        self._dedup.sent(status)
        return True

    def _ensure_object(self) -> None:
        node = self.client.get("v1", "Node", self.node)
        if node is None:
            raise KubeError(
                f"node {self.node} not found: cannot own its NodeGPUReport",
                fix="pass --node with this node's name (the DaemonSet sets NODE_NAME "
                "from spec.nodeName)",
            )
        obj = report.report_object(self.node)
        obj["metadata"]["labels"] = {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node,
                "uid": node["metadata"]["uid"],
            }
        ]
        obj["spec"] = {"nodeName": self.node}
        self.client.apply(obj, field_manager=AGENT_FIELD_MANAGER, force=True)
        self._ensured = True

    def _apply_status(self, status: Mapping[str, Any]) -> None:
        self.client.apply(
            report.report_object(self.node, status),
            field_manager=AGENT_FIELD_MANAGER,
            subresource="status",
            force=True,
        )


class StreamPublisher:
    """Writes the report object as one JSON line (``--stdout``: debugging on a node, no API)."""

    def __init__(
        self,
        node: str,
        *,
        heartbeat_seconds: float,
        sink: Callable[[dict[str, Any]], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.node = node
        self._sink = sink or _print_json
        self._dedup = _Dedup(heartbeat_seconds, clock)

    def publish(self, status: Mapping[str, Any]) -> bool:
        if not self._dedup.due(status):
            return False
        self._sink(report.report_object(self.node, status))
        self._dedup.sent(status)
        return True


def _print_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()
