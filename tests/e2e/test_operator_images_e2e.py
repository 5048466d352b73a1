"""Operand images against the real GPU Operator, installed as Helm installs it (the chart's env,
its Deployment in the namespace): a base that leaves the validator image to the operator, as the
upstream sample does, passes `check --kubeconfig` and the operator runs the validator with the
image its VALIDATOR_IMAGE names; a toolkit image left to an env the operator lacks is an error
with file, line and fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Env
from ruamel.yaml import YAML

from gitops_gpu.cli import main
from gitops_gpu_dev.testbed import operator_env
from gitops_gpu_dev.testbed.operator import NAMESPACE

pytestmark = pytest.mark.e2e
VALIDATOR_DS = "nvidia-operator-validator"


def _drop_image(component: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        path = work / "base" / "clusterpolicy.yaml"
        yaml = YAML()
        doc = yaml.load(path.read_text())
        for key in ("repository", "image", "version"):
            del doc["spec"][component][key]
        with path.open("w") as fh:
            yaml.dump(doc, fh)

    return edit


def _check(env: Env, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    capsys.readouterr()
    argv = ["check", str(env.remote.work), "--kubeconfig", env.tb.kubeconfig, "--format", "json"]
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)["findings"]


def _validator_images(env: Env) -> set[str]:
    ds = env.tb.client.get("apps/v1", "DaemonSet", VALIDATOR_DS, NAMESPACE)
    spec = ((ds or {}).get("spec") or {}).get("template", {}).get("spec", {})
    return {c["image"] for c in [*spec.get("initContainers", []), *spec.get("containers", [])]}


@pytest.mark.timeout(420)
def test_images_left_to_the_operator_follow_its_helm_environment(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    want = operator_env.container_env(operator_env.helm_deployment(NAMESPACE))["VALIDATOR_IMAGE"]
    env.remote.commit("validator image from the operator's env", _drop_image("validator"))
    rc, findings = _check(env, capsys)
    assert rc == 0, findings
    assert not [f for f in findings if f["code"] in ("GG043", "GG044")], findings
    env.start_nodes(1)
    assert main(["apply", "--repo", env.remote.url, "--kubeconfig", env.tb.kubeconfig]) == 0
    env.wait(
        "the operator runs the validator with the image of its VALIDATOR_IMAGE",
        lambda: want in _validator_images(env),
        240,
    )
    env.remote.commit("toolkit image left to an env the operator lacks", _drop_image("toolkit"))
    rc, findings = _check(env, capsys)
    (found,) = [f for f in findings if f["code"] == "GG043"]
    assert (
        rc == 1 and found["field"] == "spec.toolkit" and found["file"] == "base/clusterpolicy.yaml"
    )
    assert "does not set CONTAINER_TOOLKIT_IMAGE" in found["message"] and found["line"] > 0
