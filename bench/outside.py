"""Measuring a controller from outside its process: CPU and RSS from /proc, API requests from
the apiserver's audit log by identity (each controller runs as its own ServiceAccount).
Imported by bench/controller.py; not a test."""

from __future__ import annotations

import collections
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ruamel.yaml import YAML

from gitops_gpu import kube

BENCH_NS = "gitops-gpu-bench"
TICK = os.sysconf("SC_CLK_TCK")


def audit_args(root: Path, users: list[str]) -> str:
    """kube-apiserver flags logging one line per request (on arrival) of ``users`` only."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
        "rules": [{"level": "Metadata", "users": users}, {"level": "None"}],
    }
    (root / "audit-policy.yaml").write_text(json.dumps(policy))  # JSON is YAML
    return (
        f"--audit-policy-file={root / 'audit-policy.yaml'} --audit-log-path={root / 'audit.log'} "
        "--audit-log-format=json --audit-log-maxsize=0"
    )


def user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def identity_kubeconfig(client: kube.Client, admin: Path, namespace: str, name: str) -> Path:
    """A cluster-admin ServiceAccount with a TokenRequest token, as a kubeconfig beside
    ``admin``: the audit log then tells this identity's requests from everyone else's."""
    if client.get("v1", "Namespace", namespace) is None:
        client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    client.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace},
        }
    )
    client.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"bench-{namespace}-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
    )
    token = client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={"spec": {"expirationSeconds": 86400}},
    )["status"]["token"]
    cfg = YAML(typ="safe").load(admin.read_text())
    cfg["users"] = [{"name": name, "user": {"token": token}}]
    for ctx in cfg["contexts"]:
        ctx["context"]["user"] = name
    out = admin.with_name(f"kubeconfig-{namespace}-{name}")
    out.write_text(json.dumps(cfg))
    out.chmod(0o600)
    return out


@dataclass(frozen=True)
class Sample:
    at: float
    cpu_s: float  # utime + stime, and its waited-for children's (the git it runs)
    rss_mib: float


def sample(pid: int) -> Sample:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime, stime, cutime, cstime (fields 14-17): a controller's git subprocesses are its cost.
    cpu = sum(int(f) for f in fields[11:15]) / TICK
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return Sample(time.monotonic(), cpu, rss)


@dataclass(frozen=True)
class Idle:
    cpu_pct: float  # of one core
    rss_mib: float  # at the end of the window
    seconds: float
    # % of a core per OS thread name (gitops_gpu/osthread.py names them; unnamed threads,
    # thread pools among them, carry the process's name); children's CPU not in
    threads: dict[str, float] = field(default_factory=dict)


def threads(pid: int) -> dict[str, float]:
    """CPU seconds (utime + stime) so far per thread name; threads that ended are not in."""
    out: collections.defaultdict[str, float] = collections.defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended between listing and reading
            continue
        out[name] += (int(fields[11]) + int(fields[12])) / TICK
    return dict(out)


def idle(pids: list[int], seconds: float) -> Idle:
    """CPU of ``pids`` together over ``seconds``, their finished children's included."""
    first = [sample(p) for p in pids]
    per_first = [threads(p) for p in pids]
    time.sleep(seconds)
    last = [sample(p) for p in pids]
    per_last = [threads(p) for p in pids]
    wall = last[0].at - first[0].at
    cpu = sum(b.cpu_s - a.cpu_s for a, b in zip(first, last, strict=True))
    per: collections.defaultdict[str, float] = collections.defaultdict(float)
    for a, b in zip(per_first, per_last, strict=True):
        for name, spent in b.items():
            per[name] += spent - a.get(name, 0.0)
    ranked = sorted(per.items(), key=lambda kv: -kv[1])
    split = {k: 100 * v / wall for k, v in ranked if wall > 0}
    return Idle(100 * cpu / wall, sum(s.rss_mib for s in last), wall, split)


class AuditLog:
    """Requests per identity from the apiserver's JSON audit log, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[tuple[float, str, str, str]] = []  # (unix time, user, verb, resource)
        self._offset = 0

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            ev = json.loads(line)
            ref = ev.get("objectRef") or {}
            resource = ref.get("resource", ev.get("requestURI", "?"))
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            verb = ev.get("verb", "?")
            if "dryRun=" in ev.get("requestURI", ""):
                verb += " (dry-run)"  # a server-side diff, not a write
            when = ev.get("requestReceivedTimestamp", ev.get("stageTimestamp", ""))
            self.events.append((_unix(when), ev["user"]["username"], verb, resource))

    def count(self, users: set[str], since: float, until: float) -> collections.Counter[str]:
        """'verb resource' -> requests by ``users`` in [since, until) (unix time)."""
        self.read()
        return collections.Counter(
            f"{verb} {res}" for t, u, verb, res in self.events if u in users and since <= t < until
        )


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
