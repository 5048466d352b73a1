"""The demo's sharing change: infer-l40s moves from 4 to 8 time-slicing replicas per GPU.

Measured from outside while the controller rolls the commit through the stages: when each
node's ``nvidia.com/device-plugin.config`` key changed, the allocatable ``nvidia.com/gpu`` its
host then advertises, and which device-plugin pods the operator re-created. The story holds
when only the changed pool's nodes moved, each after the stage before its own passed, and each
advertises its GPUs x the new replicas.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gitops_gpu import kube, names

Say = Callable[[str], None]
POOL = "infer-l40s"
NEW_CONFIG = "l40s-time-sliced-8"
REPLICAS = 8
PLUGIN_APP = "nvidia-device-plugin-daemonset"
GPU = "nvidia.com/gpu"


def switch_config(doc: dict[str, Any]) -> None:
    doc["spec"]["devicePluginConfig"] = NEW_CONFIG


@dataclass
class Watch:
    """Per-node facts sampled while the commit rolls out."""

    client: kube.Client
    namespace: str = "gpu-operator"
    start: float = field(default_factory=time.monotonic)
    keys: dict[str, str] = field(default_factory=dict)  # node -> key before
    moved: dict[str, float] = field(default_factory=dict)  # node -> seconds when it changed
    stage_passed: dict[str, float] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)

    def begin(self) -> None:
        self.keys = {n: self._key(obj) for n, obj in self._nodes().items()}
        self.pods = self._plugin_pods()
        self.start = time.monotonic()

    def sample(self, stage_states: dict[str, str | None]) -> None:
        now = time.monotonic() - self.start
        for stage, state in stage_states.items():
            if state == "success":
                self.stage_passed.setdefault(stage, now)
        for name, obj in self._nodes().items():
            if name not in self.moved and self._key(obj) != self.keys.get(name, ""):
                self.moved[name] = now

    def report(self, stages: list[str], stage_of: dict[str, str], say: Say) -> bool:
        """Print what happened; True when only POOL's nodes moved, after the stage before
        theirs passed, and each advertises its GPUs x REPLICAS."""
        for stage in stages:
            passed = self.stage_passed.get(stage)
            say(f"   stage {stage:10} " + (f"passed +{passed:.1f}s" if passed else "did not pass"))
        nodes = self._nodes()
        ok = True
        for name in sorted(nodes):
            obj = nodes[name]
            labels = obj["metadata"].get("labels") or {}
            pool = labels.get(names.POOL_LABEL, "?")
            gpus = int(labels.get(names.GPU_COUNT_LABEL, "0") or 0)
            have = (obj.get("status") or {}).get("allocatable", {}).get(GPU, "?")
            if name in self.moved:
                stage = stage_of.get(pool, "")
                at = stages.index(stage) if stage in stages else 0
                before = self.stage_passed.get(stages[at - 1], 0.0) if at > 0 else 0.0
                when = f"key changed at +{self.moved[name]:.1f}s"
                good = pool == POOL and self.moved[name] >= before
                good = good and have == str(gpus * REPLICAS)
            else:
                when, good = "key unchanged", pool != POOL
            ok = ok and good
            say(f"   {name:16} {pool:11} {when}; allocatable {GPU} {have}")
        restarted = len(self.pods - self._plugin_pods())
        say(f"   device-plugin pods re-created by the operator: {restarted}")
        return ok

    def _nodes(self) -> dict[str, Any]:
        items = self.client.list("v1", "Node")["items"]
        return {n["metadata"]["name"]: n for n in items}

    @staticmethod
    def _key(node: Any) -> str:
        return str((node["metadata"].get("labels") or {}).get(names.DEVICE_PLUGIN_CONFIG_LABEL, ""))

    def _plugin_pods(self) -> set[str]:
        pods = self.client.list(
            "v1", "Pod", namespace=self.namespace, label_selector=f"app={PLUGIN_APP}"
        )
        return {p["metadata"]["uid"] for p in pods["items"]}
