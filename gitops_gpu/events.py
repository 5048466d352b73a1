"""Kubernetes Events on the objects gitops-gpu changes, so `kubectl describe` tells the story."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import kube
from gitops_gpu.errors import KubeError

log = logging.getLogger(__name__)
COMPONENT = "gitops-gpu"


class EventRecorder:
    def __init__(self, client: kube.Client, namespace: str = "default") -> None:
        self.client = client
        self.namespace = namespace  # cluster-scoped objects get their Events here

    def record(
        self,
        api_version: str,
        kind: str,
        name: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        uid: str | None = None,
    ) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name}
        if uid:
            involved["uid"] = uid
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": self.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
        }
        try:
            self.client.create(event)
        except KubeError as exc:  # events are best effort; never fail a pass on them
            log.debug("event not recorded: %s", exc)
