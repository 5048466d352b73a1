"""Live reader: the objects gitops-gpu manages and the nodes, with list+watch caches.

An informer LISTs once and then follows a watch, so a steady-state pass reads nodes from
memory; a watch that expires (410 Gone) or breaks re-lists, which is the only other LIST.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from gitops_gpu import kube, names
from gitops_gpu.errors import KubeError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MANAGED_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}"


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
        self.lists = 0
        self.version = 0  # bumped on every change, so callers can skip work when idle

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

    @staticmethod
    def _trim(obj: Obj) -> Obj:
        # managedFields are often the bulk of a node; nothing reads them from the cache.
        obj.get("metadata", {}).pop("managedFields", None)
        return obj

    def _list(self) -> str:
        listed = self.client.list(
            self.api_version,
            self.kind,
            namespace=self.namespace,
            label_selector=self.label_selector,
        )
        self.lists += 1
        with self._lock:
            self._items = {n["metadata"]["name"]: self._trim(n) for n in listed["items"]}
            self.version += 1
        self._synced.set()
        return str(listed["metadata"]["resourceVersion"])

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
        with self._lock:
            if kind == "DELETED":
                self._items.pop(name, None)
            else:
                self._items[name] = self._trim(obj)
            self.version += 1
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
        items = self.client.list(api_version, kind, label_selector=MANAGED_SELECTOR)["items"]
        return {o["metadata"]["name"]: o for o in items}

    def get(self, api_version: str, kind: str, name: str) -> Obj | None:
        return self.client.get(api_version, kind, name)
