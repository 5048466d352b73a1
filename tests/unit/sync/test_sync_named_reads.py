"""LiveReader.get after our own write while the watch trails it: the server is asked until the
watch holds the object the server holds, then the watch answers again (the real apiserver
path is tests/integration/test_sync_managed_list.py; here the watch is held back at will)."""

from __future__ import annotations

from typing import Any

from gitops_gpu.sync.live import LiveReader

KEY = ("v1", "ConfigMap", "built", "ns")


class HeldWatch:
    """An Informer's reading side whose view changes only when the test says."""

    def __init__(self, rv: str) -> None:
        self.synced, self.version, self.obj = True, 7, _cm(rv)

    def get(self, name: str) -> Any:
        return self.obj


class Server:
    def __init__(self, rv: str) -> None:
        self.obj, self.gets = _cm(rv), 0

    def get(self, *_: Any) -> Any:
        self.gets += 1
        return self.obj


def _cm(rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "built", "resourceVersion": rv}, "data": {"rv": rv}}


def test_reads_after_our_write_go_to_the_server_until_the_watch_catches_up() -> None:
    watch, server = HeldWatch("5"), Server("5")
    reader = LiveReader(server, named={KEY: watch})  # type: ignore[arg-type, dict-item]
    assert reader.get(*KEY)["data"] == {"rv": "5"} and server.gets == 0
    reader.wrote()
    server.obj = _cm("6")  # our write; the watch has not seen it
    assert reader.get(*KEY)["data"] == {"rv": "6"}
    assert reader.get(*KEY)["data"] == {"rv": "6"} and server.gets == 2  # still trailing
    watch.obj = _cm("6")  # the event arrives (its view, same version counter here)
    assert reader.get(*KEY)["data"] == {"rv": "6"} and server.gets == 3  # agrees: last ask
    assert reader.get(*KEY)["data"] == {"rv": "6"} and server.gets == 3
    reader.wrote()
    watch.version += 1  # the watch moved on after the write: it has it
    assert reader.get(*KEY)["data"] == {"rv": "6"} and server.gets == 3
