"""The only importer of the kubernetes client (lazily: see _kubernetes).

A thin, typed layer over the REST API that works on plain dicts (manifests as the apiserver
speaks them), so the pure layers never see client model classes. Server-side apply is sent as
``application/apply-patch+yaml`` with a JSON body (JSON is YAML). Every request is counted per
verb and resource so benchmarks can report API traffic.
"""

from __future__ import annotations

import collections
import json
import os
import select
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import urllib3

from gitops_gpu.errors import KubeError

if TYPE_CHECKING:
    import kubernetes.client

Obj = dict[str, Any]


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 as resourceVersion ``a`` is older than, equal to or newer than ``b`` (two
    objects of one resource); None when either is not the positive integer without leading
    zeros that makes them comparable (KEP-5504, stable in Kubernetes 1.35; opaque before)."""
    for v in (a, b):
        if not v.isdigit() or not v.isascii() or v[0] == "0":
            return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


@dataclass(frozen=True)
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        base = (
            "/api/" + self.api_version
            if "/" not in self.api_version
            else "/apis/" + self.api_version
        )
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


_KNOWN = [
    Resource("v1", "Node", "nodes", False),
    Resource("v1", "Namespace", "namespaces", False),
    Resource("v1", "Pod", "pods", True),
    Resource("v1", "Event", "events", True),
    Resource("v1", "ConfigMap", "configmaps", True),
    Resource("v1", "Secret", "secrets", True),
    Resource("v1", "ServiceAccount", "serviceaccounts", True),
    Resource("coordination.k8s.io/v1", "Lease", "leases", True),
    Resource("batch/v1", "Job", "jobs", True),
    Resource(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
    ),
    Resource("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
    Resource("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
    Resource("rbac.authorization.k8s.io/v1", "Role", "roles", True),
    Resource("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
    Resource("nvidia.com/v1", "ClusterPolicy", "clusterpolicies", False),
    Resource("nvidia.com/v1alpha1", "NVIDIADriver", "nvidiadrivers", False),
    Resource("gitops-gpu.io/v1alpha1", "NodeGPUReport", "nodegpureports", False),
    # What deploy/ installs (the chart's objects), for tests that apply it.
    Resource("v1", "Service", "services", True),
    Resource("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True),
    Resource("apps/v1", "Deployment", "deployments", True),
    Resource("apps/v1", "DaemonSet", "daemonsets", True),
    Resource("apps/v1", "ReplicaSet", "replicasets", True),
    Resource("apps/v1", "ControllerRevision", "controllerrevisions", True),
    Resource("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors", True),
    Resource("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", False),
    Resource(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        False,
    ),
    Resource(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        False,
    ),
]
RESOURCES: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in _KNOWN}


def resource(api_version: str, kind: str) -> Resource:
    try:
        return RESOURCES[(api_version, kind)]
    except KeyError:
        raise KubeError(
            f"unknown resource {api_version} {kind}", fix="add it to kube.RESOURCES"
        ) from None


def _in_cluster() -> bool:
    default = os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config"))
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.path.exists(default)


class ConflictError(KubeError):
    """Server-side apply refused: another field manager owns fields we set."""

    def __init__(self, message: str, managers: list[str]) -> None:
        super().__init__(message, fix="re-run with --force-conflicts to take ownership")
        self.managers = managers


class NotFoundError(KubeError):
    pass


class StaleError(KubeError):
    """A write carrying a resourceVersion the object has moved past (409, not an apply
    conflict): read it again and retry."""


# Watches hold a connection each and node labels go out up to 32 at once; the default (5 per
# CPU) would open and drop a TLS connection for every request beyond it.
POOL_CONNECTIONS = 48


def _kubernetes() -> Any:
    """The kubernetes client package, imported when a client is made: it costs 0.17 s, which
    commands that never talk to a cluster (check, compile, --help) do not pay."""
    import kubernetes.client  # noqa: PLC0415
    import kubernetes.config  # noqa: PLC0415

    return kubernetes


def _api(cfg: kubernetes.client.Configuration) -> kubernetes.client.ApiClient:
    k8s = _kubernetes()
    cfg.connection_pool_maxsize = max(POOL_CONNECTIONS, cfg.connection_pool_maxsize)
    api: kubernetes.client.ApiClient = k8s.client.ApiClient(cfg)
    return api


class Client:
    """A kube-apiserver connection speaking plain dicts."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api = api_client
        self.requests: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> Client:
        k8s = _kubernetes()
        cfg = k8s.client.Configuration()
        try:
            if path is None and context is None and _in_cluster():
                # A pod: the service account's token and CA, as client-go does.
                k8s.config.load_incluster_config(client_configuration=cfg)
            else:
                k8s.config.load_kube_config(
                    config_file=path, context=context, client_configuration=cfg
                )
        except Exception as exc:  # the loaders raise several unrelated types
            raise KubeError(
                f"cannot load kubeconfig {path or '~/.kube/config'}: {exc}",
                fix="pass --kubeconfig with a readable kubeconfig file",
            ) from exc
        return cls(_api(cfg))

    @classmethod
    def from_token(cls, host: str, token: str, ca_file: str) -> Client:
        k8s = _kubernetes()
        cfg = k8s.client.Configuration()
        cfg.host = host
        cfg.api_key = {"authorization": "Bearer " + token}
        cfg.ssl_ca_cert = ca_file
        return cls(_api(cfg))

    def close(self) -> None:
        self.api.close()

    # -- raw ------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Any:
        verb = method if not query or "watch" not in query else "WATCH"
        with self._lock:
            self.requests[f"{verb} {path.split('?', maxsplit=1)[0]}"] += 1
        headers = {"Accept": "application/json", "Content-Type": content_type}
        resp = self._call(method, path, query or {}, headers, body, timeout)
        data = resp.read()
        if not 200 <= resp.status < 300:
            raise _translate(resp.status, resp.reason, data, method, path)
        if not data:
            return None
        return decode(data) if decode is not None else json.loads(data)

    def _call(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: dict[str, str],
        body: Any,
        timeout: Any,
    ) -> Any:
        try:
            m, url, hdrs, payload, _ = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query.items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            return self.api.call_api(
                m, url, header_params=hdrs, body=payload, _request_timeout=timeout
            )
        except Exception as exc:  # urllib3 connection errors and the like
            raise KubeError(
                f"{method} {path}: {exc}", fix="check the apiserver is reachable"
            ) from exc

    # -- typed helpers -------------------------------------------------------------------------
    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        try:
            out: Obj = self.request("GET", resource(api_version, kind).path(name, namespace))
        except NotFoundError:
            return None
        return out

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        decode: Callable[[bytes], Any] | None = None,
    ) -> Obj:
        """One LIST; with ``limit``, one page of it (``metadata.continue`` names the next).
        ``decode``: the body's parser (default json.loads)."""
        query = {"labelSelector": label_selector} if label_selector else {}
        if field_selector:
            query["fieldSelector"] = field_selector
        if limit:
            query["limit"] = str(limit)
        if continue_token:
            query["continue"] = continue_token
        out: Obj = self.request(
            "GET",
            resource(api_version, kind).path(None, namespace),
            query=query or None,
            decode=decode,
        )
        return out

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = False,
        dry_run: bool = False,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply ``obj``; with ``dry_run`` the server computes the result only."""
        res = resource(obj["apiVersion"], obj["kind"])
        meta = obj.get("metadata", {})
        path = res.path(meta["name"], meta.get("namespace"))
        if subresource:
            path += "/" + subresource
        query = {"fieldManager": field_manager}
        if force:
            query["force"] = "true"
        if dry_run:
            query["dryRun"] = "All"
        # A JSON string body: JSON is YAML, and a str is sent as-is whatever the content type.
        out: Obj = self.request(
            "PATCH",
            path,
            query=query,
            body=json.dumps(obj),
            content_type="application/apply-patch+yaml",
        )
        return out

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """JSON merge patch (used for node labels, where keys are added and removed)."""
        query = {"fieldManager": field_manager} if field_manager else None
        out: Obj = self.request(
            "PATCH",
            resource(api_version, kind).path(name, namespace),
            query=query,
            body=dict(patch),
            content_type="application/merge-patch+json",
        )
        return out

    def replace(self, obj: Mapping[str, Any]) -> Obj:
        """PUT with the object's resourceVersion: 409 (ConflictError) if someone wrote first."""
        res = resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        out: Obj = self.request(
            "PUT", res.path(meta["name"], meta.get("namespace")), body=dict(obj)
        )
        return out

    def create(self, obj: Mapping[str, Any], *, field_manager: str | None = None) -> Obj:
        res = resource(obj["apiVersion"], obj["kind"])
        query = {"fieldManager": field_manager} if field_manager else None
        out: Obj = self.request(
            "POST",
            res.path(None, obj.get("metadata", {}).get("namespace")),
            query=query,
            body=dict(obj),
        )
        return out

    def pod_log(self, name: str, namespace: str, *, tail_lines: int = 5) -> str:
        """The last lines of a pod's (only) container log, as text."""
        path = resource("v1", "Pod").path(name, namespace) + "/log"
        query = {"tailLines": str(tail_lines), "limitBytes": "4096"}
        resp = self._call("GET", path, query, {"Accept": "text/plain"}, None, 30)
        data = resp.read()
        with self._lock:
            self.requests[f"GET {path}"] += 1
        if not 200 <= resp.status < 300:
            raise _translate(resp.status, resp.reason, data, "GET", path)
        return bytes(data).decode("utf-8", "replace")

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            self.request("DELETE", resource(api_version, kind).path(name, namespace))
        except NotFoundError:
            return False
        return True

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str = "",
        field_selector: str = "",
        namespace: str | None = None,
        decode: Callable[[bytes], Any] | None = None,
        coalesce: float = 0.0,
    ) -> Iterator[Obj]:
        """Yield watch events ({type, object}) until the server closes the stream.
        ``decode``: each event line's parser (default json.loads); ``coalesce``: see _body."""
        parse = decode or json.loads
        path = resource(api_version, kind).path(None, namespace)
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        with self._lock:
            self.requests[f"WATCH {path}"] += 1
        resp = self._call(
            "GET", path, query, {"Accept": "application/json"}, None, (10, timeout_seconds + 30)
        )
        if not 200 <= resp.status < 300:
            raise _translate(resp.status, resp.reason, resp.read(), "WATCH", path)
        raw = resp.response
        try:
            buf = b""
            for data in _body(raw, coalesce):
                # One split per read (not one per line, which copied the rest every time).
                *lines, buf = (buf + data).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield parse(line)
        except (OSError, ValueError, urllib3.exceptions.HTTPError) as exc:
            # A stream cut by the server or the network: the caller re-lists.
            raise KubeError(
                f"WATCH {path}: stream ended: {exc}", fix="retried automatically"
            ) from exc
        finally:
            # Never back to the pool: a stream ended early (stop, error) is still live, and one
            # read by _body left http.client's response unfinished; either would garble the
            # next request on it. A watch's TLS handshake every few minutes costs nothing.
            raw.close()
            raw.release_conn()


