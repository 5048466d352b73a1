"""Where an idle process spends its CPU: py-spy samples it (outside the measured windows, since
sampling costs the target CPU too) and the top functions are printed, by thread, self and total.

py-spy is not a dependency of the project: pass its path with ``--profile`` (bench/controller.py)
or put it on PATH (``pip install py-spy`` into any venv)."""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
from pathlib import Path

# One line of py-spy's raw (collapsed) output: "thread;frame;frame... count".
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<func>\S+) \((?P<file>[^:]+):\d+\)$")


def py_spy(explicit: str | None) -> str | None:
    return explicit or shutil.which("py-spy")


def record(binary: str, pid: int, seconds: float, out: Path, rate: int = 200) -> Path:
    subprocess.run(
        [binary, "record", "--pid", str(pid), "--duration", str(int(seconds)),
         "--rate", str(rate), "--threads", "--format", "raw", "--output", str(out),
         "--nonblocking"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return out


def _frame(raw: str) -> str:
    m = _FRAME.match(raw.strip())
    if not m:
        return raw.strip()
    path = m["file"]
    short = path.split("gitops_gpu/", 1)[-1] if "gitops_gpu/" in path else Path(path).name
    return f"{m['func']} ({short})"


def summarize(raw: Path, top: int = 15) -> list[str]:
    """Lines of text: samples per thread, then the top functions by total and by self."""
    threads: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        count = int(m["count"])
        thread, *frames = m["stack"].split(";")
        samples += count
        threads[thread.strip()] += count
        seen = set()
        for f in frames:
            if "(threading.py:" in f:
                continue  # every thread's bootstrap: says nothing
            name = _frame(f)
            if name not in seen:
                total[name] += count
                seen.add(name)
        if frames:
            own[_frame(frames[-1])] += count
    if not samples:
        return ["no samples (the process slept through the window)"]

    def pct(n: int) -> str:
        return f"{100 * n / samples:5.1f}%"

    out = [f"{samples} samples on CPU"]
    out += [f"  thread {pct(n)}  {t}" for t, n in threads.most_common(6)]
    out.append("  top by total (function and what it calls):")
    out += [f"    {pct(n)}  {f}" for f, n in total.most_common(top)]
    out.append("  top by self:")
    out += [f"    {pct(n)}  {f}" for f, n in own.most_common(top)]
    return out
