"""DCGM-exporter-shaped metrics for the testbed's fake GPU nodes, on 127.0.0.1.

One HTTP server plays dcgm-exporter on every node: ``/metrics/<node>`` is what the exporter pod
on that node would serve, and ``/sd`` lists those endpoints for Prometheus's HTTP service
discovery (``http_sd_configs``), so nodes created later are scraped too. Per GPU (the node's
``nvidia.com/gpu.count``, model from ``nvidia.com/gpu.product``), with dcgm-exporter's labels
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``:

- ``DCGM_FI_DEV_XID_ERRORS``: the last Xid on the GPU (dcgm-exporter's gauge); the testbed fault
  ``xid79`` sets it to 79 on GPU 0, as the NodeGPUReport then reports GPU 0 lost; ``xid13`` (an
  application Xid, which the verification ladder ignores) sets it to 13 and nothing else;
- ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_GPU_TEMP`` (C; hotter on a faulted node),
  ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (a counter; ``xid79`` adds one double-bit error).

The same faults as everywhere (the ``sim.gitops-gpu.io/fault`` node annotation).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gitops_gpu import kube
from gitops_gpu_dev.testbed.operator_sim import FAULT_ANN

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
Nodes = Callable[[], list[Mapping[str, Any]]]

_HELP = {
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors."),
}


def _uuid(node: str, gpu: int) -> str:
    h = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def node_metrics(node: Mapping[str, Any]) -> str:
    """The text dcgm-exporter would serve on ``node``."""
    meta = node.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    name = str(meta.get("name", ""))
    count = int(labels.get("nvidia.com/gpu.count") or 0)
    model = str(labels.get("nvidia.com/gpu.product", "NVIDIA GPU")).replace("-", " ")
    fault = notes.get(FAULT_ANN)
    series: dict[str, list[str]] = {m: [] for m in _HELP}
    for gpu in range(count):
        tags = (
            f'gpu="{gpu}",UUID="{_uuid(name, gpu)}",device="nvidia{gpu}",'
            f'modelName="{_escape(model)}",Hostname="{_escape(name)}"'
        )
        lost = fault == "xid79" and gpu == 0
        xid = 79 if lost else 13 if fault == "xid13" and gpu == 0 else 0
        values = {
            "DCGM_FI_DEV_XID_ERRORS": xid,
            "DCGM_FI_DEV_GPU_UTIL": 0 if lost else 35 + (gpu * 7) % 50,
            "DCGM_FI_DEV_GPU_TEMP": 91 if fault else 42 + gpu % 5,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1 if lost else 0,
        }
        for metric, value in values.items():
            series[metric].append(f"{metric}{{{tags}}} {value}")
    out = []
    for metric, (kind, text) in _HELP.items():
        out += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}", *series[metric]]
    return "\n".join(out) + "\n"


class DcgmExporters:
    """The HTTP server; ``nodes`` is read at most once a second."""

    def __init__(self, nodes: Nodes, port: int = 0) -> None:
        self._nodes, self._read = nodes, 0.0
        self._cache: list[Mapping[str, Any]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer._serve(self)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, port), Handler)
        self.port: int = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def nodes(self) -> list[Mapping[str, Any]]:
        with self._lock:
            if time.monotonic() - self._read > 1.0:
                self._cache, self._read = list(self._nodes()), time.monotonic()
            return self._cache

    def _gpu_nodes(self) -> dict[str, Mapping[str, Any]]:
        out = {}
        for node in self.nodes():
            labels = (node.get("metadata") or {}).get("labels") or {}
            if labels.get("nvidia.com/gpu.count"):
                out[node["metadata"]["name"]] = node
        return out

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0]
        try:
            nodes = self._gpu_nodes()
        except Exception as exc:  # the apiserver went away: say so, keep serving
            self._reply(req, 503, f"cannot read nodes: {exc}\n", "text/plain")
            return
        if path == "/sd":
            groups = [
                {
                    "targets": [f"{LOOPBACK}:{self.port}"],
                    "labels": {"__metrics_path__": f"/metrics/{name}", "node": name},
                }
                for name in sorted(nodes)
            ]
            self._reply(req, 200, json.dumps(groups), "application/json")
        elif path.startswith("/metrics/") and path[len("/metrics/") :] in nodes:
            body = node_metrics(nodes[path[len("/metrics/") :]])
            self._reply(req, 200, body, "text/plain; version=0.0.4")
        else:
            self._reply(req, 404, "not found\n", "text/plain")

    @staticmethod
    def _reply(req: BaseHTTPRequestHandler, code: int, body: str, kind: str) -> None:
        data = body.encode()
        req.send_response(code)
        req.send_header("Content-Type", kind)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def start(self) -> DcgmExporters:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def kube_nodes(client: kube.Client) -> Nodes:
    return lambda: list(client.list("v1", "Node").get("items") or [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gitops_gpu_dev.testbed.dcgm")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    exporters = DcgmExporters(kube_nodes(kube.Client.from_kubeconfig(args.kubeconfig)), args.port)
    log.info("dcgm-exporter (simulated) on %s: /sd, /metrics/<node>", exporters.url)
    exporters.server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
