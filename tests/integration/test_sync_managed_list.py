"""LiveReader.managed on the real apiserver: the managed NVIDIADriver LIST is made again only
when its watch saw an event (anyone's write) or we wrote; an idle read makes no request."""

from __future__ import annotations

import time
import uuid

from gitops_gpu import kube, names
from gitops_gpu.sync.live import MANAGED_SELECTOR, Informer, LiveReader
from gitops_gpu_dev.testbed.session import Testbed


def _driver(name: str) -> dict[str, object]:
    return {
        "apiVersion": names.NVIDIA_DRIVER_API[0],
        "kind": names.NVIDIA_DRIVER_API[1],
        "metadata": {
            "name": name,
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
        },
        "spec": {"driverType": "gpu", "version": "580.126.20", "image": "driver"},
    }


def _lists(client: kube.Client) -> int:
    return sum(
        v
        for k, v in client.requests.items()
        if k.startswith("GET ") and k.endswith("/nvidiadrivers")
    )


def test_an_idle_read_lists_nothing_and_any_write_lists_again(testbed: Testbed) -> None:
    name = f"managed-{uuid.uuid4().hex[:6]}"
    client = kube.Client.from_kubeconfig(testbed.kubeconfig)
    watch = Informer(
        client, *names.NVIDIA_DRIVER_API, label_selector=MANAGED_SELECTOR, coalesce=0.0
    ).start()
    reader = LiveReader(client, watches={names.NVIDIA_DRIVER_API: watch})
    testbed.client.apply(_driver(name), field_manager="test")
    try:
        watch.wait_synced()
        deadline = time.monotonic() + 10
        while watch.get(name) is None:  # the create's event
            assert time.monotonic() < deadline, "the watch never saw the driver"
            time.sleep(0.05)
        assert name in reader.managed(*names.NVIDIA_DRIVER_API)
        before = _lists(client)
        for _ in range(3):
            assert name in reader.managed(*names.NVIDIA_DRIVER_API)
        assert _lists(client) == before  # idle: no request at all
        # Someone else's write: seen by the watch, so the next read LISTs and sees it.
        version = watch.version
        testbed.client.patch(*names.NVIDIA_DRIVER_API, name, {"metadata": {"labels": {"x": "y"}}})
        while watch.version == version:
            assert time.monotonic() < deadline + 10, "the watch never saw the patch"
            time.sleep(0.05)
        got = reader.managed(*names.NVIDIA_DRIVER_API)[name]
        assert got["metadata"]["labels"]["x"] == "y" and _lists(client) == before + 1
        # Our own write: LISTed again even before the watch reports it.
        reader.wrote()
        reader.managed(*names.NVIDIA_DRIVER_API)
        assert _lists(client) == before + 2
        # Without a synced watch (stopped): every read LISTs, as before there were watches.
        watch.stop()
        reader.managed(*names.NVIDIA_DRIVER_API)
        reader.managed(*names.NVIDIA_DRIVER_API)
        assert _lists(client) == before + 4
    finally:
        watch.stop()
        testbed.client.delete(*names.NVIDIA_DRIVER_API, name)
        client.close()


def _gets(client: kube.Client, name: str) -> int:
    return sum(v for k, v in client.requests.items() if k.startswith("GET ") and k.endswith(name))


def _cm(name: str, value: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": value},
    }


def _until(what: str, pred: object, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_named_object_is_read_from_its_watch_and_asked_for_after_our_write(
    testbed: Testbed,
) -> None:
    name, other = f"built-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    client = kube.Client.from_kubeconfig(testbed.kubeconfig)
    selector = f"metadata.name={name}"
    watch = Informer(
        client, "v1", "ConfigMap", namespace="default", field_selector=selector, coalesce=0.0
    ).start()
    reader = LiveReader(client, named={("v1", "ConfigMap", name, "default"): watch})
    try:
        watch.wait_synced()
        assert reader.get("v1", "ConfigMap", name, "default") is None  # absent, from the cache
        assert _gets(client, name) == 0
        testbed.client.apply(_cm(name, "1"), field_manager="test")
        testbed.client.apply(_cm(other, "1"), field_manager="test")  # not this watch's
        _until("the watch sees the create", lambda: watch.get(name) is not None)
        for _ in range(3):
            assert reader.get("v1", "ConfigMap", name, "default")["data"] == {"k": "1"}
        assert _gets(client, name) == 0 and watch.get(other) is None
        # someone's data change is news to the watch (same_facts compares data)
        testbed.client.apply(_cm(name, "2"), field_manager="test")
        _until("the data change", lambda: (watch.get(name) or {}).get("data") == {"k": "2"})
        # our own write (the engine says so first): never read older than it, from the server
        # until the watch has moved on or holds what the server holds
        reader.wrote()
        client.apply(_cm(name, "3"), field_manager="test")
        assert reader.get("v1", "ConfigMap", name, "default")["data"] == {"k": "3"}
        assert _gets(client, name) <= 1
        _until("the watch sees our write", lambda: watch.get(name)["data"] == {"k": "3"})
        reader.get("v1", "ConfigMap", name, "default")  # agrees: the last GET
        gets = _gets(client, name)
        for _ in range(3):
            assert reader.get("v1", "ConfigMap", name, "default")["data"] == {"k": "3"}
        assert _gets(client, name) == gets
        # the cached object is the reader's copy to change
        reader.get("v1", "ConfigMap", name, "default")["data"]["k"] = "scribbled"
        assert watch.get(name)["data"] == {"k": "3"}
        # a different namespace, or a stopped watch: GET as before
        reader.get("v1", "ConfigMap", name, "kube-system")
        watch.stop()
        reader.get("v1", "ConfigMap", name, "default")
        assert _gets(client, name) == gets + 2
    finally:
        watch.stop()
        for n in (name, other):
            testbed.client.delete("v1", "ConfigMap", n, "default")
        client.close()
