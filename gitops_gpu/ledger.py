"""The controller's ledger: what it saw and decided itself, kept in its own cluster.

The promotion record lives where the fleet's writers can reach it (notes in the fleet repo, a
forge's statuses), so a writer can delete a line as easily as forge one. The ledger is the
controller's second book, one ConfigMap in its namespace (RBAC: only its ServiceAccount may
write ConfigMaps there; docs/trust.md), holding:

- ``verdicts``: the sealed success/failure verdicts it wrote for its own stages (JSON lines).
  A verdict of its own stage counts only when it is here (rollout/authentic.py's merge), so a
  forged or replayed verdict in the record promotes nothing, and a deleted one is restored;
- ``seen``: when it first saw each commit (signature keys are judged at that time);
- ``admitted``: the commits it adopted (trusted and passed preflight then; a later key removal
  does not roll them back, and a commit annotation on a live object proves nothing);
- ``head`` and ``accepted``: the branch head it last followed, and each ``accept-history``.

Everything is bounded to the controller's history window. Writes are PUTs with the
resourceVersion read; a conflict (another writer, e.g. ``accept-history``) re-reads and redoes
the change. The controller watches the ConfigMap (an idle pass reads it from memory); without a
synced watch (a CLI command) it is read with a GET at most every ``REREAD_SECONDS``.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gitops_gpu import kube
from gitops_gpu.errors import KubeError
from gitops_gpu.rollout.seal import Keyring
from gitops_gpu.rollout.status import VERDICTS, CommitStatus

log = logging.getLogger(__name__)
LEDGER_PREFIX = "gitops-gpu-ledger"
REREAD_SECONDS = 30.0
MAX_VERDICTS = 1000  # ~450 KB at most: well inside a ConfigMap's 1 MiB
_ATTEMPTS = 5


class Watched(Protocol):
    """The ledger ConfigMap's watch (sync/live.Informer): what it last saw, once synced."""

    @property
    def synced(self) -> bool: ...

    def get(self, name: str) -> Mapping[str, Any] | None: ...


def ledger_name(cluster: str | None) -> str:
    return LEDGER_PREFIX if cluster is None else f"{LEDGER_PREFIX}-{cluster}"


@dataclass(frozen=True)
class Acceptance:
    sha: str
    by: str
    at: float
    previous: str


@dataclass
class LedgerData:
    verdicts: list[CommitStatus] = field(default_factory=list)
    seen: dict[str, float] = field(default_factory=dict)
    admitted: set[str] = field(default_factory=set)
    head: str = ""
    accepted: list[Acceptance] = field(default_factory=list)

    def to_data(self) -> dict[str, str]:
        lines = "".join(json.dumps(_status_doc(v), sort_keys=True) + "\n" for v in self.verdicts)
        return {
            "verdicts": lines,
            "seen": json.dumps(self.seen, sort_keys=True),
            "admitted": json.dumps(sorted(self.admitted)),
            "head": self.head,
            "accepted": json.dumps([a.__dict__ for a in self.accepted]),
        }


def _status_doc(s: CommitStatus) -> dict[str, Any]:
    return {
        "sha": s.sha,
        "context": s.context,
        "state": str(s.state),
        "description": s.description,
        "created_at": s.created_at,
        "seal": s.seal,
    }


def parse(data: dict[str, str], keys: Keyring | None) -> LedgerData:
    """The ConfigMap's data; unreadable parts and verdicts no trusted key sealed are dropped."""
    out = LedgerData()
    for line in (data.get("verdicts") or "").splitlines():
        try:
            doc = json.loads(line)
            status = CommitStatus(
                sha=str(doc["sha"]),
                context=str(doc["context"]),
                state=str(doc["state"]),
                description=str(doc.get("description", "")),
                created_at=float(doc.get("created_at", 0.0)),
                seal=str(doc.get("seal", "")),
            )
        except (ValueError, KeyError, TypeError):
            log.warning("ledger: skipping an unreadable verdict line")
            continue
        if keys is not None and keys.check(status).signer is None:
            log.warning("ledger: ignoring a verdict on %s no trusted key sealed", status.sha[:12])
            continue
        out.verdicts.append(status)
    out.seen = {str(k): float(v) for k, v in _json(data.get("seen"), {}).items()}
    out.admitted = {str(s) for s in _json(data.get("admitted"), [])}
    out.head = str(data.get("head") or "")
    for doc in _json(data.get("accepted"), []):
        try:
            out.accepted.append(
                Acceptance(str(doc["sha"]), str(doc["by"]), float(doc["at"]), str(doc["previous"]))
            )
        except (KeyError, TypeError, ValueError):
            log.warning("ledger: skipping an unreadable accept-history entry")
    return out


def _json(text: str | None, default: Any) -> Any:
    try:
        value = json.loads(text) if text else default
    except ValueError:
        return default
    return value if isinstance(value, type(default)) else default


