"""`gitops-gpu controller`: the reconcile loop with leader election, metrics and webhook."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gitops_gpu import heap, kube
from gitops_gpu.cli import limits_args, notify_args, options, verify_args
from gitops_gpu.controller import Controller
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.leader import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD, LeaseLock
from gitops_gpu.metrics import Metrics
from gitops_gpu.server import (
    MAX_CONNECTIONS,
    MAX_PER_SOURCE,
    REQUEST_DEADLINE,
    ControllerServer,
    Probes,
)

if TYPE_CHECKING:
    from gitops_gpu.ui.facts import PassFacts

log = logging.getLogger("gitops_gpu.controller")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("controller", help="poll the fleet repo and roll out canary-first")
    options.fleet_source(p, rev=False)
    p.add_argument(
        "--cluster",
        help="the fleet cluster (spec.clusters[].name) this controller manages: its pools, its "
        "ClusterPolicy, its part of each stage; required when the fleet lists several",
    )
    options.kubeconfig(p)
    p.add_argument("--interval", type=options.duration, default=30.0, help="poll interval (30s)")
    options.status_record(p)
    p.add_argument(
        "--metrics-addr",
        default="127.0.0.1:9464",
        help="host:port for /metrics, /healthz, /readyz, /webhook and /ui/ (127.0.0.1: "
        "reach it through kubectl port-forward or an authenticating proxy)",
    )
    p.add_argument(
        "--ui",
        action="store_true",
        help="serve the read-only web view at /ui/ on --metrics-addr (off by default): the "
        "pipeline, stages, pools, nodes and commits as the last pass saw them, updated live",
    )
    p.add_argument(
        "--webhook-secret-file",
        type=Path,
        help="HMAC secret for POST /webhook; without it (or --webhook-insecure) /webhook is off",
    )
    p.add_argument(
        "--webhook-insecure",
        action="store_true",
        help="serve /webhook without a secret: anyone who reaches the port can trigger passes "
        "(labs only)",
    )
    p.add_argument(
        "--webhook-max-connections",
        type=limits_args.positive,
        default=MAX_CONNECTIONS,
        metavar="N",
        help="open connections to --metrics-addr, all peers together; past it a new one gets "
        f"503 at once, unless a stalled one can be dropped for it ({MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--webhook-max-per-source",
        type=limits_args.positive,
        default=MAX_PER_SOURCE,
        metavar="N",
        help=f"open connections to --metrics-addr from one IP address ({MAX_PER_SOURCE})",
    )
    p.add_argument(
        "--webhook-request-deadline",
        type=options.duration,
        default=REQUEST_DEADLINE,
        metavar="DURATION",
        help="a whole request (line, headers, body) to --metrics-addr must arrive within this, "
        f"however steadily it trickles; past it the peer is dropped ({REQUEST_DEADLINE:g}s)",
    )
    options.namespace(p)
    options.operator_namespace(p)
    p.add_argument(
        "--no-leader-election",
        action="store_true",
        help="run passes without holding the Lease (one replica only: two would both write)",
    )
    p.add_argument(
        "--lease-duration",
        type=options.duration,
        default=LEASE_DURATION,
        help="how long a standby waits on an unchanged Lease before taking over (15s)",
    )
    p.add_argument(
        "--renew-deadline",
        type=options.duration,
        default=RENEW_DEADLINE,
        help="the leader stops writing when it could not renew for this long (10s)",
    )
    p.add_argument(
        "--retry-period",
        type=options.duration,
        default=RETRY_PERIOD,
        help="how often the Lease is renewed or tried (2s)",
    )
    p.add_argument(
        "--smoke-namespace",
        help="where gate.smokeTest Jobs run (default: --namespace)",
    )
    p.add_argument(
        "--node-wait-alert-after",
        type=options.duration,
        default=6 * 3600.0,
        metavar="DURATION",
        help="alert GitopsGpuNodeHeldByWorkload fires when the driver upgrade has waited this "
        "long on a node's workloads (drain, GPU pods, jobs) (6h)",
    )
    p.add_argument(
        "--prometheus-url",
        help="base URL of the Prometheus gate.metrics queries go to (e.g. http://127.0.0.1:9090)",
    )
    p.add_argument(
        "--pull-requests",
        action="store_true",
        help="check open pull requests against --branch on the status backend's forge: "
        "gitops-gpu/preflight on each head and one comment with the plan (no CI job needed)",
    )
    options.crds(p, "the cluster's own, refreshed every 10 minutes")
    p.add_argument("--once", action="store_true", help="run one pass and exit")
    verify_args.add_arguments(p)
    notify_args.add_arguments(p)
    limits_args.add_arguments(p)
    limits_args.add_peer_arguments(p)
    p.set_defaults(func=_run)


def _fan_out(listeners: Sequence[Callable[[PassFacts], None]]) -> Callable[[PassFacts], None]:
    def publish(facts: PassFacts) -> None:
        for listen in listeners:
            try:
                listen(facts)
            except Exception:  # a listener's bug must cost its view of one pass, no more
                log.exception("publishing pass %d to %s failed", facts.seq, listen)

    return publish


def _run(args: argparse.Namespace) -> int:
    heap.few_arenas()
    verifier = verify_args.verifier(args)  # a bad KEYS stops the start here, loudly
    limits_args.apply(args)
    limits_args.apply_peer(args)
    if not args.retry_period < args.renew_deadline < args.lease_duration:
        raise GitopsGpuError(
            "leader election needs --retry-period < --renew-deadline < --lease-duration",
            fix="keep the defaults (2s, 10s, 15s) or scale all three together",
        )
    client = kube.Client.from_kubeconfig(args.kubeconfig)
    cfg = options.controller_config(
        args,
        "controller",
        interval=args.interval,
        operator_namespace=args.operator_namespace,
        crds_dir=args.crds,
        verifier=verifier,
        smoke_namespace=args.smoke_namespace,
        prometheus_url=args.prometheus_url,
        node_wait_alert_after=args.node_wait_alert_after,
        pull_requests=args.pull_requests,
    )
    metrics, probes = Metrics(), Probes(stall_after=max(600.0, 10 * args.interval))
    metrics.watch_api_requests(client.requests)
    ctl = Controller(cfg, client, metrics=metrics)
    ctl.check_cluster()  # an unknown --cluster refuses to start
    if args.once:
        ctl.start_informers()
        report = ctl.run_pass()
        ctl.stop_informers()
        log.info(
            "pass %s: %d actions, %d objects/nodes written, %d statuses",
            report.result,
            len(report.actions),
            report.applied,
            report.statuses_written,
        )
        return 0 if report.result in ("ok", "paused") else 1
    secret = args.webhook_secret_file.read_bytes().strip() if args.webhook_secret_file else None
    view = None
    listeners: list[Callable[[PassFacts], None]] = []
    if args.ui:
        from gitops_gpu.ui.app import WebView  # noqa: PLC0415 - only --ui pays for the view

        view = WebView()
        listeners.append(view.publish)
    notifier = notify_args.notifier(args, metrics)
    if notifier is not None:
        listeners.append(notifier.publish)
        notifier.start()
    if listeners:
        ctl.publish = _fan_out(listeners)
    server = ControllerServer(
        args.metrics_addr,
        metrics,
        probes,
        ctl.trigger,
        secret,
        webhook_insecure=args.webhook_insecure,
        max_connections=args.webhook_max_connections,
        max_per_source=args.webhook_max_per_source,
        request_deadline=args.webhook_request_deadline,
        ui=view,
    ).start()
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: finishing the current pass, then stopping", signum)
        stop.set()
        ctl.trigger()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    heap.census_on_signal()
    lease = (
        None
        if args.no_leader_election
        else LeaseLock(
            client,
            namespace=args.namespace,
            duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    )

    def on_pass(_report: object) -> None:
        probes.beat()

    log.info("controller serving on %s:%d", args.metrics_addr.rpartition(":")[0], server.port)
    try:
        ctl.run(stop, lease=lease, on_pass=on_pass)
    finally:
        server.stop()
        if notifier is not None:
            notifier.stop()
    return 0
