"""Prometheus metrics of the controller, on a registry of its own (no process-global state)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

# "GET /api/v1/namespaces/ns/pods/name/log" -> verb GET, resource pods/log
_REQUEST = re.compile(
    r"^(?P<verb>\w+) /apis?(?:/[^/]+)?/v[^/]+(?:/namespaces/[^/]+)?/(?P<res>[^/]+)"
    r"(?:/[^/]+(?:/(?P<sub>[^/]+))?)?"
)


class _ApiRequests(Collector):
    """gitops_gpu_api_requests_total from the kube client's own request counter."""

    def __init__(self, requests: Mapping[str, int]) -> None:
        self.requests = requests

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "gitops_gpu_api_requests",
            "Requests to the kube-apiserver by verb (WATCH: watch streams) and resource",
            labels=["verb", "resource"],
        )
        totals: dict[tuple[str, str], int] = {}
        items: list[tuple[str, int]] = []
        for _ in range(3):  # the client counts from other threads
            try:
                items = list(self.requests.items())
                break
            except RuntimeError:
                continue
        for key, count in items:
            m = _REQUEST.match(key)
            if m is None:
                continue
            res = f"{m['res']}/{m['sub']}" if m["sub"] else m["res"]
            totals[(m["verb"], res)] = totals.get((m["verb"], res), 0) + count
        for (verb, res), count in sorted(totals.items()):
            family.add_metric([verb, res], count)
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.pass_duration = Histogram(
            "gitops_gpu_pass_duration_seconds",
            "Duration of one reconcile pass",
            ["result"],
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.passes = Counter(
            "gitops_gpu_passes_total", "Reconcile passes by result", ["result"], registry=r
        )
        self.stage_commit = Gauge(
            "gitops_gpu_stage_commit_info",
            "The commit each stage runs (value 1)",
            ["stage", "commit"],
            registry=r,
        )
        self.pool_nodes = Gauge(
            "gitops_gpu_pool_nodes", "Nodes per pool by health", ["pool", "health"], registry=r
        )
        self.drifted = Gauge(
            "gitops_gpu_drifted_objects",
            "Objects that differ from the commit",
            ["cluster"],
            registry=r,
        )
        self.gate = Gauge(
            "gitops_gpu_gate_state",
            "Gate state per stage (1 for the current state)",
            ["stage", "state"],
            registry=r,
        )
        self.gate_metric = Gauge(
            "gitops_gpu_gate_metric_value",
            "The latest value of each gate.metrics query, per stage",
            ["stage", "metric"],
            registry=r,
        )
        self.last_fetch = Gauge(
            "gitops_gpu_last_successful_fetch_timestamp_seconds",
            "Unix time of the last successful poll of the fleet repo",
            registry=r,
        )
        self.node_wait = Gauge(
            "gitops_gpu_node_upgrade_wait_seconds",
            "How long the driver upgrade has waited on workloads on a node (drain, GPU-pod "
            "deletion, jobs); only waiting nodes have a series",
            ["pool", "node", "state"],
            registry=r,
        )
        self.node_wait_alert = Gauge(
            "gitops_gpu_node_upgrade_wait_alert_seconds",
            "The wait past which GitopsGpuNodeHeldByWorkload fires (--node-wait-alert-after)",
            registry=r,
        )
        self._waiting: set[tuple[str, str, str]] = set()
        self.line_stopped = Gauge(
            "gitops_gpu_line_stopped",
            "1 while the line is stopped (gitops-gpu pause): every stage holds",
            registry=r,
        )
        self.status_writes = Counter(
            "gitops_gpu_status_writes_total",
            "Commit statuses written",
            ["context", "state"],
            registry=r,
        )
        self._stage_commits: dict[str, str] = {}
        self.cluster_wide_changes = Counter(
            "gitops_gpu_cluster_wide_changes_total",
            "ClusterPolicy changes carried by a stage (they hit every pool of the cluster)",
            ["stage"],
            registry=r,
        )
        self.notifications = Counter(
            "gitops_gpu_notifications_total",
            "Outgoing notifications (--notify-url-file), by result: sent (a message with one "
            "transition), digest (one message for several, the rate limit held them), "
            "duplicate (a transition sent already), failed (given up after retries), dropped "
            "(the queue was full)",
            ["result"],
            registry=r,
        )
        self.leader = Gauge("gitops_gpu_leader", "1 while this replica leads", registry=r)
        self.pass_exceptions = Counter(
            "gitops_gpu_pass_exceptions_total",
            "Unexpected exceptions caught so the loop carries on, by where: preflight (a "
            "commit's check; that commit fails preflight) or pass (the rest of a pass)",
            ["where"],
            registry=r,
        )
        self.webhook_rejected = Counter(
            "gitops_gpu_webhook_rejected_total",
            "Requests and connections to the HTTP endpoint refused or ignored, by reason: "
            "signature, too_large, malformed, duplicate (POST /webhook); deadline (a request "
            "not complete within --webhook-request-deadline), connections, per_source (over "
            "--webhook-max-connections / --webhook-max-per-source, refused at accept), evicted "
            "(a stalled connection dropped to make room), busy (the body budget is spent)",
            ["reason"],
            registry=r,
        )
        self.peer_refused = Counter(
            "gitops_gpu_peer_refused_total",
            "Answers from a network peer refused or partly skipped, by peer (git) and reason: "
            "too_large, deadline, malformed, redirect, not_advertisement, http_status, "
            "ref_name (ref names that are not UTF-8 skipped, per poll)",
            ["peer", "reason"],
            registry=r,
        )
        self.unjudged = Counter(
            "gitops_gpu_commits_unjudged_total",
            "Commit checks deferred to the next pass by a git, apiserver or CRD error (no "
            "verdict, no status written)",
            registry=r,
        )
        self.record_ignored = Counter(
            "gitops_gpu_record_ignored_total",
            "Statuses in the promotion record that decide nothing (counted once each): no seal "
            "of a trusted controller, an approval by someone not an approver, a verdict the "
            "ledger lacks; by kind: stage, preflight, approval, other",
            ["kind"],
            registry=r,
        )
        self.record_restored = Counter(
            "gitops_gpu_record_restored_total",
            "Verdicts written back to the record from the ledger after someone removed them",
            registry=r,
        )
        self.history_held = Gauge(
            "gitops_gpu_history_held",
            "1 while the rollout holds because the branch head does not descend from the last "
            "one followed (history rewritten), until gitops-gpu accept-history",
            registry=r,
        )
        self.untrusted_commits = Counter(
            "gitops_gpu_untrusted_commits_total",
            "Commits held back because no trusted key signed them (--verify-signatures), by "
            "reason: unsigned, unknown_key, expired_key, revoked_key, bad_signature, "
            "no_signed_tag, error",
            ["reason"],
            registry=r,
        )

    def watch_api_requests(self, requests: Mapping[str, int]) -> None:
        """Export a kube client's request counter (kube.Client.requests)."""
        self.registry.register(_ApiRequests(requests))

    def set_stage_commit(self, stage: str, commit: str) -> None:
        previous = self._stage_commits.get(stage)
        if previous is not None and previous != commit:
            self.stage_commit.remove(stage, previous)
        self._stage_commits[stage] = commit
        self.stage_commit.labels(stage, commit).set(1)

    def set_gate(self, stage: str, state: str) -> None:
        for known in ("pending", "success", "failure", "error", "none"):
            self.gate.labels(stage, known).set(1 if known == state else 0)

    def set_node_waits(self, waits: Mapping[tuple[str, str, str], float]) -> None:
        """(pool, node, state) -> seconds waited; series of nodes no longer waiting go."""
        for key in self._waiting - set(waits):
            self.node_wait.remove(*key)
        for key, seconds in waits.items():
            self.node_wait.labels(*key).set(seconds)
        self._waiting = set(waits)
