"""The web view measured from Chromium (``bench/controller.py --ui``): each page's load time
and transfer size from the browser's own Navigation Timing, the DOM rows it builds, the API
requests the controller made while the pages were viewed, and its idle CPU with a page open
and streaming."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import outside

CHROMIUM = "/usr/lib/chromium/chromium"
ARGS = ["--no-sandbox", "--no-zygote", "--disable-dev-shm-usage"]
LOAD_TARGET_S, TRANSFER_TARGET = 1.0, 500 * 1024
# Requests an idle controller makes whatever anyone looks at (its Lease): not the view's.
BACKGROUND = ("leases",)


@dataclass(frozen=True)
class Load:
    path: str
    seconds: float  # navigation start to the load event
    transfer: int  # bytes over the wire, headers included
    rows: int  # table rows in the DOM


@contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only with --ui

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def load(b: Any, url: str, path: str) -> Load:
    page = b.new_page()
    try:
        page.goto(url + path, wait_until="load")
        nav = page.evaluate(
            """() => { const n = performance.getEntriesByType('navigation')[0];
              return {d: n.loadEventEnd - n.startTime, t: n.transferSize,
                      rows: document.querySelectorAll('tr').length}; }"""
        )
        return Load(path, nav["d"] / 1000, int(nav["t"]), int(nav["rows"]))
    finally:
        page.close()


def measure(
    url: str,
    paths: list[str],
    pid: int,
    idle_seconds: float,
    audit: outside.AuditLog,
    user: str,
    figure: Callable[..., None],
) -> None:
    with browser() as b:
        load(b, url, "/ui/")  # the browser's own start-up is not the page's
        t0 = time.time()
        loads = [load(b, url, p) for _ in range(3) for p in paths]
        viewed = audit.count({user}, t0, time.time())
        for path in paths:
            runs = [x for x in loads if x.path == path]
            mid = sorted(runs, key=lambda x: x.seconds)[len(runs) // 2]
            figure(
                f"UI {path} load (Chromium, median of 3)",
                f"{mid.seconds * 1000:.0f} ms",
                f"< {LOAD_TARGET_S * 1000:.0f} ms",
                mid.seconds < LOAD_TARGET_S,
            )
            figure(
                f"UI {path} transfer",
                f"{mid.transfer / 1024:.0f} KB ({mid.rows} rows)",
                f"< {TRANSFER_TARGET // 1024} KB",
                mid.transfer < TRANSFER_TARGET,
            )
        view = collections.Counter({k: v for k, v in viewed.items() if not k.endswith(BACKGROUND)})
        figure(
            f"UI API requests during {len(loads)} page views (the Lease aside)",
            str(sum(view.values())),
            "0",
            not view,
        )
        page = b.new_page()
        page.goto(url + "/ui/", wait_until="load")
        before = int(page.evaluate("document.body.dataset.pass"))
        idle = outside.idle([pid], idle_seconds)
        after = int(page.evaluate("document.body.dataset.pass"))
        fetched = int(page.evaluate("document.body.dataset.fetched || 0"))
        figure(
            "gitops-gpu idle CPU, the view open and streaming",
            f"{idle.cpu_pct:.2f}% of a core ({after - before} passes heard, {fetched} fetched)",
            "< 1%",
            idle.cpu_pct < 1 and after > before,
        )
        split = ", ".join(f"{k} {v:.2f}%" for k, v in idle.threads.items() if v >= 0.01)
        print(f"    by thread: {split or 'none measurable'}")
        page.close()
