"""E2E fixtures: one Env (operator, simulated hosts, controllers) per test on the shared testbed.

The GPU Operator is the real one unless ``GITOPS_GPU_E2E_OPERATOR=sim`` (see e2e_harness): it
is started once in the session's testbed, and stopped for a test that asks for the simulated
one. A missing operator source or a failed build fails the tests with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import OPERATOR, Env

from gitops_gpu_dev.testbed.session import Testbed


@pytest.fixture
def env(
    clean_cluster: Testbed, fleet_remote: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Env]:
    e = Env(clean_cluster, fleet_remote, tmp_path, operator=getattr(request, "param", OPERATOR))
    try:
        yield e
    finally:
        e.close()
