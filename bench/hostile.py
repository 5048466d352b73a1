"""Hostile input, measured from outside: every case of the regression corpus through
`gitops-gpu check` (its own process: exit code, peak RSS from the kernel, wall time), then a
`gitops-gpu controller` process on a small testbed under webhook abuse and hostile pushes (its
peak RSS from /proc/PID/status VmHWM, passes from its /metrics), then one whose git server,
forge and webhook senders turn hostile (hostile_peers.py).

Targets (issue: "No input stops the controller"): no traceback anywhere; check and the
controller stay under 256 MiB above their baseline; unsigned or replayed posts start no pass.
Exits 1 when a figure misses its target.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
sys.path.insert(0, str(HERE))

from fleetbench import bench_env, git  # noqa: E402
from hostile_cases import CASES  # noqa: E402
from hostile_peers import controller_against_hostile_peers  # noqa: E402

from gitops_gpu_dev import paths  # noqa: E402

EXTRA_LIMIT = 256 << 20
SECRET = b"bench-secret"
failures: list[str] = []


def run_check(path: Path) -> tuple[int, str, int, float]:
    t = time.perf_counter()
    crds = str(paths.default_crds_dir())
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitops_gpu", "check", str(path), "--crds", crds],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), out, usage.ru_maxrss * 1024, time.perf_counter() - t


def fresh_fleet(root: Path) -> Path:
    work = root / "work"
    shutil.copytree(paths.fleet_example(), work)
    git(work, "init", "-q", "-b", "main")
    git(work, "config", "user.email", "b@example.com")
    git(work, "config", "user.name", "b")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "fleet")
    return work


def check_cases() -> None:
    print("== gitops-gpu check, one process per case")
    with tempfile.TemporaryDirectory() as tmp:
        rc, out, base, secs = run_check(fresh_fleet(Path(tmp) / "base"))
        print(f"{'baseline (example fleet)':34} exit {rc}  peak {base >> 20:4d} MiB  {secs:5.2f}s")
        if rc != 0:  # a check that did not run measures nothing
            failures.append(f"check of the example fleet exited {rc}: {out.strip()[-300:]}")
        for i, case in enumerate(CASES):
            work = fresh_fleet(Path(tmp) / f"c{i}")
            case.edit(work)
            rc, out, rss, secs = run_check(work)
            extra = rss - base
            # exit 0: passes, 1: refused with findings; 2 would mean the check never ran
            expected = 0 if case.message is None else 1
            ok = "Traceback" not in out and extra < EXTRA_LIMIT and rc == expected
            verdict = "ok" if ok else "MISS"
            print(
                f"{case.name:34} exit {rc}  peak {rss >> 20:4d} MiB (+{extra >> 20} MiB)  "
                f"{secs:5.2f}s  {verdict}"
            )
            if verdict != "ok":
                failures.append(
                    f"check {case.name}: exit {rc} (expected {expected}), +{extra >> 20} MiB, "
                    f"traceback={'Traceback' in out}"
                )


def vm_hwm(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]


def passes(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        float(v) for v in re.findall(r"^gitops_gpu_passes_total\{[^}]*\} (\S+)$", text, re.M)
    )


def send(port: int, head: bytes, body_bytes: int = 0, hold: float = 0.0) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(head)
            chunk = b"x" * (1 << 20)
            for _ in range(body_bytes >> 20):
                s.sendall(chunk)
            time.sleep(hold)
            s.recv(4096)
    except OSError:
        pass  # the server closed on us: what it should do with these


def abuse(port: int) -> None:
    big = 100 << 20
    liars = [
        threading.Thread(
            target=send,
            args=(port, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", big),
        )
        for _ in range(4)
    ]
    chunked = threading.Thread(
        target=send,
        args=(
            port,
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + (b"100000\r\n" + b"x" * 0x100000 + b"\r\n") * 100,
        ),
    )
    slow = [
        threading.Thread(
            target=send,
            args=(port, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab"),
            kwargs={"hold": 12.0},
        )
        for _ in range(8)
    ]
    for t in [*liars, chunked, *slow]:
        t.start()
    for i in range(300):
        body = f'{{"n":{i}}}'.encode()
        send(
            port,
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
        )
    signed = b'{"after":"replayed"}'
    sig = "sha256=" + hmac.new(SECRET, signed, hashlib.sha256).hexdigest()
    for i in range(50):
        head = (
            f"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: {len(signed)}\r\n"
            f"X-Hub-Signature-256: {sig}\r\nX-GitHub-Delivery: d-{i}\r\n\r\n"
        ).encode()
        send(port, head + signed)
    for t in [*liars, chunked, *slow]:
        t.join(60)


def controller_under_abuse() -> None:
    print("== gitops-gpu controller process: webhook abuse and hostile pushes")
    with bench_env(pools=3, per_pool=1) as b:
        for entry in b.work.iterdir():  # the corpus edits the example fleet's files
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        shutil.copytree(paths.fleet_example(), b.work, dirs_exist_ok=True)
        b.commit("the example fleet")
        secret = b.root / "secret"
        secret.write_bytes(SECRET)
        log = b.root / "controller.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable, "-m", "gitops_gpu", "controller", "--repo", str(b.bare),
                    "--kubeconfig", b.tb.kubeconfig, "--interval", "5s", "--no-leader-election",
                    "--metrics-addr", "127.0.0.1:0", "--webhook-secret-file", str(secret),
                    "--cache-dir", str(b.root / "cache"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            port = 0
            while not port:
                found = re.search(r"serving on 127\.0\.0\.1:(\d+)", log.read_text())
                port = int(found.group(1)) if found else 0
                time.sleep(0.2)
            while passes(port) < 2:
                time.sleep(0.5)
            base = vm_hwm(proc.pid)
            before = passes(port)
            t = time.perf_counter()
            abuse(port)
            took = time.perf_counter() - t
            during = passes(port) - before
            # Polls at 5 s go on: passes the abuse caused are those above that pace (+2 slack).
            caused = max(0.0, during - (took / 5.0 + 2))
            after_abuse = vm_hwm(proc.pid)
            print(
                f"webhook abuse ({took:.0f}s: 4x100 MiB lying, 100 MiB chunked, 8 half-sent, "
                f"300 unsigned, 50 replays): peak {base >> 20} -> {after_abuse >> 20} MiB, "
                f"{during:.0f} passes ({caused:.0f} above the poll pace)"
            )
            if after_abuse - base > EXTRA_LIMIT or caused > 1:
                failures.append("webhook abuse")
            for case in CASES:
                case.edit(b.work)
                b.commit(case.name)
                n = passes(port)
                while passes(port) < n + 2:
                    time.sleep(0.5)
                    if proc.poll() is not None:
                        failures.append(f"controller exited on {case.name}")
                        return
                git(b.work, "revert", "--no-edit", "HEAD")  # the next case starts clean
                git(b.work, "push", "-q", "origin", "main")
            peak = vm_hwm(proc.pid)
            text = log.read_text(errors="replace")
            tracebacks = text.count("Traceback")
            print(
                f"{len(CASES)} hostile pushes: peak {base >> 20} -> {peak >> 20} MiB "
                f"(+{(peak - base) >> 20} MiB), process alive, {tracebacks} tracebacks in its log"
            )
            if peak - base > EXTRA_LIMIT:
                failures.append(f"controller +{(peak - base) >> 20} MiB")
        finally:
            proc.terminate()
            proc.wait(30)


def main() -> int:
    print(f"target: no traceback; < {EXTRA_LIMIT >> 20} MiB above baseline; abuse starts no pass")
    check_cases()
    controller_under_abuse()
    controller_against_hostile_peers(failures)
    if failures:
        print("MISSED: " + "; ".join(failures))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
