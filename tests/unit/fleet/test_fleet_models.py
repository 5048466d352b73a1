"""Fleet and NodePool shapes: extra fields, durations, selectors, budgets, with positions."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_gpu.fleet.loader import RepoError, RepoLoadError, load_repo
from gitops_gpu.fleet.models import parse_duration
from gitops_gpu.fleet.scaffold import write_repo


def _shape_errors(root: Path) -> list[RepoError]:
    with pytest.raises(RepoLoadError) as info:
        load_repo(root)
    return [e for e in info.value.errors if e.code == "GG002"]


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if needle in t)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10m", 600), ("30s", 30), ("1h", 3600), ("1h30m", 5400), ("500ms", 0.5), (45, 45)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["10", "10 minutes", "-5s", "", True, -1])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_unknown_pool_field_names_known_fields(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {"migconfig": "all-disabled"}})
    (err,) = _shape_errors(root)
    pool = root / "nodepools/a/pool.yaml"
    assert (err.file, err.line) == ("nodepools/a/pool.yaml", _line_of(pool, "migconfig"))
    assert err.field == "spec.migconfig"
    assert "unknown field 'migconfig'" in str(err)
    assert "migConfig" in err.fix  # the known fields are listed


def test_label_value_must_be_a_string(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {"nodeSelector": {"gpu": True}}})
    (err,) = _shape_errors(root)
    assert err.field == "spec.nodeSelector.gpu"
    assert "quote" in err.fix


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"maxUnavailable": "25"}, "spec.maxUnavailable"),
        ({"maxUnavailable": -1}, "spec.maxUnavailable"),
        ({"workload": "vm"}, "spec.workload"),
        ({"disabledComponents": ["dcgm", "dcgm"]}, "spec.disabledComponents"),
        ({"disabledComponents": ["nope"]}, "spec.disabledComponents[0]"),
        ({"nodeSelector": {"bad key!": "x"}}, "spec.nodeSelector"),
        ({"nodeSelector": {"k": "-bad"}}, "spec.nodeSelector"),
        ({"driverType": "cuda"}, "spec.driverType"),
        ({"unavailableNodes": "ignore"}, "spec.unavailableNodes"),
        ({"unavailableNodes": True}, "spec.unavailableNodes"),
    ],
)
def test_pool_field_validation(tmp_path: Path, spec: dict[str, object], field: str) -> None:
    root = write_repo(tmp_path, {"a": spec})
    errs = _shape_errors(root)
    assert [e.field for e in errs] == [field]
    assert errs[0].line > 0 and errs[0].file == "nodepools/a/pool.yaml"


def test_stage_gate_shape(tmp_path: Path) -> None:
    stages = [
        {
            "name": "s",
            "pools": ["a"],
            "gate": {"soak": "ten minutes", "approval": "maybe"},
            "onFailure": "explode",
        }
    ]
    root = write_repo(tmp_path, {"a": {}}, stages=stages)
    fields = sorted(e.field for e in _shape_errors(root))
    assert fields == [
        "spec.stages[0].gate.approval",
        "spec.stages[0].gate.soak",
        "spec.stages[0].onFailure",
    ]


def test_missing_required_field_points_at_parent(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {}})
    pool = root / "nodepools/a/pool.yaml"
    pool.write_text(pool.read_text().replace("kind: NodePool\n", ""))
    (err,) = _shape_errors(root)
    assert err.field == "kind" and "required field 'kind'" in str(err) and err.line == 1


def test_wrong_kind_for_policy_file(tmp_path: Path) -> None:
    root = write_repo(tmp_path, {"a": {}})
    (root / "nodepools/a/clusterpolicy.yaml").write_text(
        "apiVersion: nvidia.com/v1alpha1\nkind: NVIDIADriver\nspec: {}\n"
    )
    fields = sorted(e.field for e in _shape_errors(root))
    assert fields == ["apiVersion", "kind"]
