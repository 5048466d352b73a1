"""A real Prometheus for the testbed (`gitops-gpu testbed up --prometheus`), on 127.0.0.1 only.

Debian's ``prometheus`` package (2.42; ``make setup`` installs it with apt when missing)
provides the server and ``promtool``. The testbed runs two more processes, both stopped by
``testbed down``:

- ``dcgm-exporters``: DCGM-exporter-shaped metrics for every fake GPU node
  (dev/gitops_gpu_dev/testbed/dcgm.py), found through HTTP service discovery;
- ``prometheus``: scrapes them and every controller listed in
  ``DIR/prometheus/controllers.json`` (file service discovery; ``add_controller`` writes it),
  loads the rule files in ``DIR/prometheus/rules/``, and serves its API on a free port. Its base
  URL is written to ``DIR/prometheus-url``.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from gitops_gpu.errors import TestbedError
from gitops_gpu_dev.testbed import controlplane
from gitops_gpu_dev.testbed.controlplane import LOOPBACK, State

PROMETHEUS = "prometheus"
DCGM = "dcgm-exporters"
INSTALL = "apt-get update && apt-get install -y prometheus (or: make setup)"


def binary(name: str = "prometheus") -> str:
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None
    )
    if found is None:
        raise TestbedError(f"{name} is not installed", fix=INSTALL)
    return found


def config(directory: Path, dcgm_url: str, scrape_interval: float) -> dict[str, object]:
    every = f"{max(1, round(scrape_interval))}s"
    return {
        "global": {"scrape_interval": every, "evaluation_interval": every},
        "rule_files": [str(directory / "rules" / "*.yaml")],
        "scrape_configs": [
            {
                "job_name": "dcgm-exporter",
                "http_sd_configs": [{"url": f"{dcgm_url}/sd", "refresh_interval": every}],
            },
            {
                "job_name": "gitops-gpu-controller",
                "file_sd_configs": [
                    {"files": [str(directory / "controllers.json")], "refresh_interval": every}
                ],
            },
        ],
    }


def add_controller(state_dir: Path, address: str) -> None:
    """Have the testbed's Prometheus scrape a controller's /metrics at ``host:port``."""
    path = Path(state_dir) / "prometheus" / "controllers.json"
    groups = json.loads(path.read_text()) if path.exists() else []
    targets = {t for g in groups for t in g["targets"]} | {address}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": sorted(targets)}]))
    tmp.replace(path)


def url_of(state_dir: Path) -> str | None:
    path = Path(state_dir) / "prometheus-url"
    return path.read_text().strip() if path.exists() else None


def start(state: State, *, scrape_interval: float = 2.0, timeout: float = 60.0) -> str:
    """Start the DCGM exporters and Prometheus for the testbed in ``state``; the base URL."""
    binary()  # before starting anything
    dcgm_port = controlplane.free_port()
    controlplane._spawn(
        DCGM,
        [
            sys.executable,
            "-m",
            "gitops_gpu_dev.testbed.dcgm",
            f"--kubeconfig={state.kubeconfig}",
            f"--port={dcgm_port}",
        ],
        state,
        die_with_parent=False,
    )
    return start_server(
        state, f"http://{LOOPBACK}:{dcgm_port}", scrape_interval=scrape_interval, timeout=timeout
    )


def start_server(
    state: State, dcgm_url: str, *, scrape_interval: float = 2.0, timeout: float = 60.0
) -> str:
    """Prometheus alone, scraping the exporters behind ``dcgm_url`` (``/sd``)."""
    server = binary()
    directory = Path(state.dir) / "prometheus"
    (directory / "rules").mkdir(parents=True, exist_ok=True)
    if not (directory / "controllers.json").exists():
        (directory / "controllers.json").write_text("[]")
    port = controlplane.free_port()
    cfg = directory / "prometheus.yml"
    cfg.write_text(json.dumps(config(directory, dcgm_url, scrape_interval), indent=2))
    controlplane._spawn(
        PROMETHEUS,
        [
            server,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ],
        state,
        die_with_parent=False,
    )
    url = f"http://{LOOPBACK}:{port}"
    _wait_ready(url, state, timeout)
    (Path(state.dir) / "prometheus-url").write_text(url + "\n")
    return url


def _wait_ready(url: str, state: State, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            log = Path(state.dir) / "logs" / f"{PROMETHEUS}.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise TestbedError(f"prometheus not ready at {url}:\n{tail}", fix=f"see {log}")
        time.sleep(0.3)


def reload(url: str) -> None:
    """Re-read the configuration and rule files (``--web.enable-lifecycle``)."""
    req = urllib.request.Request(f"{url}/-/reload", method="POST")
    with urllib.request.urlopen(req, timeout=10):
        pass


def stop(state: State) -> None:
    for name in (PROMETHEUS, DCGM):
        controlplane.stop_process(state, name)
    (Path(state.dir) / "prometheus-url").unlink(missing_ok=True)
