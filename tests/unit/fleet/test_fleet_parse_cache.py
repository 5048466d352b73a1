"""yamlio keeps parsed files by content: a new commit re-parses only what it changed. Each
caller still gets data of its own, and limits or errors are never skipped by the cache."""

from __future__ import annotations

import pytest

from gitops_gpu.errors import FleetError
from gitops_gpu.fleet import yamlio

TEXT = "kind: NodePool\nspec:\n  gpu:\n    product: NVIDIA-L40S\n  labels: [a, b]\n"


def test_the_same_text_is_parsed_once_and_each_caller_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    real = yamlio._parse_documents

    def counting(file: str, text: str) -> list[yamlio.Document]:
        parsed.append(file)
        return real(file, text)

    monkeypatch.setattr(yamlio, "_parse_documents", counting)
    first = yamlio.parse_single("pools/a.yaml", TEXT + "# cache test 1\n")
    first.data["spec"]["gpu"]["product"] = "changed by a caller"
    first.data["spec"]["labels"].append("c")
    second = yamlio.parse_single("pools/a.yaml", TEXT + "# cache test 1\n")
    assert second.data["spec"] == {"gpu": {"product": "NVIDIA-L40S"}, "labels": ["a", "b"]}
    assert second.where(("spec", "labels")) == (5, 3)
    assert parsed == ["pools/a.yaml"]
    yamlio.parse_single("pools/a.yaml", TEXT.replace("L40S", "B200") + "# cache test 1\n")
    yamlio.parse_single("pools/b.yaml", TEXT + "# cache test 1\n")  # same text, other file
    assert parsed == ["pools/a.yaml", "pools/a.yaml", "pools/b.yaml"]


def test_a_lower_limit_is_applied_to_a_file_parsed_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlio, "LIMITS", yamlio.Limits())
    text = TEXT + "# cache test 2\n"
    assert yamlio.parse_single("pools/a.yaml", text).data["kind"] == "NodePool"
    yamlio.configure(depth=2)
    with pytest.raises(FleetError, match="nesting deeper than 2"):
        yamlio.parse_single("pools/a.yaml", text)


def test_an_error_is_raised_every_time() -> None:
    bad = "kind: [unclosed\n"
    for _ in range(2):
        with pytest.raises(FleetError, match="YAML syntax error"):
            yamlio.parse_single("pools/bad.yaml", bad)
