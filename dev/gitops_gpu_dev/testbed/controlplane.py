"""Start and stop a real local control plane: etcd, kube-apiserver, kube-controller-manager
(with the node-lifecycle controller, which lifts the not-ready taint kwok nodes are created
with), kube-scheduler (binds DaemonSet pods, e.g. the real GPU Operator's) and kwok.

Every process binds 127.0.0.1 on a free port, runs in its own process group (so ``down`` can
stop it and its children), and logs to ``DIR/logs/<name>.log``. ``DIR/state.json`` records the
pids and ports: ``up`` on a DIR left by a killed run finds it there and cleans it first.
The admin identity is a generated static bearer token in group system:masters.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gitops_gpu import kube
from gitops_gpu.errors import TestbedError
from gitops_gpu_dev.testbed import kwok_stages
from gitops_gpu_dev.testbed.build import Binaries

LOOPBACK = "127.0.0.1"
ADMIN_USER = "gitops-gpu-admin"
Progress = Callable[[str], None]
# Children started by this process, kept so they are reaped (not garbage-collected) on `down`.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass
class State:
    dir: str
    etcd_port: int = 0
    apiserver_port: int = 0
    kcm_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return Path(self.dir) / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return Path(self.dir) / "pki" / "apiserver.crt"

    def save(self) -> None:
        (Path(self.dir) / "state.json").write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, directory: Path) -> State | None:
        try:
            data = json.loads((directory / "state.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(**data)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); reap it if we can.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: a test session killed hard must not leave a control plane behind.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)


def _spawn(
    name: str,
    argv: Sequence[str],
    state: State,
    *,
    die_with_parent: bool,
    env: Mapping[str, str] | None = None,
) -> None:
    logs = Path(state.dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = (logs / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        list(argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env} if env else None,
        start_new_session=True,
        preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509 (prctl only)
    )
    log.close()
    _CHILDREN[proc.pid] = proc
    state.pids[name] = proc.pid
    state.save()


def _log_tail(state: State, name: str, lines: int = 15) -> str:
    try:
        text = (Path(state.dir) / "logs" / f"{name}.log").read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _wait(what: str, state: State, name: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(state.pids[name]):
            raise TestbedError(
                f"{name} exited while starting:\n{_log_tail(state, name)}",
                fix=f"see {state.dir}/logs/{name}.log",
            )
        if check():
            return
        time.sleep(0.2)
    raise TestbedError(
        f"{what} not ready after {timeout:.0f}s:\n{_log_tail(state, name)}",
        fix=f"see {state.dir}/logs/{name}.log",
    )


def _port_in_use_error(state: State, name: str) -> bool:
    return "address already in use" in _log_tail(state, name, 40).lower()


def _http_ok(url: str, token: str | None = None, ca: Path | None = None) -> bool:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(ca)) if ca and ca.exists() else None
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _write_kubeconfig(path: Path, server: str, ca: Path, token: str, user: str) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "testbed",
                "clusters": [
                    {
                        "name": "testbed",
                        "cluster": {"server": server, "certificate-authority": str(ca)},
                    }
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
            },
            indent=2,
        )
    )
    path.chmod(0o600)


def _start_etcd(bins: Binaries, state: State, die: bool) -> None:
    for _attempt in range(3):
        state.etcd_port, peer = free_port(), free_port()
        url = f"http://{LOOPBACK}:{state.etcd_port}"
        _spawn(
            "etcd",
            [
                str(bins.etcd),
                "--data-dir",
                str(Path(state.dir) / "etcd"),
                "--listen-client-urls",
                url,
                "--advertise-client-urls",
                url,
                "--listen-peer-urls",
                f"http://{LOOPBACK}:{peer}",
                "--initial-advertise-peer-urls",
                f"http://{LOOPBACK}:{peer}",
                "--initial-cluster",
                f"default=http://{LOOPBACK}:{peer}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes",
                str(2 << 30),
                "--log-level",
                "warn",
            ],
            state,
            die_with_parent=die,
        )
        try:
            _wait("etcd", state, "etcd", functools.partial(_http_ok, f"{url}/health"), 30)
            return
        except TestbedError:
            if not _port_in_use_error(state, "etcd"):
                raise
    raise TestbedError("etcd: no free port after 3 tries", fix="free some loopback ports")


def _start_apiserver(bins: Binaries, state: State, token: str, die: bool) -> None:
    pki = Path(state.dir) / "pki"
    for _attempt in range(3):
        state.apiserver_port = free_port()
        server = state.server
        _spawn(
            "kube-apiserver",
            [
                str(bins.kube_apiserver),
                f"--etcd-servers=http://{LOOPBACK}:{state.etcd_port}",
                f"--secure-port={state.apiserver_port}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--cert-dir={pki}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                "--disable-admission-plugins=ServiceAccount",
                f"--service-account-issuer={server}/",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--enable-priority-and-fairness=false",
                "--storage-media-type=application/json",
                "--v=0",
                # bench/controller.py counts requests per identity from an audit log.
                *os.environ.get("GITOPS_GPU_APISERVER_ARGS", "").split(),
            ],
            state,
            die_with_parent=die,
        )
        try:
            _wait(
                "kube-apiserver",
                state,
                "kube-apiserver",
                lambda: _http_ok(f"{state.server}/readyz", token, state.ca_file),
                90,
            )
            return
        except TestbedError:
            if not _port_in_use_error(state, "kube-apiserver"):
                raise
    raise TestbedError("kube-apiserver: no free port after 3 tries", fix="free some loopback ports")


def _start_kcm(bins: Binaries, state: State, die: bool) -> None:
    pki = Path(state.dir) / "pki"
    kubeconfig = str(state.kubeconfig)
    for _attempt in range(3):
        state.kcm_port = free_port()
        _spawn(
            "kube-controller-manager",
            [
                str(bins.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={state.kcm_port}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={state.ca_file}",
                "--use-service-account-credentials=false",
                "--controllers=*,-nodeipam,-ttl,-cloud-node-lifecycle",
                # Operand DaemonSets make a pod per node: the default 20 QPS is minutes at scale.
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                f"--cert-dir={pki / 'kcm'}",
                "--v=0",
                *os.environ.get("GITOPS_GPU_KCM_ARGS", "").split(),  # bench: node grace period
            ],
            state,
            die_with_parent=die,
        )
        time.sleep(1.0)
        if _alive(state.pids["kube-controller-manager"]):
            return
        if not _port_in_use_error(state, "kube-controller-manager"):
            raise TestbedError(
                f"kube-controller-manager exited:\n{_log_tail(state, 'kube-controller-manager')}",
                fix=f"see {state.dir}/logs/kube-controller-manager.log",
            )
    raise TestbedError("kube-controller-manager: no free port after 3 tries", fix="free some ports")


def _start_scheduler(bins: Binaries, state: State, die: bool) -> None:
    kubeconfig = str(state.kubeconfig)
    for _attempt in range(3):
        _spawn(
            "kube-scheduler",
            [
                str(bins.kube_scheduler),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--v=0",
            ],
            state,
            die_with_parent=die,
        )
        time.sleep(0.5)
        if _alive(state.pids["kube-scheduler"]):
            return
        if not _port_in_use_error(state, "kube-scheduler"):
            raise TestbedError(
                f"kube-scheduler exited:\n{_log_tail(state, 'kube-scheduler')}",
                fix=f"see {state.dir}/logs/kube-scheduler.log",
            )
    raise TestbedError("kube-scheduler: no free port after 3 tries", fix="free some ports")


def _start_kwok(bins: Binaries, state: State, die: bool) -> None:
    # Stages are API objects (kwok_stages.py), so a fault can add one while kwok runs.
    kwok_stages.install(kube.Client.from_kubeconfig(str(state.kubeconfig)), bins.kwok_stages)
    _spawn(
        "kwok",
        [
            str(bins.kwok),
            f"--kubeconfig={state.kubeconfig}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-lease-duration-seconds=40",
            f"--node-ip={LOOPBACK}",
            "--enable-crds=Stage",
            *os.environ.get("GITOPS_GPU_KWOK_ARGS", "").split(),  # bench: lease duration
        ],
        state,
        die_with_parent=die,
    )
    time.sleep(0.5)
    if not _alive(state.pids["kwok"]):
        raise TestbedError(
            f"kwok exited:\n{_log_tail(state, 'kwok')}", fix=f"see {state.dir}/logs/kwok.log"
        )


def up(
    bins: Binaries,
    directory: Path,
    *,
    die_with_parent: bool = False,
    progress: Progress | None = None,
) -> State:
    """Start the control plane in ``directory`` and write ``directory/kubeconfig``."""
    say = progress or (lambda _m: None)
    directory = directory.resolve()
    if (directory / "state.json").exists():
        say(f"cleaning a stale testbed in {directory}")
        down(directory)
    directory.mkdir(parents=True, exist_ok=True)
    pki = directory / "pki"
    pki.mkdir(exist_ok=True)
    gen = subprocess.run(
        ["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"],
        capture_output=True,
        text=True,
        check=False,
    )
    if gen.returncode != 0:
        raise TestbedError(f"openssl genrsa failed: {gen.stderr.strip()}", fix="install openssl")
    token = secrets.token_hex(24)
    (pki / "tokens.csv").write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
    (pki / "tokens.csv").chmod(0o600)
    state = State(dir=str(directory))
    state.save()
    try:
        say("starting etcd")
        _start_etcd(bins, state, die_with_parent)
        say("starting kube-apiserver")
        _start_apiserver(bins, state, token, die_with_parent)
        _write_kubeconfig(state.kubeconfig, state.server, state.ca_file, token, ADMIN_USER)
        say("starting kube-controller-manager, kube-scheduler and kwok")
        _start_kcm(bins, state, die_with_parent)
        _start_scheduler(bins, state, die_with_parent)
        _start_kwok(bins, state, die_with_parent)
    except BaseException:
        _stop_all(state)
        raise
    state.save()
    return state


def _stop_all(state: State, grace: float = 10.0) -> None:
    # Reverse start order: clients first, etcd last.
    for name in reversed(list(state.pids)):
        pid = state.pids[name]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in state.pids.values():
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)


def stop_process(state: State, name: str, grace: float = 10.0) -> None:
    """Stop one process of the testbed (and its group), forgetting it in DIR/state.json."""
    pid = state.pids.pop(name, None)
    if pid is None:
        return
    _stop_all(State(dir=state.dir, pids={name: pid}), grace)
    state.save()


def down(directory: Path) -> bool:
    """Stop every process recorded in ``directory`` and remove its state; False if none."""
    directory = directory.resolve()
    state = State.load(directory)
    if state is not None:
        _stop_all(state)
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
    return state is not None


def simulator_argv(directory: str | Path, tick: float, *, plays_operator: bool = True) -> list[str]:
    """The command that runs the simulator against the testbed in DIR: the hosts (NVML, MIG
    manager, faults) and, with ``plays_operator``, the GPU Operator too."""
    return [
        sys.executable,
        "-m",
        "gitops_gpu",
        "testbed",
        "simulate",
        "--dir",
        str(directory),
        "--tick",
        str(tick),
        "--operator",
        "sim" if plays_operator else "real",
    ]


def spawn_simulator(state: State, tick: float, *, plays_operator: bool = True) -> None:
    """Run `gitops-gpu testbed simulate` as one more process of the testbed (stopped by down)."""
    argv = simulator_argv(state.dir, tick, plays_operator=plays_operator)
    _spawn("simulator", argv, state, die_with_parent=False)
    state.save()
