"""Live reader: the objects gitops-gpu manages and the nodes, with list+watch caches.

An informer LISTs once (in pages, so 5,000 nodes never sit in memory whole) and then follows
a watch, so a steady-state pass reads nodes from memory; a watch that expires (410 Gone) or
breaks re-lists, which is the only other LIST. It keeps a projection of each object
(:mod:`slim`), and an event whose projection is unchanged (a kubelet heartbeat) is not a
change: ``version`` does not move, so passes reuse what they computed. A cached NodeGPUReport
also carries when the controller saw its content last change (``names.REPORT_SEEN_KEY``), so
a report that stopped changing ages whatever its observedAt says. Each change is also
logged by key (:class:`ChangeLog`), so a pass can ask which objects changed since the last one
and redo only their work.
"""

from __future__ import annotations

import bisect
import copy
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gitops_gpu import names, osthread
from gitops_gpu.errors import KubeError
from gitops_gpu.sync import line_beats, slim

if TYPE_CHECKING:  # the client's HTTP stack is not needed to judge nodes (preflight)
    from gitops_gpu import kube

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MANAGED_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}"
LIST_PAGE = 500  # objects per LIST page: bounds the parse's peak memory at start
# Changes kept in an informer's log; past it the older half is dropped, and a reader further
# behind than what is left is told "unknown" (and redoes everything).
LOG_MAX = 16384
LogKey = Callable[[Obj], str | None]
# Seconds a watch lets events gather between reads: at 5,000 nodes the reports' heartbeats
# arrive ~40 a second, and waking for each one cost more than handling it. A pass (every few
# seconds) sees an event at most this much later.
WATCH_COALESCE = 0.2
# Kinds whose cached objects carry ``names.REPORT_SEEN_KEY``, the controller's time their content
# last changed: a NodeGPUReport's age must not rest on the observedAt it claims alone.
SEEN_KINDS = frozenset({names.NODE_GPU_REPORT_API[1]})


def _utcnow() -> datetime:
    return datetime.now(UTC)


def node_ready(node: Mapping[str, Any]) -> bool:
    """The node's Ready condition is True (a node without one is not Ready)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_node(pod: Mapping[str, Any]) -> str | None:
    """A pod's node: the key pod changes are logged by (a pass asks which nodes' pods moved)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class ChangeLog:
    """An informer's change log as it stood at one moment: which keys (names, or what the
    informer logs by) changed after an earlier view. The list is shared with the informer,
    which only appends to it or replaces it (a trim, a re-list), so a view never changes."""

    source: object  # the log's identity: a new one after a re-list
    version: int  # the informer's version at this view
    entries: list[tuple[int, str]]  # (version, key), ascending
    end: int  # entries[:end] were there at this view
    floor: int  # changes at versions <= floor are no longer (or never were) in the log

    def since(self, earlier: ChangeLog | None) -> frozenset[str] | None:
        """Keys changed after ``earlier`` up to this view; None when that is not known (no
        earlier view, another log, or one further back than the log reaches)."""
        if earlier is None or earlier.source is not self.source or earlier.version < self.floor:
            return None
        start = bisect.bisect_right(self.entries, earlier.version, 0, self.end, key=_version)
        return frozenset(key for _v, key in self.entries[start : self.end])


def _version(entry: tuple[int, str]) -> int:
    return entry[0]


