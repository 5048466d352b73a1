"""The wheel carries what an installed gitops-gpu needs at run time (no repo beside it)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from wheel_build import build_wheel

from gitops_gpu_dev import paths

CHART = paths.PROJECT_ROOT / "deploy" / "helm" / "gitops-gpu"


def test_wheel_has_package_data_and_entry_point(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in (
        "gitops_gpu/data/version_matrix.yaml",
        "gitops_gpu/data/mig_profiles.yaml",
        "gitops_gpu/data/nvml-snapshots/h100-80gb.json",
        "gitops_gpu/py.typed",
    ):
        assert rel in names, rel
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert re.search(r"^gitops-gpu = gitops_gpu\.cli:main$", text, re.M)
    # Nothing from the repo outside the package (tests, upstream data) rides along.
    assert not [n for n in names if n.startswith(("tests/", "shared/", "fleet-repo-example/"))]
    # nor the dev tools: testbed, simulator, demos, repo maintenance (dev/, not shipped)
    assert not [n for n in names if n.startswith(("gitops_gpu_dev/", "gitops_gpu/testbed/"))]
    assert not [n for n in names if re.search(r"gitops_gpu/(demo|deploy_render|paths)", n)]


def test_dockerfile_matches_the_chart() -> None:
    docker = (paths.PROJECT_ROOT / "deploy" / "Dockerfile").read_text()
    uid = re.search(r"^USER (\d+):", docker, re.M)
    assert uid is not None
    assert f"runAsUser: {uid.group(1)}" in (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'ENTRYPOINT ["gitops-gpu"]' in docker
