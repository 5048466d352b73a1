"""The controller's side of the promotion record: it seals what it writes, keeps its own
verdicts in the ledger, and reads back only what counts (docs/trust.md, "Sealed record").

The seal key is ``--record-key`` (a mounted Secret), else the Secret ``gitops-gpu-record-key``
in the controller's namespace, created with a new key on first start. The controller trusts its
own key and those of ``--record-trusted-keys`` (the other clusters' controllers, a key being
rotated out).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gitops_gpu import events, kube, names
from gitops_gpu.errors import KubeError
from gitops_gpu.fleet.compiled import StageSpec
from gitops_gpu.ledger import Ledger
from gitops_gpu.metrics import Metrics
from gitops_gpu.rollout.authentic import (
    NOT_IN_LEDGER,
    Approvers,
    Authenticator,
    Ignored,
    Judged,
    with_ledger,
)
from gitops_gpu.rollout.forge import ForgeBackend
from gitops_gpu.rollout.seal import (
    FIX_KEYS,
    Keyring,
    SealKey,
    SealKeyError,
    TrustedKey,
    generate,
    load_private,
    load_private_file,
    parse_public_keys,
)
from gitops_gpu.rollout.status import (
    APPROVAL_CONTEXT_PREFIX,
    PREFLIGHT_CONTEXT,
    STAGE_CONTEXT_PREFIX,
    CommitStatus,
    StatusBackend,
    read_record,
)

log = logging.getLogger("gitops_gpu.controller")
KEY_SECRET = "gitops-gpu-record-key"
_SECRET_KEY = "ed25519"
_SEEN_MAX = 20000


def key_secret(namespace: str, key: SealKey) -> dict[str, object]:
    """The Secret that holds ``key`` (what a platform team provisions for several clusters)."""
    body = base64.b64encode(key.private_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": KEY_SECRET, "namespace": namespace},
        "type": "Opaque",
        "data": {_SECRET_KEY: body},
    }


def secret_key(client: kube.Client, namespace: str, *, create: bool = True) -> SealKey:
    """The seal key from the controller's Secret; created (with a new key) when missing."""
    name = f"gitops-gpu/{namespace}"
    secret = client.get("v1", "Secret", KEY_SECRET, namespace)
    if secret is None and create:
        key = generate(name)
        try:
            client.create(key_secret(namespace, key))
            log.warning(
                "created the record seal key Secret %s/%s (public key %s)",
                namespace,
                KEY_SECRET,
                key.public_line(),
            )
            return key
        except KubeError:
            secret = client.get("v1", "Secret", KEY_SECRET, namespace)  # a replica raced us
    if secret is None:
        raise KubeError(
            f"no Secret {namespace}/{KEY_SECRET}: the controller makes it on its first start",
            fix="pass the controller's --namespace (or --record-key), or start it first",
        )
    data = (secret.get("data") or {}).get(_SECRET_KEY)
    if not data:
        raise KubeError(
            f"Secret {namespace}/{KEY_SECRET} has no data.{_SECRET_KEY}",
            fix=f"delete it to have a new key made, or put an ed25519 key under {_SECRET_KEY}",
        )
    return load_private(base64.b64decode(data), f"Secret {namespace}/{KEY_SECRET}", name)


def load_key(
    client: kube.Client, namespace: str, key_file: Path | None, *, create: bool = True
) -> SealKey:
    """``--record-key``, else the Secret (made when missing and ``create``)."""
    if key_file is not None:
        return load_private_file(key_file, f"gitops-gpu/{key_file.name}")
    return secret_key(client, namespace, create=create)


def own_key(key: SealKey) -> list[TrustedKey]:
    return parse_public_keys(key.public_line(), "the controller's own key")


def load_trusted_file(path: Path | None) -> list[TrustedKey]:
    if path is None:
        return []
    try:
        text = path.read_text()
    except OSError as exc:
        raise SealKeyError(
            f"{path}: cannot read trusted keys: {exc.strerror}", fix=FIX_KEYS
        ) from None
    return parse_public_keys(text, str(path))


def _kind(context: str) -> str:
    if context.startswith(STAGE_CONTEXT_PREFIX):
        return "stage"
    if context.startswith(APPROVAL_CONTEXT_PREFIX):
        return "approval"
    return "preflight" if context == PREFLIGHT_CONTEXT else "other"