class Informer:
    """Objects of one kind by name, kept current by list+watch in a daemon thread.
    ``log_by``: the key a change is logged under (default: the object's name)."""

    def __init__(
        self,
        client: kube.Client,
        api_version: str = "v1",
        kind: str = "Node",
        *,
        label_selector: str = "",
        field_selector: str = "",
        namespace: str | None = None,
        watch_timeout: int = 300,
        log_by: LogKey | None = None,
        coalesce: float = WATCH_COALESCE,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.client = client
        self._clock = clock
        self._stamp = kind in SEEN_KINDS
        self.coalesce = coalesce
        self.api_version, self.kind, self.label_selector = api_version, kind, label_selector
        self.field_selector = field_selector
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self._items: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._project = slim.for_kind(kind)
        self._heartbeat = slim.HEARTBEATS.get(kind)
        # Nodes: a kubelet's status heartbeat is told from the line's bytes (sync/line_beats).
        self.line_beats = line_beats.LineBeats(self._cached) if kind == "Node" else None
        self.lists = 0
        self.version = 0  # bumped on every change, so callers can skip work when idle
        self.events = 0  # watch events received
        self.changes = 0  # of those, events that changed a projection
        self._log_by = log_by
        self._log: list[tuple[int, str]] = []
        self._log_source = object()
        self._log_floor = 0

    def _cached(self, name: str) -> Obj | None:
        return self._items.get(name)  # the watch thread's own read (a re-list replaces the dict)

    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.kind}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def synced(self) -> bool:
        """Listed, and its watch not stopped."""
        return self._synced.is_set() and not self._stop.is_set()

    def wait_synced(self, timeout: float = 30) -> None:
        if not self._synced.wait(timeout):
            raise KubeError(
                f"{self.kind} cache did not sync", fix="check the apiserver is reachable"
            )

    def items(self) -> list[Obj]:
        self.wait_synced()
        with self._lock:
            return list(self._items.values())

    def by_name(self) -> dict[str, Obj]:
        self.wait_synced()
        with self._lock:
            return dict(self._items)

    def get(self, name: str) -> Obj | None:
        self.wait_synced()
        with self._lock:
            return self._items.get(name)

    def change_log(self) -> ChangeLog:
        """The change log as it stands (take it before reading the items: a change racing
        the read then shows in the next view too)."""
        with self._lock:
            log = self._log
            return ChangeLog(self._log_source, self.version, log, len(log), self._log_floor)

    def _logged(self, old: Obj | None, new: Obj | None) -> None:
        """Log one change at the current version (lock held)."""
        keys = {self._key(o) for o in (old, new) if o is not None}
        for key in sorted(k for k in keys if k is not None):
            self._log.append((self.version, key))
        if len(self._log) > LOG_MAX:
            kept = self._log[len(self._log) // 2 :]
            self._log, self._log_floor = kept, kept[0][0] - 1

    def _key(self, obj: Obj) -> str | None:
        if self._log_by is not None:
            return self._log_by(obj)
        return str(obj["metadata"]["name"])

    def _list(self) -> str:
        items: dict[str, Obj] = {}
        cont = ""
        while True:
            page = self.client.list(
                self.api_version,
                self.kind,
                namespace=self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=LIST_PAGE,
                continue_token=cont,
                decode=slim.list_decoder(self.kind),
            )
            for obj in page.pop("items"):
                items[obj["metadata"]["name"]] = self._project(obj)
            cont = str(page["metadata"].get("continue") or "")
            if not cont:
                break
        if self._stamp:
            # A re-list is no news of an object it finds unchanged: that keeps its stamp.
            now = self._clock()
            for name, obj in items.items():
                old = self._items.get(name)  # only this thread writes _items
                if old is not None and slim.same_facts(old, obj):
                    obj[names.REPORT_SEEN_KEY] = old.get(names.REPORT_SEEN_KEY, now)
                else:
                    obj[names.REPORT_SEEN_KEY] = now
        self.lists += 1
        with self._lock:
            self._items = items
            self.version += 1
            # Everything may have changed: readers of the old log are told "unknown".
            self._log, self._log_source, self._log_floor = [], object(), self.version
        self._synced.set()
        return str(page["metadata"]["resourceVersion"])

    def _run(self) -> None:
        osthread.name_current(f"w-{self.kind}")  # 15 bytes: w-NodeGPUReport
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                decode = slim.event_decoder(self.kind) or json.loads
                if self.line_beats is not None:
                    decode = self.line_beats.decoder(decode)
                for event in self.client.watch(
                    self.api_version,
                    self.kind,
                    resource_version=rv,
                    # client-go's reflector: a random timeout in [watch_timeout, twice that),
                    # so the watches renew apart, not in one burst (each renewal is a request).
                    timeout_seconds=int(self.watch_timeout * (1 + random.random())),
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    namespace=self.namespace,
                    decode=decode,
                    coalesce=self.coalesce,
                ):
                    if self._stop.is_set():
                        return
                    rv = self._apply_event(event, rv)
            except KubeError as exc:
                if self._stop.is_set():
                    return  # stopped while the watch was open: its end is ours, not news
                log.warning("%s watch failed, re-listing: %s", self.kind, exc)
                rv = ""
                time.sleep(1)

    def _projected(self, name: str, obj: Obj) -> Obj:
        old = self._items.get(name)
        if self._heartbeat is not None and old is not None:
            beat = self._heartbeat(old, obj)
            if beat is not None:
                return beat
        return self._project(obj)

    def _apply_event(self, event: Obj, rv: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            # 410 Gone: our resourceVersion is too old; list again.
            return ""
        new_rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
        if kind == "BOOKMARK":
            return new_rv
        self.events += 1
        if kind == line_beats.BEAT:  # the line said nothing but its times changed
            return new_rv
        name = obj["metadata"]["name"]
        new = None if kind == "DELETED" else self._projected(name, obj)
        with self._lock:
            old = self._items.get(name)
            if new is None:
                if self._items.pop(name, None) is None:
                    return new_rv
            elif old is not None and slim.same_facts(old, new):
                line_beats.LineBeats.remember(event, old)
                return new_rv  # keeps the old resourceVersion: memos keyed on it stay valid
            else:
                line_beats.LineBeats.remember(event, new)
                if self._stamp:  # a change, observedAt included: seen now
                    new[names.REPORT_SEEN_KEY] = self._clock()
                self._items[name] = new
            self.version += 1
            self.changes += 1
            self._logged(old, new)
        return new_rv


# A managed LIST is reused while its kind's watch saw no event, at most this long: about a
# watch's own renewal period (a watch that failed re-lists by itself; issue 32: the LIST a
# minute was a twelfth of an idle controller's requests).
MANAGED_MAX_AGE = 300.0


NamedKey = tuple[str, str, str, str | None]  # api_version, kind, name, namespace


def _rv(obj: Obj | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


class LiveReader:
    """Reads managed objects; nodes from an Informer when one is given, else one LIST.

    ``watches``: per (api_version, kind), an Informer of the managed objects used as a change
    detector: while it is synced and saw no event since the last LIST, ``managed`` returns that
    LIST again (at 125 pools the NVIDIADriver LIST was half an idle pass's CPU). Anything that
    changed them, our own writes included (``wrote``), means a fresh LIST. The objects are
    shared between calls: read them, do not modify them.

    ``named``: per (api_version, kind, name, namespace), an Informer that holds that one object
    (a field selector on its name): ``get`` answers from it while it is synced, so an idle pass
    GETs nothing. After our own writes (``wrote``) it GETs until the watch has moved on."""

    def __init__(
        self,
        client: kube.Client,
        node_cache: Informer | None = None,
        watches: Mapping[tuple[str, str], Informer] | None = None,
        named: Mapping[NamedKey, Informer] | None = None,
    ) -> None:
        self.client = client
        self.node_cache = node_cache
        self.watches = dict(watches or {})
        self.named = dict(named or {})
        self._listed: dict[tuple[str, str], tuple[int, float, dict[str, Obj]]] = {}
        self._wrote_at: dict[NamedKey, int] = {}  # the watch's version when we last wrote

    def wrote(self) -> None:
        """We changed managed objects: the next ``managed`` LISTs, and ``get`` asks the server
        until each named watch has seen a change."""
        self._listed.clear()
        self._wrote_at = {key: inf.version for key, inf in self.named.items()}

    def nodes(self) -> list[Obj]:
        if self.node_cache is not None:
            return self.node_cache.items()
        items: list[Obj] = self.client.list("v1", "Node")["items"]
        return items

    def managed(self, api_version: str, kind: str) -> dict[str, Obj]:
        watch = self.watches.get((api_version, kind))
        version = watch.version if watch is not None and watch.synced else None  # read first
        now = time.monotonic()
        last = self._listed.get((api_version, kind))
        if version is not None and last is not None:
            seen, at, objs = last
            if seen == version and now - at < MANAGED_MAX_AGE:
                return dict(objs)
        items = self.client.list(
            api_version, kind, label_selector=MANAGED_SELECTOR, decode=slim.OBJECT_LIST
        )["items"]
        objs = {o["metadata"]["name"]: o for o in items}
        if version is not None:
            self._listed[(api_version, kind)] = (version, now, objs)
        return dict(objs)

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        key = (api_version, kind, name, namespace)
        watch = self.named.get(key)
        if watch is None or not watch.synced:
            return self.client.get(api_version, kind, name, namespace)
        if self._wrote_at.get(key) == watch.version:  # we wrote; the watch may trail it
            live = self.client.get(api_version, kind, name, namespace)
            if _rv(live) == _rv(watch.get(name)):
                self._wrote_at.pop(key)  # the watch holds what the server holds
            return live
        self._wrote_at.pop(key, None)
        found = watch.get(name)
        return copy.deepcopy(found) if found is not None else None
