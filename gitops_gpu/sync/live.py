"""Live reader: the objects gitops-gpu manages and the nodes, with list+watch caches.

An informer LISTs once (in pages, so 5,000 nodes never sit in memory whole) and then follows
a watch, so a steady-state pass reads nodes from memory; a watch that expires (410 Gone) or
breaks re-lists, which is the only other LIST. It keeps a projection of each object
(:mod:`slim`), and an event whose projection is unchanged (a kubelet heartbeat) is not a
change: ``version`` does not move, so passes reuse what they computed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.errors import KubeError
from gitops_gpu.sync import slim

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MANAGED_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}"
LIST_PAGE = 500  # objects per LIST page: bounds the parse's peak memory at start


def node_ready(node: Mapping[str, Any]) -> bool:
    """The node's Ready condition is True (a node without one is not Ready)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class Informer:
    """Objects of one kind by name, kept current by list+watch in a daemon thread."""

    def __init__(
        self,
        client: kube.Client,
        api_version: str = "v1",
        kind: str = "Node",
        *,
        label_selector: str = "",
        namespace: str | None = None,
        watch_timeout: int = 300,
    ) -> None:
        self.client = client
        self.api_version, self.kind, self.label_selector = api_version, kind, label_selector
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self._items: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._project = slim.for_kind(kind)
        self.lists = 0
        self.version = 0  # bumped on every change, so callers can skip work when idle
        self.events = 0  # watch events received
        self.changes = 0  # of those, events that changed a projection

    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.kind}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait_synced(self, timeout: float = 30) -> None:
        if not self._synced.wait(timeout):
            raise KubeError(
                f"{self.kind} cache did not sync", fix="check the apiserver is reachable"
            )

    def items(self) -> list[Obj]:
        self.wait_synced()
        with self._lock:
            return list(self._items.values())

    def get(self, name: str) -> Obj | None:
        self.wait_synced()
        with self._lock:
            return self._items.get(name)

    def _list(self) -> str:
        items: dict[str, Obj] = {}
        cont = ""
        while True:
            page = self.client.list(
                self.api_version,
                self.kind,
                namespace=self.namespace,
                label_selector=self.label_selector,
                limit=LIST_PAGE,
                continue_token=cont,
                decode=slim.list_decoder(self.kind),
            )
            for obj in page.pop("items"):
                items[obj["metadata"]["name"]] = self._project(obj)
            cont = str(page["metadata"].get("continue") or "")
            if not cont:
                break
        self.lists += 1
        with self._lock:
            self._items = items
            self.version += 1
        self._synced.set()
        return str(page["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                for event in self.client.watch(
                    self.api_version,
                    self.kind,
                    resource_version=rv,
                    timeout_seconds=self.watch_timeout,
                    label_selector=self.label_selector,
                    namespace=self.namespace,
                    decode=slim.event_decoder(self.kind),
                ):
                    if self._stop.is_set():
                        return
                    rv = self._apply_event(event, rv)
            except KubeError as exc:
                log.warning("%s watch failed, re-listing: %s", self.kind, exc)
                rv = ""
                time.sleep(1)

    def _apply_event(self, event: Obj, rv: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            # 410 Gone: our resourceVersion is too old; list again.
            return ""
        new_rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
        if kind == "BOOKMARK":
            return new_rv
        name = obj["metadata"]["name"]
        self.events += 1
        new = None if kind == "DELETED" else self._project(obj)
        with self._lock:
            old = self._items.get(name)
            if new is None:
                if self._items.pop(name, None) is None:
                    return new_rv
            elif old is not None and slim.same_facts(old, new):
                return new_rv  # keeps the old resourceVersion: memos keyed on it stay valid
            else:
                self._items[name] = new
            self.version += 1
            self.changes += 1
        return new_rv


class LiveReader:
    """Reads managed objects; nodes from an Informer when one is given, else one LIST."""

    def __init__(self, client: kube.Client, node_cache: Informer | None = None) -> None:
        self.client = client
        self.node_cache = node_cache

    def nodes(self) -> list[Obj]:
        if self.node_cache is not None:
            return self.node_cache.items()
        items: list[Obj] = self.client.list("v1", "Node")["items"]
        return items

    def managed(self, api_version: str, kind: str) -> dict[str, Obj]:
        items = self.client.list(
            api_version, kind, label_selector=MANAGED_SELECTOR, decode=slim.OBJECT_LIST
        )["items"]
        return {o["metadata"]["name"]: o for o in items}

    def get(self, api_version: str, kind: str, name: str) -> Obj | None:
        return self.client.get(api_version, kind, name)
