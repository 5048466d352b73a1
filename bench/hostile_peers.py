"""Hostile peers against a `gitops-gpu controller` process (part of bench/hostile.py): its git
remote, its forge and its webhook senders turn hostile one at a time, on 127.0.0.1.

The fleet remote is a real `git http-backend` behind a scripted peer (dev testbed/hostile_peer.py)
that forwards until a case makes it hostile; the status backend is a scripted Gitea. Measured
from outside: the controller's peak RSS (/proc VmHWM), its passes and refusals (/metrics), the
time a valid webhook takes while slow peers hold connections, and every Authorization header
another origin received.

Targets: every case ends with passes still completing; peak RSS < 256 MiB above the baseline;
no token at another origin; a valid webhook served in < 2 s while 4, then 400, slow peers run.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from fleetbench import bench_env, git

from gitops_gpu_dev.testbed import hostile_peer as hp
from gitops_gpu_dev.testbed.githttp import GitHTTP

EXTRA_LIMIT = 256 << 20
WEBHOOK_TARGET = 2.0
TOKEN = "bench-git-token-0123456789"
SECRET = b"bench-peers-secret"


def vm_hwm(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]


def metric(port: int, name: str, labels: str = "") -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    pattern = rf"^{name}\{{([^}}]*)\}} (\S+)$"
    return sum(float(v) for lab, v in re.findall(pattern, text, re.M) if labels in lab)


def fake_gitea(huge: list[bytes]) -> hp.Script:
    """A Gitea status API with no statuses; while ``huge`` holds a body, listings answer it."""

    def script(req: BaseHTTPRequestHandler, peer: hp.HostilePeer) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        if length:
            req.rfile.read(length)
        if req.command == "GET" and huge:
            hp.oversized("application/json", huge[0])(req, peer)
            return
        body = b"[]" if req.command == "GET" else b"{}"
        req.send_response(200 if req.command == "GET" else 201)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        req.send_header("Connection", "close")
        req.end_headers()
        req.wfile.write(body)

    return script


def signed_delivery(port: int, n: int) -> float:
    """Seconds until a valid signed delivery is answered 202 (inf: it was not)."""
    body = json.dumps({"after": f"{n:040x}"}).encode()
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhook",
        data=body,
        headers={"X-Hub-Signature-256": sig, "X-GitHub-Delivery": f"bench-{n}"},
    )
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            ok = reply.status == 202
    except OSError:
        ok = False
    return time.perf_counter() - t if ok else float("inf")


def slow_peers(port: int, count: int, stop: threading.Event) -> list[socket.socket]:
    """``count`` connections sending a webhook body one byte every 2 s, from 127.0.0.2-.41."""
    socks = []
    for i in range(count):
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i % 40}", 0))
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        except OSError:
            s.close()
            continue
        socks.append(s)

    def drip() -> None:
        while not stop.wait(2.0):
            for s in socks:
                with contextlib.suppress(OSError):
                    s.send(b"x")

    threading.Thread(target=drip, daemon=True).start()
    return socks


class Run:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, failures: list[str]) -> None:
        self.proc, self.port, self.failures = proc, port, failures
        self.base = vm_hwm(proc.pid)

    def passes(self) -> float:
        return metric(self.port, "gitops_gpu_passes_total")

    def wait_passes(self, n: int, limit: float) -> bool:
        target = self.passes() + n
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            if self.passes() >= target:
                return True
            time.sleep(0.3)
        return False

    def row(self, name: str, outcome: str, took: float, ok: bool) -> None:
        peak = vm_hwm(self.proc.pid)
        ok = ok and peak - self.base < EXTRA_LIMIT and self.proc.poll() is None
        print(
            f"{name:44} {outcome:52} peak {peak >> 20:4d} MiB (+{(peak - self.base) >> 20:3d})"
            f"  {took:5.1f}s  {'ok' if ok else 'MISS'}"
        )
        if not ok:
            self.failures.append(name)


def empty_commit(work: Path, message: str) -> None:
    git(work, "commit", "-q", "--allow-empty", "-m", message)
    git(work, "push", "-q", "origin", "main")


def case(run: Run, name: str, act: Callable[[], str], passes: int = 2, limit: float = 60) -> None:
    t = time.perf_counter()
    outcome = act()
    ok = run.wait_passes(passes, limit)
    run.row(name, outcome + ("" if ok else "; passes stopped"), time.perf_counter() - t, ok)


def controller_against_hostile_peers(failures: list[str]) -> None:
    print("== gitops-gpu controller process: hostile git server, forge and webhook senders")
    with bench_env(pools=3, per_pool=1) as b:
        served = GitHTTP(b.bare.parent)
        front = hp.HostilePeer(hp.forward(f"http://127.0.0.1:{served.port}"))
        sink = hp.HostilePeer(hp.forward(f"http://127.0.0.1:{served.port}"))
        huge: list[bytes] = []
        forge = hp.HostilePeer(fake_gitea(huge))
        (b.root / "secret").write_bytes(SECRET)
        (b.root / "status-token").write_text("forge-token-0123456789")
        log = b.root / "controller.log"
        env = {**os.environ, "GITOPS_GPU_GIT_TOKEN": TOKEN}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable, "-m", "gitops_gpu", "controller",
                    "--repo", f"{front.base}/{b.bare.name}", "--kubeconfig", b.tb.kubeconfig,
                    "--interval", "2s", "--no-leader-election", "--metrics-addr", "127.0.0.1:0",
                    "--webhook-secret-file", str(b.root / "secret"),
                    "--status-backend", f"gitea:{forge.base}/o/r",
                    "--status-token-file", str(b.root / "status-token"),
                    "--cache-dir", str(b.root / "cache"), "--refs-deadline", "5",
                    "--max-refs-bytes", str(8 << 20),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )  # fmt: skip
        try:
            port = 0
            while not port:
                found = re.search(r"serving on 127\.0\.0\.1:(\d+)", log.read_text())
                port = int(found.group(1)) if found else 0
                if proc.poll() is not None:
                    failures.append("controller did not start: " + log.read_text()[-500:])
                    return
                time.sleep(0.2)
            run = Run(proc, port, failures)
            if not run.wait_passes(2, 120):
                failures.append("controller made no passes: " + log.read_text()[-500:])
                return
            run.base = vm_hwm(proc.pid)
            print(f"baseline: peak {run.base >> 20} MiB after 2 passes")

            def bad_name() -> str:
                git(b.work, "push", "-q", "origin", "HEAD:refs/heads/feature-\udcff")
                empty_commit(b.work, "after the bad name")
                run.wait_passes(3, 60)
                n = metric(port, "gitops_gpu_peer_refused_total", 'reason="ref_name"')
                return f"{n:.0f} polls skipped the name; passes go on"

            case(run, "branch named feature-\\xff", bad_name)

            def endless() -> str:
                front.script = hp.endless_refs()
                run.wait_passes(3, 60)
                n = metric(port, "gitops_gpu_peer_refused_total", 'reason="too_large"')
                return f"cut at 8 MiB {n:.0f} times, last commits kept"

            case(run, "endless info/refs", endless)
            front.script = hp.forward(f"http://127.0.0.1:{served.port}")

            def slow() -> str:
                front.script = hp.slow_refs(every=2.0)
                run.wait_passes(2, 60)
                n = metric(port, "gitops_gpu_peer_refused_total", 'reason="deadline"')
                return f"cut at the 5 s deadline {n:.0f} times"

            case(run, "info/refs one byte every 2 s", slow)

            def moved() -> str:
                front.script = hp.redirect(lambda path: sink.base + path)
                run.wait_passes(3, 60)
                leaked = [a for a in sink.authorizations() if TOKEN in _basic(a)]
                if leaked or sink.authorizations():
                    failures.append(f"token sent to another origin: {sink.authorizations()}")
                return (
                    f"302 to another port: {len(sink.seen)} requests, "
                    f"{len(sink.authorizations())} Authorization there"
                )

            case(run, "redirect of the fleet remote", moved)
            front.script = hp.forward(f"http://127.0.0.1:{served.port}")

            def forge_huge() -> str:
                item = {"id": 1, "status": "success", "context": "x", "description": "d" * 1000}
                start = len(forge.seen)
                huge.append(json.dumps([item] * 140_000).encode())  # ~150 MB
                empty_commit(b.work, "a commit to post statuses on")
                run.wait_passes(3, 90)
                asked = sum(1 for seen in forge.seen[start:] if seen.method == "GET")
                return f"{asked} listings of {len(huge[0]) >> 20} MiB refused at 8 MiB"

            case(run, "forge status list of 150 MB", forge_huge)
            huge.clear()

            for count in (4, 400):
                stop = threading.Event()
                t = time.perf_counter()
                socks = slow_peers(port, count, stop)
                time.sleep(1.0)
                served_in = max(signed_delivery(port, i + count) for i in range(3))
                probes = metric(port, "gitops_gpu_passes_total") >= 0  # /metrics answered
                stop.set()
                for s in socks:
                    s.close()
                run.row(
                    f"{count} slow webhook senders ({len(socks)} opened)",
                    f"valid delivery 202 in {served_in:.2f}s (target < {WEBHOOK_TARGET:g}s)",
                    time.perf_counter() - t,
                    served_in < WEBHOOK_TARGET and probes,
                )
            tracebacks = log.read_text(errors="replace").count("Traceback")
            print(f"{tracebacks} tracebacks in the controller's log")
            if tracebacks:
                failures.append(f"{tracebacks} tracebacks")
        finally:
            proc.terminate()
            proc.wait(30)
            for peer in (front, sink, forge):
                peer.stop()
            served.stop()


def _basic(header: str) -> str:
    try:
        return base64.b64decode(header.split(" ", 1)[1]).decode(errors="replace")
    except (IndexError, ValueError):
        return header