class SealedRecord:
    def __init__(
        self,
        backend: StatusBackend,
        key: SealKey | Callable[[], SealKey],
        auth: Authenticator,
        ledger: Ledger | None,
        *,
        metrics: Metrics | None = None,
        recorder: events.EventRecorder | None = None,
    ) -> None:
        self.backend, self.auth, self.ledger = backend, auth, ledger
        # A key from a Secret is read at the first pass, not at construction: a controller
        # that must refuse its --cluster says so before it reaches the apiserver.
        self._key: SealKey | None = None
        self._load: Callable[[], SealKey] | None = None
        if isinstance(key, SealKey):
            self._use(key)
        else:
            self._load = key
        self.metrics, self.recorder = metrics, recorder
        self.own: Callable[[str], bool] = lambda context: context.startswith(STAGE_CONTEXT_PREFIX)
        if auth.membership is None and isinstance(backend, ForgeBackend):
            self.auth = Authenticator(auth.controllers, auth.approvers, backend.in_team)
        backend.trust = self.auth.trusted  # a forged latest status never makes a write redundant
        self.ignored: list[Ignored] = []  # the last read's, for `status`
        self._reported: set[str] = set()  # ignored statuses already counted and raised

    def _use(self, key: SealKey) -> None:
        self._key = key
        self.auth.controllers.add(own_key(key))

    @property
    def key(self) -> SealKey:
        if self._key is None:
            assert self._load is not None
            self._use(self._load())
        assert self._key is not None
        return self._key

    def set_approvers(self, approvers: Mapping[str, Approvers]) -> None:
        self.auth = self.auth.with_approvers(approvers)
        self.backend.trust = self.auth.trusted

    # -- writing ----------------------------------------------------------------------------------
    def write(self, status: CommitStatus, *, key: SealKey | None = None) -> bool:
        """Seal ``status`` (with ``key``, else the controller's) and write it; an own stage's
        verdict goes to the ledger first, so no verdict is ever in the record that the ledger
        would not vouch for."""
        sealed = (key or self.key).seal(status)
        if self.ledger is not None and self.own(sealed.context):
            self.ledger.record_verdict(sealed)
        return self.backend.set_status(sealed)

    # -- reading ----------------------------------------------------------------------------------
    def read(self, shas: Sequence[str]) -> Judged:
        _ = self.key  # loaded first: our own seals must verify
        judged = self.auth.judge(read_record(self.backend, shas))
        if self.ledger is not None:
            merged, restore = self._merge(judged, shas)
            if any(i.reason == NOT_IN_LEDGER for i in merged.ignored):
                # Another writer (`gitops-gpu rollback`) may have added it since our last read.
                self.ledger.refresh(force=True)
                merged, restore = self._merge(judged, shas)
            judged = merged
            for status in restore:
                self._restore(status)
        self.ignored = judged.ignored
        self._report(judged.ignored)
        return judged

    def _merge(self, judged: Judged, shas: Sequence[str]) -> tuple[Judged, list[CommitStatus]]:
        assert self.ledger is not None
        window = set(shas)
        mine = [v for v in self.ledger.verdicts() if v.sha in window]
        return with_ledger(judged, mine, self.own)

    def _restore(self, status: CommitStatus) -> None:
        try:
            wrote = self.backend.set_status(status)
        except Exception as exc:  # the ledger still counts it; the next pass tries again
            log.warning("could not restore %s on %s: %s", status.context, status.sha[:12], exc)
            return
        if wrote:
            log.warning(
                "restored %s %s on %s from the ledger (it was removed from the record)",
                status.context,
                status.state,
                status.sha[:12],
            )
            if self.metrics is not None:
                self.metrics.record_restored.inc()

    def _report(self, ignored: Sequence[Ignored]) -> None:
        for item in ignored:
            s = item.status
            ident = f"{s.sha}|{s.context}|{s.state}|{s.description}|{s.seal}|{s.creator}"
            if ident in self._reported:
                continue
            if len(self._reported) >= _SEEN_MAX:
                self._reported.clear()
            self._reported.add(ident)
            message = f"ignored {s.context} {s.state} on {s.sha[:12]}: {item.reason}" + (
                f" (posted by {s.creator})" if s.creator else ""
            )
            log.warning("record: %s", message)
            if self.metrics is not None:
                self.metrics.record_ignored.labels(_kind(s.context)).inc()
            if self.recorder is not None:
                try:
                    self.recorder.record(
                        *names.CLUSTER_POLICY_API,
                        names.CLUSTER_POLICY_NAME,
                        "RecordStatusIgnored",
                        message,
                        warning=True,
                    )
                except KubeError as exc:
                    log.warning("could not raise the Event: %s", exc)


def stage_approvers(stages: Sequence[StageSpec]) -> dict[str, Approvers]:
    """Each stage's approvers as the fleet names them (preflight checked the keys)."""
    out: dict[str, Approvers] = {}
    for stage in stages:
        gate = stage.gate
        keys = [k for line in gate.approver_keys for k in parse_public_keys(line, stage.name)]
        out[stage.name] = Approvers(
            frozenset(gate.approvers),
            Keyring(keys) if keys else None,
            frozenset(gate.approver_teams),
        )
    return out
