"""Each commit's preflight verdict, cached by commit for the controller's history window.

A verdict is what the commit's content causes: a bad tree, a finding, any exception at all while
it is read, checked or compiled, or (with --verify-signatures) no trusted signature. An
infrastructure error (git, the apiserver, the CRDs) is not: the commit stays unjudged (None),
nothing is written about it, and the next pass tries again. Preflight checks against the
cluster's own CRDs (refreshed every few minutes) unless ``--crds`` names a directory.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_gpu import events, kube, names
from gitops_gpu.errors import FleetError, GitopsGpuError, KubeError, SourceError
from gitops_gpu.fleet.compiled import CompiledFleet
from gitops_gpu.fleet.export import TreeError
from gitops_gpu.ledger import Ledger
from gitops_gpu.metrics import Metrics
from gitops_gpu.preflight import crd_source, run_preflight
from gitops_gpu.preflight.findings import Finding
from gitops_gpu.sync.source import GitSource, NotFetchedError

if TYPE_CHECKING:
    from gitops_gpu.pass_types import Config

log = logging.getLogger("gitops_gpu.controller")
CRD_REFRESH_SECONDS = 600.0


def first_line(text: str) -> str:
    return (text.splitlines() or [""])[0][:120]


def _where(finding: Finding) -> str:
    return f"{finding.file}:{finding.line}: " if finding.file and finding.line else ""


@dataclass
class CommitVerdict:
    ok: bool
    summary: str
    compiled: CompiledFleet | None


class Verdicts:
    def __init__(
        self,
        cfg: Config,
        client: kube.Client,
        source: GitSource,
        ledger: Ledger,
        metrics: Metrics,
        recorder: events.EventRecorder,
    ) -> None:
        self.cfg, self.client, self.source, self.ledger = cfg, client, source, ledger
        self.metrics, self.recorder = metrics, recorder
        self.cache: dict[str, CommitVerdict] = {}
        self.runs_in_cluster: dict[str, bool] = {}  # untrusted commits -> adopted before?
        # When the controller first saw each commit (the ledger's): keys are judged then.
        self.first_seen: dict[str, float] = {}
        self._crds_fetched: float | None = None

    def checked(self, sha: str) -> CommitVerdict | None:
        """The commit's preflight verdict, or None while it cannot be judged.

        Anything the commit's content causes (a bad tree, a finding, and any exception at all
        while reading, checking or compiling it) is its verdict, cached. An infrastructure
        error (git, the apiserver, the CRDs) is not: the commit stays unjudged, nothing is
        written about it, and the next pass tries again.
        """
        try:
            untrusted = self.untrusted(sha)  # --verify-signatures: before anything else
        except (KubeError, SourceError) as exc:  # not fetched yet; the apiserver
            # (A KEYS that broke while running raises on: the pass fails, loudly.)
            self.metrics.unjudged.inc()
            log.warning("commit %s left unjudged until the next pass: %s", sha[:12], exc)
            return None
        if untrusted is not None:
            return untrusted
        if sha in self.cache:
            return self.cache[sha]
        try:
            crds = self.crds_dir()
            path = self.source.checkout(sha)
        except TreeError as exc:
            verdict = CommitVerdict(False, first_line(f"{exc.file}: {exc.args[0]}"), None)
            self.cache[sha] = verdict
            return verdict
        except NotFetchedError as exc:
            # A live object's commit newer than our last fetch (another writer's apply): the
            # next pass fetches it. Not a fault, so no warning (unlike an unreachable remote).
            self.metrics.unjudged.inc()
            log.info("commit %s judged once fetched: %s", sha[:12], exc.args[0])
            return None
        except (GitopsGpuError, OSError) as exc:
            self.metrics.unjudged.inc()
            log.warning("commit %s left unjudged until the next pass: %s", sha[:12], exc)
            return None
        try:
            result = run_preflight(path, commit=sha, crds_dir=crds, exported=True)
        except FleetError as exc:
            verdict = CommitVerdict(False, first_line(str(exc)), None)
        except (KubeError, SourceError) as exc:
            self.metrics.unjudged.inc()
            log.warning("commit %s left unjudged until the next pass: %s", sha[:12], exc)
            return None
        except Exception as exc:  # repo content must never stop the controller
            log.exception("checking commit %s raised", sha[:12])
            self.metrics.pass_exceptions.labels("preflight").inc()
            verdict = CommitVerdict(False, first_line(f"{type(exc).__name__}: {exc}"), None)
        else:
            errors = [f for f in result.findings if f.severity == "error"]
            summary = (
                f"{len(errors)} errors: {_where(errors[0])}{errors[0].message}"
                if errors
                else f"clean ({len(result.findings)} notes)"
            )
            ok = not errors and result.compiled is not None
            verdict = CommitVerdict(ok, summary[:120], result.compiled if ok else None)
        self.cache[sha] = verdict
        return verdict

    def forget_except(self, keep: set[str]) -> None:
        """Bound the verdict caches to the history window."""
        for sha in [s for s in self.cache if s not in keep]:
            del self.cache[sha]
        for sha in [s for s in self.runs_in_cluster if s not in keep]:
            del self.runs_in_cluster[sha]

    def untrusted(self, sha: str) -> CommitVerdict | None:
        """--verify-signatures, judged on every call (KEYS may have changed): a failed check for
        a commit no trusted key vouches for. A commit this controller adopted before (its
        ledger says so) is not re-judged: it was trusted then, and a removed key must not roll
        it back. A commit annotation on a live object proves nothing: anyone with patch rights
        on one NVIDIADriver could write it."""
        if self.cfg.verifier is None:
            return None
        seen = self.first_seen.get(sha)
        at = datetime.fromtimestamp(seen, UTC) if seen is not None else None
        verdict = self.cfg.verifier.verify(self.source.repo.git_dir, sha, at=at)
        if verdict.trusted:
            return None
        if sha not in self.runs_in_cluster:
            self.runs_in_cluster[sha] = sha in self.ledger.data.admitted
            if not self.runs_in_cluster[sha]:
                message = f"commit {sha[:12]} held back, never applied: {verdict.reason}"
                log.warning("%s", message)
                self.metrics.untrusted_commits.labels(verdict.kind).inc()
                self.recorder.record(
                    *names.CLUSTER_POLICY_API,
                    names.CLUSTER_POLICY_NAME,
                    "UntrustedCommit",
                    message,
                    warning=True,
                )
            else:
                log.warning(
                    "commit %s was adopted before: not re-judged (%s)", sha[:12], verdict.reason
                )
        if self.runs_in_cluster[sha]:
            return None
        return CommitVerdict(False, f"untrusted commit: {verdict.reason}"[:120], None)

    def crds_dir(self) -> Path:
        """The CRD schemas preflight checks against: ``--crds`` if given, else the cluster's own
        ClusterPolicy and NVIDIADriver CRDs (an operator upgrade that changed them is seen)."""
        if self.cfg.crds_dir is not None:
            return self.cfg.crds_dir
        now = time.monotonic()
        if self._crds_fetched is None or now - self._crds_fetched > CRD_REFRESH_SECONDS:
            self.fetch_crds()
            self._crds_fetched = now
        return self.cfg.cache_dir / "crds"

    def fetch_crds(self) -> None:
        if crd_source.fetch(self.client, self.cfg.cache_dir / "crds"):
            self.cache.clear()  # verdicts were against other schemas

    def compiled_for(self, sha: str) -> CompiledFleet | None:
        verdict = self.checked(sha)
        return verdict.compiled if verdict is not None else None
