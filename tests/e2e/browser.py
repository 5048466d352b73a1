"""A real Chromium for the web view's tests: Debian's chromium (``make setup`` installs it)
driven by Playwright. Missing, it fails the test with how to get it; it never skips."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# The binary itself: /usr/bin/chromium is Debian's wrapper script.
CANDIDATES = ("/usr/lib/chromium/chromium", "chromium")
# What Chromium needs on these machines (no user namespaces, a small /dev/shm).
ARGS = ["--no-sandbox", "--no-zygote", "--disable-dev-shm-usage"]


def executable() -> str:
    for c in (os.environ.get("GITOPS_GPU_CHROMIUM", ""), *CANDIDATES):
        found = c if c and Path(c).is_file() else (shutil.which(c) if c else None)
        if found:
            return found
    pytest.fail(
        "no chromium: `make setup` installs Debian's chromium (or set GITOPS_GPU_CHROMIUM)",
        pytrace=False,
    )


@contextmanager
def page(viewport: tuple[int, int] = (1400, 900)) -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415 - a test extra
    except ImportError:
        pytest.fail("playwright is missing: `make setup` installs the test extras", pytrace=False)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable(), args=ARGS, headless=True)
        try:
            width, height = viewport
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def artifacts(name: str) -> Path:
    """Where a test writes what a person looks at (screenshots): GITOPS_GPU_ARTIFACTS, else
    .testbed/artifacts under the repository."""
    root = os.environ.get("GITOPS_GPU_ARTIFACTS")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / ".testbed" / "artifacts"
    out = base / name
    out.mkdir(parents=True, exist_ok=True)
    return out
