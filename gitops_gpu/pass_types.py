"""What a controller pass is given (:class:`Config`) and what it reports (:class:`PassReport`).

Apart from the controller that runs passes, the executor and the verdicts read these: here
they import nothing of ours at run time, so no module needs the controller's wiring to name
them (an import-linter contract in ``make check`` keeps it so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from gitops_gpu.rollout.seal import SealKey, TrustedKey
    from gitops_gpu.rollout.status import CommitStatus
    from gitops_gpu.sync.trust import Verifier


@dataclass
class Config:
    repo: str
    cache_dir: Path
    branch: str = "main"
    interval: float = 30.0
    history: int = 20
    namespace: str = "default"  # Lease, Events and the control ConfigMap
    operator_namespace: str = "gpu-operator"
    crds_dir: Path | None = None
    status_backend: str = "gitnotes"
    status_token_file: Path | None = None
    # --verify-signatures: a commit no trusted key vouches for fails preflight before anything
    # else (docs/trust.md).
    verifier: Verifier | None = None
    # gate.smokeTest Jobs run here (default: ``namespace``); gate.metrics query this Prometheus.
    smoke_namespace: str | None = None
    prometheus_url: str | None = None
    # --cluster: the one cluster of a multi-cluster fleet this controller manages (its pools,
    # its ClusterPolicy, its part of each stage; rollout/span.py). None: a one-cluster fleet.
    cluster: str | None = None
    # The record's seal (sealed.py): --record-key, else the Secret in ``namespace``; the
    # other controllers whose seals count. ``seal_key``/``trusted``: keys already loaded.
    record_key: Path | None = None
    record_trusted_keys: Path | None = None
    seal_key: SealKey | None = None
    trusted: tuple[TrustedKey, ...] = ()
    record_key_create: bool = True  # False: the key must exist (a person's one-shot command)
    # GitopsGpuNodeHeldByWorkload fires past this wait (the metric carries it to the rule).
    node_wait_alert_after: float = 6 * 3600.0
    # --pull-requests: check open pull requests on the status backend's forge (pull_requests.py).
    pull_requests: bool = False


@dataclass
class PassReport:
    result: str = "ok"  # ok | error | standby | paused | held
    head: str | None = None
    held: str = ""  # why nothing is adopted (history rewritten)
    actions: list[object] = field(default_factory=list)
    applied: int = 0
    statuses_written: int = 0
    written: list[CommitStatus] = field(default_factory=list)  # the statuses, in order
    error: str = ""
