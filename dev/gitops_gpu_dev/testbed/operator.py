"""Run the real NVIDIA GPU Operator as one more process of the testbed.

What it needs here (see ../shared/design/TESTBED.md, "The GPU Operator's part"):

- its asset tree at the hard-coded ``/opt/gpu-operator``: a private mount namespace
  (``unshare --mount``, or ``--user --map-root-user`` when not root) bind-mounts the cached copy
  over ``/opt`` for this one process; the machine's /opt is never touched;
- ``OPERATOR_NAMESPACE`` (it exits without it), the testbed's kubeconfig, and the environment
  its Helm chart sets (``VALIDATOR_IMAGE``, ``DRIVER_MANAGER_IMAGE``: :mod:`operator_env`), with
  the chart's Deployment written to its namespace scaled to 0;
- metrics and health probes on 127.0.0.1 (its defaults are ``:8080``/``:8081``, every address);
- kube-scheduler and the node-lifecycle controller, started by :mod:`controlplane` for every
  testbed, so its DaemonSet pods are bound and the ``not-ready`` taint is lifted.

Its upgrade controller does not watch pods and requeues every 2 minutes; the simulator
(:mod:`gitops_gpu_dev.testbed.hosts`) nudges it when host facts it waits on change.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import time
from collections.abc import Iterable

from gitops_gpu import kube, names
from gitops_gpu.errors import KubeError, TestbedError
from gitops_gpu.kube import NotFoundError
from gitops_gpu_dev.testbed import controlplane, operator_env
from gitops_gpu_dev.testbed.operator_build import OperatorBuild

NAMESPACE = "gpu-operator"
PROCESS = "gpu-operator"
OPERATOR_MODES = ("real", "sim")
DEFAULT_MODE = "real"  # `testbed up`, `demo`
# Objects the operator creates in its namespace (all owned by ClusterPolicy/NVIDIADriver).
_NAMESPACED = (
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "Deployment"),
    ("v1", "Pod"),
)


def argv(op: OperatorBuild, metrics_port: int, probe_port: int) -> list[str]:
    """The command: a private mount namespace with the assets at /opt, then the operator."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise TestbedError(
            "unshare not found: the operator's assets are mounted at /opt in a private mount "
            "namespace",
            fix="install util-linux",
        )
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    inner = (
        f"mount --bind {shlex.quote(str(op.opt))} /opt && exec {shlex.quote(str(op.binary))}"
        f" --metrics-bind-address={controlplane.LOOPBACK}:{metrics_port}"
        f" --health-probe-bind-address={controlplane.LOOPBACK}:{probe_port}"
        " --zap-log-level=info"
    )
    return [unshare, *userns, "--mount", "--propagation", "private", "sh", "-c", inner]


def running(state: controlplane.State) -> bool:
    pid = state.pids.get(PROCESS)
    return pid is not None and controlplane._alive(pid)


def start(
    state: controlplane.State,
    client: kube.Client,
    op: OperatorBuild,
    *,
    die_with_parent: bool = False,
    timeout: float = 60,
) -> None:
    """Start the operator against the testbed in ``state`` and wait for its health probe."""
    client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        field_manager="gitops-gpu-testbed",
        force=True,
    )
    # As a Helm install: the chart's env for the process, its Deployment (scaled to 0) for
    # what reads the cluster (operator_env.py).
    installed = operator_env.helm_deployment(NAMESPACE)
    client.apply(
        operator_env.as_installed(installed, NAMESPACE),
        field_manager="gitops-gpu-testbed",
        force=True,
    )
    metrics, probe = controlplane.free_port(), controlplane.free_port()
    env = {
        **operator_env.container_env(installed),
        "KUBECONFIG": str(state.kubeconfig),
        "OPERATOR_NAMESPACE": NAMESPACE,
    }
    command = argv(op, metrics, probe)
    controlplane._spawn(PROCESS, command, state, die_with_parent=die_with_parent, env=env)
    url = f"http://{controlplane.LOOPBACK}:{probe}/readyz"
    try:
        controlplane._wait(
            "the GPU Operator",
            state,
            PROCESS,
            functools.partial(controlplane._http_ok, url),
            timeout,
        )
    except TestbedError as exc:
        stop(state)
        raise TestbedError(
            f"the GPU Operator did not start: {shlex.join(command)}\n{exc}",
            fix=f"see {state.dir}/logs/{PROCESS}.log",
        ) from exc


def stop(state: controlplane.State) -> None:
    controlplane.stop_process(state, PROCESS)


def clean(client: kube.Client, timeout: float = 30) -> None:
    """Delete the GPU Operator's CRs and wait until the operands they own are gone.

    Garbage collection removes the DaemonSets; their pods are force-deleted so nodes that are
    deleted next (and re-created under the same name by the next test) carry none of them.
    """
    for cr in (names.NVIDIA_DRIVER_API, names.CLUSTER_POLICY_API):
        try:
            for item in client.list(*cr)["items"]:
                client.delete(*cr, item["metadata"]["name"])
        except KubeError:
            continue  # CRD not installed
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = _operands(client)
        if not left:
            return
        for api, kind, name in left:
            if kind == "Pod" or time.monotonic() > deadline - timeout / 2:
                _force_delete(client, api, kind, name)
        time.sleep(0.3)
    raise TestbedError(
        f"GPU Operator operands still present after {timeout:.0f}s: {_operands(client)[:5]}",
        fix="see DIR/logs/kube-controller-manager.log (garbage collector)",
    )


def _force_delete(client: kube.Client, api: str, kind: str, name: str) -> None:
    with contextlib.suppress(NotFoundError):
        client.request(
            "DELETE",
            kube.resource(api, kind).path(name, NAMESPACE),
            body={"gracePeriodSeconds": 0},
        )


def _operands(client: kube.Client) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for api, kind in _NAMESPACED:
        try:
            items: Iterable[dict[str, object]] = client.list(api, kind, namespace=NAMESPACE)[
                "items"
            ]
        except KubeError:
            continue
        for item in items:
            meta = item.get("metadata")
            if not isinstance(meta, dict):
                continue
            if (kind, meta.get("name")) == ("Deployment", operator_env.DEPLOYMENT):
                continue  # the install's own (operator_env.py), not an operand
            found.append((api, kind, str(meta.get("name"))))
    return found
