"""`gitops-gpu check --post-status` as the fleet repo's PR pipeline runs it (real git repos)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitops_gpu.cli import main
from gitops_gpu.rollout.gitnotes import GitNotesBackend
from gitops_gpu.rollout.status import PREFLIGHT_CONTEXT


def _edit(path: Path, change: Any) -> None:
    yaml = YAML()
    doc = yaml.load(path.read_text())
    change(doc)
    with path.open("w") as fh:
        yaml.dump(doc, fh)


def test_preflight_status_on_the_checked_commit(
    fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    record = GitNotesBackend(str(fleet_remote.bare), remote=None)
    base = fleet_remote.commit("baseline")
    assert main(["check", str(fleet_remote.work), "--post-status"]) == 0
    ok = record.latest(base, PREFLIGHT_CONTEXT)
    assert ok is not None and ok.state == "success" and ok.description.startswith("clean")

    bump = fleet_remote.commit(
        "bump",
        lambda w: _edit(
            w / "base" / "clusterpolicy.yaml",
            lambda d: d["spec"]["driver"].__setitem__("version", "580.142.01"),
        ),
    )
    assert main(["check", str(fleet_remote.work), "--base", base, "--post-status"]) == 0
    planned = record.latest(bump, PREFLIGHT_CONTEXT)
    assert planned is not None and "changes 4 pools" in planned.description
    assert record.latest(base, PREFLIGHT_CONTEXT) == ok  # written on the checked commit only

    bad = fleet_remote.commit(
        "bad enum",
        lambda w: _edit(
            w / "base" / "clusterpolicy.yaml",
            lambda d: d["spec"]["driver"].__setitem__("kernelModuleType", "bogus"),
        ),
    )
    capsys.readouterr()
    assert main(["check", str(fleet_remote.work), "--post-status"]) == 1
    failed = record.latest(bad, PREFLIGHT_CONTEXT)
    assert failed is not None and failed.state == "failure"
    assert "GG010" in failed.description and len(failed.description) <= 140
    # Idempotent: the same verdict again writes nothing new.
    assert main(["check", str(fleet_remote.work), "--post-status"]) == 1
    assert len(record.list_statuses(bad)) == 1


def test_uncommitted_changes_get_no_status(
    fleet_remote: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    (fleet_remote.work / "fleet.yaml").write_text(
        (fleet_remote.work / "fleet.yaml").read_text() + "\n# local edit\n"
    )
    assert main(["check", str(fleet_remote.work), "--post-status"]) == 2
    assert "no clean git commit" in capsys.readouterr().err
