"""Shared fixtures. `testbed` brings ONE real control plane up for the whole session.

It is started lazily (only when an integration/e2e test asks for it) and torn down even when
tests fail or the run is interrupted; its processes also die with the pytest process.
With CI=true a testbed that cannot start fails the tests with the reason; it never skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitops_gpu import paths
from gitops_gpu.errors import GitopsGpuError
from gitops_gpu.testbed import session

# A fixed directory: a run killed hard leaves state here that the next run cleans.
TESTBED_DIR = paths.PROJECT_ROOT / ".testbed" / "pytest"


@pytest.fixture(scope="session")
def testbed() -> Iterator[session.Testbed]:
    try:
        tb = session.start(TESTBED_DIR, die_with_parent=True, progress=lambda _m: None)
    except GitopsGpuError as exc:
        pytest.fail(
            f"the local control plane could not start (run `make binaries`):\n{exc}", pytrace=False
        )
    try:
        yield tb
    finally:
        tb.client.close()
        session.stop(TESTBED_DIR)


@pytest.fixture(scope="session")
def upstream() -> Path:
    root = paths.shared_upstream()
    if not root.exists():
        pytest.fail(
            f"upstream data missing at {root}: tests read GPU Operator CRDs and samples "
            "from ../shared/upstream (set GITOPS_GPU_UPSTREAM to override)",
            pytrace=False,
        )
    return root
