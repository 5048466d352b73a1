"""The disruption plan against the real GPU Operator: for six kinds of change (driver bump,
toolkit bump, device-plugin config switch, MIG profile change, comment only, a cluster-wide
operand change) the operand pods `plan --base` says restart, the driver pods it says are
replaced and the cordons it predicts are exactly the ones the testbed saw (pod UIDs, node
spec.unschedulable), per pool. plan_accuracy.py says what KWOK cannot show."""

from __future__ import annotations

import pytest
from e2e_harness import Env
from plan_accuracy import measure, table

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("env", ["real"], indirect=True)  # the operator is what is measured
def test_plan_predicts_what_the_real_operator_restarts_and_cordons(env: Env) -> None:
    rows = measure(env)
    kinds = {r.change for r in rows}
    assert len(kinds) == 6 and len(rows) == 6 * 4, table(rows)
    assert all(r.ok for r in rows), table(rows)
    # The measurement can tell: the driver bump cordoned and replaced the driver everywhere.
    assert all(
        r.cordon_seen and r.observed == {"driver"} for r in rows if r.change == "driver bump"
    )
