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