class Ledger:
    def __init__(
        self,
        client: kube.Client,
        namespace: str,
        cluster: str | None = None,
        *,
        keys: Keyring | None = None,
        clock: Callable[[], float] = time.monotonic,
        watch: Watched | None = None,
    ) -> None:
        self.client, self.namespace, self.name = client, namespace, ledger_name(cluster)
        self.keys = keys
        self._clock = clock
        self._watch = watch
        self._read_at: float | None = None
        self._version: str | None = None  # "" when the ConfigMap does not exist yet
        # Versions this ledger has read or written: the watch showing one of them again is the
        # watch trailing our own writes, not news (resourceVersions have no order to compare).
        self._passed: deque[str] = deque(maxlen=64)
        self._keys_seen = -1  # how many keys the data was parsed with (the own key joins late)
        self.data = LedgerData()
        self.writes = 0

    # -- reading ----------------------------------------------------------------------------------
    def refresh(self, *, force: bool = False) -> LedgerData:
        """Take up what the watch shows, else read the ConfigMap again when it was read long
        enough ago; ``force`` reads it with a GET (a write conflicted)."""
        watched = not force and self._watch is not None and self._watch.synced
        if watched and self._from_watch():
            return self.data
        now = self._clock()
        if force or self._read_at is None or now - self._read_at >= REREAD_SECONDS:
            self._load()
            self._read_at = now
        return self.data

    def _from_watch(self) -> bool:
        """Adopt the watched ConfigMap when it is news; False when only a GET can tell (the
        watch shows none while we hold one: it trails our create, or it was deleted)."""
        assert self._watch is not None
        cm = self._watch.get(self.name)
        if cm is None:
            if self._version:
                return False
            if self._version is None:
                self.data, self._version = LedgerData(), ""
            return True
        version = str((cm.get("metadata") or {}).get("resourceVersion", ""))
        if version not in self._passed:  # ours are all in there, the current one included
            self._adopt(cm)
        elif self.keys is not None and len(self.keys) != self._keys_seen:
            self._load()  # parse again with the new key; a GET, as the watch may trail us
        return True

    def _load(self) -> None:
        cm = self.client.get("v1", "ConfigMap", self.name, self.namespace)
        if cm is None:
            self.data, self._version = LedgerData(), ""
            return
        self._adopt(cm)

    def _adopt(self, cm: Mapping[str, Any]) -> None:
        self.data = parse(dict(cm.get("data") or {}), self.keys)
        self._keys_seen = len(self.keys) if self.keys is not None else -1
        self._version = str((cm.get("metadata") or {}).get("resourceVersion", ""))
        self._passed.append(self._version)

    # -- writing ----------------------------------------------------------------------------------
    def change(self, edit: Callable[[LedgerData], bool]) -> bool:
        """Apply ``edit`` (True when it changed something) and write; on a conflict, re-read
        and apply it again. True when the ledger was written."""
        if self._version is None:
            self.refresh(force=True)
        for _ in range(_ATTEMPTS):
            if not edit(self.data):
                return False
            try:
                self._put()
                return True
            except KubeError as exc:
                if "409" not in str(exc) and not isinstance(exc, kube.ConflictError):
                    raise
                log.info("ledger %s changed under us; re-reading", self.name)
                self.refresh(force=True)
        raise KubeError(
            f"ledger {self.namespace}/{self.name}: {_ATTEMPTS} conflicting writes in a row",
            fix="another writer keeps changing the ledger ConfigMap: check who (RBAC)",
        )

    def _put(self) -> None:
        obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "gitops-gpu"},
            },
            "data": self.data.to_data(),
        }
        if self._version:
            obj["metadata"]["resourceVersion"] = self._version
            done = self.client.replace(obj)
        else:
            done = self.client.create(obj)
        self._version = str(done["metadata"].get("resourceVersion", ""))
        self._passed.append(self._version)
        self.writes += 1

    # -- the entries ------------------------------------------------------------------------------
    def verdicts(self) -> list[CommitStatus]:
        return list(self.data.verdicts)

    def record_verdict(self, status: CommitStatus) -> bool:
        """Keep a sealed verdict this controller wrote for its own stage."""
        if status.state not in VERDICTS or not status.seal:
            return False

        key = (status.sha, status.context, str(status.state), status.description)

        def edit(d: LedgerData) -> bool:
            if any((v.sha, v.context, str(v.state), v.description) == key for v in d.verdicts):
                return False
            d.verdicts = [*d.verdicts, status][-MAX_VERDICTS:]
            return True

        return self.change(edit)

    def first_seen(self, shas: Iterable[str], now: float) -> dict[str, float]:
        """When each commit was first seen, recording ``now`` for those new to the ledger."""
        new = [s for s in shas if s not in self.data.seen]
        if new:

            def edit(d: LedgerData) -> bool:
                missing = [s for s in new if s not in d.seen]
                d.seen.update(dict.fromkeys(missing, now))
                return bool(missing)

            self.change(edit)
        return dict(self.data.seen)

    def admit(self, sha: str) -> None:
        if sha in self.data.admitted:
            return

        def edit(d: LedgerData) -> bool:
            if sha in d.admitted:
                return False
            d.admitted.add(sha)
            return True

        self.change(edit)

    def set_head(self, sha: str) -> None:
        if self.data.head == sha:
            return

        def edit(d: LedgerData) -> bool:
            if d.head == sha:
                return False
            d.head = sha
            return True

        self.change(edit)

    def accept(self, sha: str, by: str, at: float) -> Acceptance:
        """Record a person's acceptance of a head that does not descend from the last one."""
        entry = Acceptance(sha, by, at, "")

        def edit(d: LedgerData) -> bool:
            nonlocal entry
            entry = Acceptance(sha, by, at, d.head)
            d.accepted = [*d.accepted, entry][-50:]
            return True

        self.change(edit)
        return entry

    def accepted(self, sha: str) -> Acceptance | None:
        return next((a for a in reversed(self.data.accepted) if a.sha == sha), None)

    def forget_except(self, keep: set[str]) -> None:
        """Bound the ledger to the history window (written with the next change)."""
        d = self.data
        if all(s in keep for s in d.seen) and all(v.sha in keep for v in d.verdicts):
            return

        def edit(d: LedgerData) -> bool:
            before = (len(d.seen), len(d.verdicts), len(d.admitted))
            d.seen = {s: t for s, t in d.seen.items() if s in keep}
            d.verdicts = [v for v in d.verdicts if v.sha in keep]
            d.admitted = {s for s in d.admitted if s in keep}
            return before != (len(d.seen), len(d.verdicts), len(d.admitted))

        self.change(edit)
