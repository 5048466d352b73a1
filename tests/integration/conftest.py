"""Integration tests run on the session's testbed without the real GPU Operator: the e2e suite
(collected first) may have left it running, and its operands on a test's fake GPU node would
change what that test reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitops_gpu_dev.testbed import operator


@pytest.fixture(autouse=True)
def _no_real_operator(request: pytest.FixtureRequest) -> Iterator[None]:
    if {"testbed", "clean_cluster"} & set(request.fixturenames):
        tb = request.getfixturevalue("testbed")
        if operator.running(tb.state):
            operator.stop(tb.state)
            operator.clean(tb.client)
    yield