def _body(raw: Any, coalesce: float) -> Iterator[bytes]:
    """A watch response's body in the pieces it arrives in. A chunked HTTP/1.1 body (every
    watch) is de-chunked here, from the connection's buffered reader, as many events per
    read as have arrived: urllib3 reads one chunk at a time through several layers of Python,
    which profiled at ~300 us of CPU per event. ``coalesce``: seconds to let events gather
    after each read (fewer wake-ups for a busy stream; each event is that much later)."""
    fp: Any = getattr(getattr(raw, "_fp", None), "fp", None)
    if not getattr(raw, "chunked", False) or not hasattr(fp, "read1"):
        yield from raw.stream(65536)
        return
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    buf = b""
    while True:
        data = fp.read1(65536)
        reads = [buf, data]
        while data and _readable(sock):  # what else has arrived, without waiting for more
            data = fp.read1(65536)
            reads.append(data)
        if not data:
            raise urllib3.exceptions.ProtocolError("connection closed mid-stream")
        buf = b"".join(reads)  # once: a burst read 64 KiB at a time is not copied per read
        out: list[bytes] = []
        pos = 0  # where the next chunk starts: the buffer is cut once per read, not per chunk
        while (eol := buf.find(b"\r\n", pos)) >= 0:
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
            end = eol + 2 + size
            if size == 0:  # the last chunk: the server ended the watch
                if out:
                    yield b"".join(out)
                return
            if len(buf) < end + 2:
                break
            out.append(buf[eol + 2 : end])
            pos = end + 2
        buf = buf[pos:]
        if out:
            yield b"".join(out)
            if coalesce > 0:
                time.sleep(coalesce)


