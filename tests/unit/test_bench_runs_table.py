"""bench/runs_table.py: the dated tables are built from the runs' --json files alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gitops_gpu_dev import paths

sys.path.insert(0, str(paths.PROJECT_ROOT / "bench"))
import runs_table

RESULTS = paths.PROJECT_ROOT / "bench" / "results" / "2026-12-07"


def test_a_table_names_each_run_and_marks_its_misses(tmp_path: Path) -> None:
    files = sorted(RESULTS.glob("*.json"))
    assert files, "committed run outputs are what the tables are built from"
    doc = tmp_path / "bench.md"
    doc.write_text("# Benchmarks\n\nprose\n")
    rc = runs_table.main([*map(str, files), "--into", str(doc), "--block", "day"])
    text = doc.read_text()
    for f in files:
        run = json.loads(f.read_text())
        assert f"at {run['commit'][:7]}" in text
        for missed in run["missed"]:
            assert missed.startswith("gitops-gpu")
    assert rc == (1 if any(json.loads(f.read_text())["missed"] for f in files) else 0)
    assert text.count("<!-- runs:day") == 1 and "prose" in text
    again = runs_table.main([*map(str, files), "--into", str(doc), "--block", "day"])
    assert again == rc and doc.read_text() == text  # replaced in place, not appended twice


def test_a_cell_is_the_figure_as_printed_with_its_miss_marked() -> None:
    run = runs_table.Run("r", {"commit": "abc", "rows": [
        {"key": "ours.rss", "value": "154 MiB", "target": "< 150 MiB", "ok": False},
        {"key": "ours.cpu", "value": "0.61%", "target": "< 1%", "ok": True},
    ]})  # fmt: skip
    assert run.cell("ours.rss") == "154 MiB (missed < 150 MiB)"
    assert run.cell("ours.cpu") == "0.61%" and run.cell("ours.webhook") == "not measured"
