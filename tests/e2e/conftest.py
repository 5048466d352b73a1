"""E2E fixtures: one Env (simulator + controllers) per test on the shared testbed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Env

from gitops_gpu.testbed.session import Testbed


@pytest.fixture
def env(clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path) -> Iterator[Env]:
    e = Env(clean_cluster, fleet_remote, tmp_path)
    try:
        yield e
    finally:
        e.close()