def _readable(sock: Any) -> bool:
    """Bytes are waiting: decrypted in the TLS layer, or on the socket."""
    if sock is None:
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    return bool(select.select([sock], [], [], 0)[0])


def _translate(
    status: int, reason: str | None, body: bytes | None, method: str, path: str
) -> KubeError:
    message = reason or ""
    details: Obj = {}
    try:
        details = json.loads(body or b"{}")
        message = details.get("message", message)
    except (ValueError, TypeError):
        pass
    if status == 404:
        return NotFoundError(
            f"{method} {path}: not found", fix="check the name and that the CRD is installed"
        )
    if status == 409 and method == "PUT":
        return ConflictError(f"{method} {path}: {message}", [])
    if status == 409 and method == "PATCH" and "has been modified" in message:
        return StaleError(f"{method} {path}: {message}", fix="read the object again and retry")
    if status == 409 and "conflict" in message.lower() and method == "PATCH":
        causes = details.get("details", {}).get("causes", [])
        managers = sorted(
            {c.get("message", "").split('"')[1] for c in causes if '"' in c.get("message", "")}
        )
        return ConflictError(f"{method} {path}: {message}", managers)
    if status == 403:
        return KubeError(
            f"{method} {path}: forbidden: {message}", fix="grant the permission in RBAC"
        )
    if status == 422:
        return KubeError(
            f"{method} {path}: invalid: {message}",
            fix="fix the object so the CRD schema accepts it",
        )
    return KubeError(f"{method} {path}: HTTP {status}: {message}", fix="see the apiserver log")
