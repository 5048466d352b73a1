"""Credentials never leak: a recognisable fake token is seeded where the chart puts the real
ones (env GITOPS_GPU_GIT_TOKEN, the --status-token-file), the fleet repo refuses it over HTTPS
and the forge rejects status writes with a 401 that echoes it back, and it must appear in no
log record, pass error, Event, commit-status description or /metrics scrape."""

from __future__ import annotations

import base64
import json
import logging
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rollout_fake_forge import OWNER, REPO, FakeForge

from gitops_gpu.controller import Controller
from gitops_gpu.metrics import Metrics
from gitops_gpu.pass_types import Config
from gitops_gpu.server import ControllerServer, Probes
from gitops_gpu.sync.source import TOKEN_ENV
from gitops_gpu_dev.testbed.session import Testbed

pytestmark = pytest.mark.integration
TOKEN = "ghp_GITOPSGPU_FAKE_TOKEN_123456"
# Forms the token could leak in: as is, and inside git's Basic credentials.
LEAKS = (TOKEN, base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode())


class RefusingGitServer:
    """An HTTPS "git server" that answers 401 to everything and echoes the credentials back."""

    def __init__(self, tmp: Path) -> None:
        self.cert = tmp / "cert.pem"
        key = tmp / "key.pem"
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
                *("-keyout", str(key), "-out", str(self.cert), "-subj", "/CN=127.0.0.1"),
                *("-addext", "subjectAltName=IP:127.0.0.1"),
            ],
            check=True,
            capture_output=True,
        )
        self.authorizations: list[str] = []
        seen = self.authorizations

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                presented = self.headers.get("Authorization", "")
                seen.append(presented)
                body = f"bad credentials: {presented}".encode()
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="fleet"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/platform/fleet.git"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class StageRejectingForge(FakeForge):
    """A Gitea that accepts the preflight status but answers every stage status with a 401
    quoting the presented Authorization header, as some servers do."""

    def __init__(self) -> None:
        super().__init__("gitea", TOKEN)
        self.rejected: list[bytes] = []

    def handle(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        if method == "POST" and b"gitops-gpu/stage/" in body:
            self.rejected.append(body)
            return 401, {}, {"message": "Bad credentials: " + headers.get("authorization", "")}
        return super().handle(method, raw_path, headers, body)


@pytest.fixture
def secrets_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    token_file = tmp_path / "status-token"
    token_file.write_text(TOKEN + "\n")
    return token_file


@pytest.fixture
def git_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RefusingGitServer]:
    server = RefusingGitServer(tmp_path)
    monkeypatch.setenv("GIT_SSL_CAINFO", str(server.cert))
    yield server
    server.close()


@pytest.fixture
def forge() -> Iterator[StageRejectingForge]:
    fake = StageRejectingForge()
    yield fake
    fake.close()


def scrape(metrics: Metrics) -> str:
    """/metrics as Prometheus reads it, from the controller's own HTTP endpoint."""
    server = ControllerServer("127.0.0.1:0", metrics, Probes(), lambda: None).start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return str(reply.read().decode())
    finally:
        server.stop()


def assert_no_leak(where: str, text: str) -> None:
    for form in LEAKS:
        assert form not in text, f"the token leaked into {where}: {text[:300]}"


def logged(caplog: pytest.LogCaptureFixture) -> str:
    fmt = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(fmt.format(r) for r in caplog.records)


def test_a_refused_git_token_is_never_shown(
    secrets_env: Path,
    git_server: RefusingGitServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    testbed: Testbed,
) -> None:
    caplog.set_level(logging.DEBUG)
    cfg = Config(repo=git_server.url, cache_dir=tmp_path / "ctl", status_token_file=secrets_env)
    ctl = Controller(cfg, testbed.client)
    report = ctl.run_pass()
    assert report.result == "error"
    assert "git ls-remote" in report.error and "failed" in report.error
    # The token really was presented (as git's Basic credentials) and refused.
    assert f"Basic {LEAKS[1]}" in git_server.authorizations
    assert_no_leak("the pass error", report.error)
    assert_no_leak("the logs", logged(caplog))
    assert_no_leak("/metrics", scrape(ctl.metrics))


def test_a_rejected_status_token_is_never_shown(
    secrets_env: Path,
    forge: StageRejectingForge,
    clean_cluster: Testbed,
    fleet_remote: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    admin = clean_cluster.client
    cfg = Config(
        repo=fleet_remote.url,
        cache_dir=tmp_path / "ctl",
        status_backend=f"gitea:{forge.url}/{OWNER}/{REPO}",
        status_token_file=secrets_env,
    )
    ctl = Controller(cfg, admin)
    head = fleet_remote.commit("a commit to roll out")
    ctl.start_informers()
    errors: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not forge.rejected:
            assert time.monotonic() < deadline, "no stage status was attempted"
            report = ctl.run_pass()
            errors.append(report.error)
    finally:
        ctl.stop_informers()
    assert report.result == "error" and "HTTP 401" in report.error
    # The forge did echo the credentials back; the client scrubbed them.
    assert "Bad credentials: token ***" in report.error, report.error
    assert ("POST", f"/api/v1/repos/{OWNER}/{REPO}/statuses/{head}") in forge.requests
    assert forge.errors == [], "requests deviated from the Gitea API"
    for i, error in enumerate(errors):
        assert_no_leak(f"the error of pass {i + 1}", error)
    assert_no_leak("the logs", logged(caplog))
    # What the forge stored (the preflight status) and the stage statuses it refused.
    assert forge.jobs.get(head), "the preflight status was not written"
    assert_no_leak("commit statuses", json.dumps(forge.jobs))
    for body in forge.rejected:
        assert_no_leak("a refused status", body.decode())
    # The pass applied the canary stage before its status was refused: its Events exist.
    events = [
        e
        for e in admin.list("v1", "Event", namespace="default")["items"]
        if f"at commit {head[:12]}" in e["message"]
    ]
    assert events, "the apply recorded no Events"
    assert_no_leak("Events", json.dumps(events))
    metrics = scrape(ctl.metrics)
    assert 'gitops_gpu_passes_total{result="error"}' in metrics
    assert_no_leak("/metrics", metrics)
