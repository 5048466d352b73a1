"""With a cluster: one client per fleet.yaml context, nodes read for the matrix and overlaps,
every compiled object dry-run. (The real apiserver path is exercised by integration tests.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gitops_gpu.fleet.scaffold import write_repo
from gitops_gpu.preflight import run_preflight


class Recorder:
    def __init__(self, context: str | None, nodes: list[dict[str, Any]]) -> None:
        self.context, self.nodes, self.dry_runs = context, nodes, []

    def list(self, api_version: str, kind: str, **_: Any) -> dict[str, Any]:
        return {"items": self.nodes}

    def apply(self, obj: Any, *, field_manager: str, dry_run: bool = False, **_: Any) -> Any:
        assert dry_run
        self.dry_runs.append(f"{obj['kind']}/{obj['metadata']['name']}")
        return obj


def _node(name: str, pool: str, product: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"node.kubernetes.io/pool": pool, "nvidia.com/gpu.product": product},
        }
    }


def test_clients_per_cluster_context_and_live_products(tmp_path: Path) -> None:
    root = write_repo(
        tmp_path,
        {
            "a": {
                "cluster": "east",
                "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                "migConfig": "all-1g.10gb",
            },
            "b": {"cluster": "west"},
        },
        clusters=[{"name": "east", "context": "ctx-east"}, {"name": "west", "context": "ctx-west"}],
    )
    nodes = {
        "ctx-east": [_node("e1", "a", "Tesla-V100-SXM2-16GB")],
        "ctx-west": [_node("w1", "b", "NVIDIA-L40S")],
    }
    made: dict[str | None, Recorder] = {}

    def factory(context: str | None) -> Recorder:
        made[context] = Recorder(context, nodes[str(context)])
        return made[context]

    result = run_preflight(root, commit="c", client_factory=factory)
    assert sorted(made) == ["ctx-east", "ctx-west"]
    assert made["ctx-east"].dry_runs == ["ClusterPolicy/cluster-policy", "NVIDIADriver/a"]
    assert made["ctx-west"].dry_runs == ["ClusterPolicy/cluster-policy", "NVIDIADriver/b"]
    # the live V100 wins over the declared H100 (valid for all-1g.10gb), and pool b, which
    # declares no product, is judged by its node's L40S instead of "no GPU product known"
    assert [(f.code, f.pool) for f in result.findings] == [("GG034", "a")]
    assert "Tesla-V100-SXM2-16GB (node e1) is not MIG-capable" in result.findings[0].message
    assert set(result.live_nodes) == {"east", "west"}
