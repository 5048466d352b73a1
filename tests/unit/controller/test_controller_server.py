"""The controller's HTTP endpoint on loopback: metrics, probes and the signed webhook."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from gitops_gpu.logs import JsonFormatter
from gitops_gpu.metrics import Metrics
from gitops_gpu.server import ControllerServer, Probes

SECRET = b"s3cret-webhook"


@pytest.fixture
def served() -> Iterator[tuple[ControllerServer, Probes, list[int]]]:
    probes, hits = Probes(stall_after=0.5), []
    metrics = Metrics()
    metrics.passes.labels("ok").inc()
    metrics.set_stage_commit("canary", "abc")
    metrics.set_stage_commit("canary", "def")
    server = ControllerServer("127.0.0.1:0", metrics, probes, lambda: hits.append(1), SECRET)
    server.start()
    try:
        yield server, probes, hits
    finally:
        server.stop()


def _get(server: ControllerServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _post(server: ControllerServer, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/webhook", data=body, method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_binds_loopback_and_serves_metrics(
    served: tuple[ControllerServer, Probes, list[int]],
) -> None:
    server, _probes, _hits = served
    assert server.httpd.server_address[0] == "127.0.0.1"
    code, text = _get(server, "/metrics")
    assert code == 200
    assert 'gitops_gpu_passes_total{result="ok"} 1.0' in text
    # The stage's commit gauge moved: the old commit's series is gone, not left at 1.
    assert 'gitops_gpu_stage_commit_info{commit="def",stage="canary"} 1.0' in text
    assert 'commit="abc"' not in text


def test_probes_follow_the_loop(served: tuple[ControllerServer, Probes, list[int]]) -> None:
    server, probes, _hits = served
    assert _get(server, "/readyz")[0] == 503  # before the first pass
    probes.beat()
    assert _get(server, "/readyz")[0] == 200
    assert _get(server, "/healthz")[0] == 200

    time.sleep(0.6)  # the loop stopped beating: stalled
    assert _get(server, "/healthz")[0] == 500


def test_webhook_needs_a_valid_signature(
    served: tuple[ControllerServer, Probes, list[int]],
) -> None:
    server, _probes, hits = served
    body = b'{"ref": "refs/heads/main"}'
    good = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert _post(server, body, {"X-Hub-Signature-256": "sha256=" + "0" * 64}) == 401
    assert _post(server, body, {}) == 401
    assert hits == []
    assert _post(server, body, {"X-Hub-Signature-256": good}) == 202
    gitlab_push = b'{"object_kind": "push"}'  # a second push: another body
    assert _post(server, gitlab_push, {"X-Gitlab-Token": SECRET.decode()}) == 202
    assert hits == [1, 1]


def test_json_logs_are_one_object_per_line() -> None:
    record = logging.LogRecord(
        "gitops_gpu.controller",
        logging.WARNING,
        __file__,
        1,
        "status %s on %s",
        ("failure", "abc123"),
        None,
    )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "warning" and entry["logger"] == "gitops_gpu.controller"
    assert entry["msg"] == "status failure on abc123"
