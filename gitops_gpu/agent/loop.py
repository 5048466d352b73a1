"""The agent loop: read NVML, build the report, publish; in loop mode, never die of a failure.

A DaemonSet agent that crash-loops tells nobody anything, while an agent that keeps publishing
"NVML unavailable: driver not loaded" tells the ladder exactly why the node is unhealthy. So in
loop mode NVML and API failures are logged and retried next interval; ``--once`` returns an exit
code instead (0 published, 1 NVML unavailable but reported, 2 publishing failed).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gitops_gpu import kube
from gitops_gpu.agent import nvml as nvmlmod
from gitops_gpu.agent import publish, report
from gitops_gpu.errors import KubeError

log = logging.getLogger("gitops_gpu.agent")

OK, NVML_UNAVAILABLE, PUBLISH_FAILED = 0, 1, 2


def default_heartbeat(interval: float) -> float:
    """Re-publish unchanged content every 4 intervals, but at least every 60 s apart."""
    return max(4 * interval, 60.0)


def run_agent(
    node: str,
    interval: float,
    once: bool,
    nvml: Any = None,
    client: kube.Client | None = None,
    *,
    sink: Callable[[dict[str, Any]], None] | None = None,
    heartbeat: float | None = None,
    iterations: int | None = None,
    stop: threading.Event | None = None,
    now: Callable[[], datetime] | None = None,
) -> int:
    """Run the node agent; returns the last pass's exit code.

    ``nvml`` is the NVML library (default: the real pynvml; a :class:`FakeNvml` on machines
    without GPUs). With ``client`` reports go to the apiserver, else each report is handed to
    ``sink`` (default: a JSON line on stdout). ``iterations`` and ``stop`` bound loop mode.
    """
    beat = heartbeat if heartbeat is not None else default_heartbeat(interval)
    agent = make_agent(node, nvml, client, sink=sink, heartbeat=beat, now=now)
    stop = stop or threading.Event()
    passes = 0
    rc = OK
    try:
        while True:
            if once:
                return agent.step()
            try:
                rc = agent.step()
            except Exception:  # a bug must not take the node's reporting down with it
                log.exception("node %s: agent pass failed; retrying in %.0fs", node, interval)
                rc = PUBLISH_FAILED
            passes += 1
            if (iterations is not None and passes >= iterations) or stop.wait(interval):
                return rc
    finally:
        agent.reader.close()


def _utcnow() -> datetime:
    return datetime.now(UTC)


def make_agent(
    node: str,
    nvml: Any = None,
    client: kube.Client | None = None,
    *,
    sink: Callable[[dict[str, Any]], None] | None = None,
    heartbeat: float = 120.0,
    now: Callable[[], datetime] | None = None,
) -> Agent:
    """One node's agent, to drive pass by pass (the testbed simulator keeps one per fake node)."""
    publisher: publish.KubePublisher | publish.StreamPublisher = (
        publish.KubePublisher(client, node, heartbeat_seconds=heartbeat)
        if client is not None
        else publish.StreamPublisher(node, heartbeat_seconds=heartbeat, sink=sink)
    )
    return Agent(node, nvmlmod.NvmlReader(nvml), publisher, heartbeat, now or _utcnow)


class Agent:
    """Reader, publisher and the state carried between passes (Xid history, conditions)."""

    def __init__(
        self,
        node: str,
        reader: nvmlmod.NvmlReader,
        publisher: publish.KubePublisher | publish.StreamPublisher,
        heartbeat: float,
        now: Callable[[], datetime],
    ) -> None:
        self.node = node
        self.reader = reader
        self.publisher = publisher
        self.heartbeat = heartbeat
        self.now = now
        self.history = report.XidHistory()
        self.conditions: list[dict[str, Any]] = []

    def step(self) -> int:
        """One pass: read NVML, build the status, publish it (unless unchanged); an exit code."""
        when = self.now()
        rc = OK
        try:
            reading = self.reader.read()
        except nvmlmod.NvmlUnavailableError as exc:
            log.error(
                "node %s: NVML unavailable (%s): %s; publishing that in the report",
                self.node,
                exc.reason,
                exc.message,
            )
            status = report.status_from_error(
                self.node, exc, self.history, when, self.heartbeat, self.conditions
            )
            rc = NVML_UNAVAILABLE
        else:
            if reading.xid_events:  # one line per pass, not per event: storms happen
                counts = Counter((ev.xid, ev.gpu) for ev in reading.xid_events)
                log.warning(
                    "node %s: %d Xid events: %s",
                    self.node,
                    len(reading.xid_events),
                    ", ".join(f"Xid {x} on GPU {g} x{n}" for (x, g), n in sorted(counts.items())),
                )
            self.history.add(reading.xid_events, when)
            status = report.status_from_reading(
                self.node, reading, self.history, when, self.heartbeat, self.conditions
            )
        try:
            sent = self.publisher.publish(status)
        except KubeError as exc:
            log.error("node %s: cannot publish NodeGPUReport: %s", self.node, exc)
            return PUBLISH_FAILED
        self.conditions = status["conditions"]
        log.debug("node %s: report %s", self.node, "published" if sent else "unchanged, skipped")
        return rc
