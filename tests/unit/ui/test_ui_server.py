"""/ui/ on the controller's HTTP server: off unless asked for, pages and fragments over real
loopback HTTP, and the event stream that announces each published pass."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from ui_facts import facts

from gitops_gpu import server as server_mod
from gitops_gpu.metrics import Metrics
from gitops_gpu.server import ControllerServer, Probes
from gitops_gpu.ui.app import WebView


@pytest.fixture
def served() -> Iterator[tuple[ControllerServer, WebView]]:
    view = WebView()
    srv = ControllerServer("127.0.0.1:0", Metrics(), Probes(), lambda: None, ui=view).start()
    try:
        yield srv, view
    finally:
        srv.stop()


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _stream(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /ui/events HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _event(data: bytes) -> dict[str, Any]:
    """The last ``pass`` event in ``data``, its JSON decoded."""
    block = data.rsplit(b"event: pass\ndata: ", 1)[1]
    decoded: dict[str, Any] = json.loads(block.split(b"\n\n", 1)[0])
    return decoded


def test_without_ui_the_view_is_not_served() -> None:
    srv = ControllerServer("127.0.0.1:0", Metrics(), Probes(), lambda: None).start()
    try:
        assert _get(srv.port, "/ui/")[0] == 404
        assert _get(srv.port, "/ui/events")[0] == 404
    finally:
        srv.stop()


def test_pages_and_fragments_are_served_from_the_published_facts(
    served: tuple[ControllerServer, WebView],
) -> None:
    srv, view = served
    code, body = _get(srv.port, "/ui/")
    assert code == 200 and "has not finished a pass" in body
    view.publish(facts())
    code, body = _get(srv.port, "/ui/stage/canary?q=canary-000")
    assert code == 200 and "Nodes not healthy (1)" in body and "<!doctype html>" in body
    code, body = _get(srv.port, "/ui/", {"X-UI-Fragment": "1"})
    assert code == 200 and body.startswith("<h1>Pipeline</h1>")
    assert _get(srv.port, "/ui/node/missing")[0] == 404


def test_an_event_stream_hears_each_published_pass(
    served: tuple[ControllerServer, WebView],
) -> None:
    srv, view = served
    sock = _stream(srv.port)
    try:
        head = _read_until(sock, b"retry: 2000\n\n")
        assert b"200 OK" in head and b"text/event-stream" in head
        view.publish(facts(seq=1))
        first = _event(_read_until(sock, b"}\n\n"))
        assert first["pass"] == 1 and first["version"] == view.version
        assert first["line"].startswith("pass 1 at ")
        view.publish(facts(seq=2))
        assert _event(_read_until(sock, b"}\n\n"))["pass"] == 2
    finally:
        sock.close()


def test_event_streams_are_capped(
    served: tuple[ControllerServer, WebView], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, _view = served
    monkeypatch.setattr(server_mod, "MAX_STREAMS", 2)
    open_ = [_stream(srv.port) for _ in range(2)]
    try:
        for sock in open_:
            _read_until(sock, b"retry: 2000\n\n")  # both are streaming
        third = _stream(srv.port)
        assert b"503" in _read_until(third, b"too many event streams")
        third.close()
    finally:
        for sock in open_:
            sock.close()
