"""gate.metrics: PromQL against ``--prometheus-url`` during a stage's soak.

Each query has ``$nodes`` and ``$pools`` replaced by regex alternations of the stage's node and
pool names (``sum(increase(DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"}[10m]))``) and is run as an
instant query. With ``for: 5m`` the worst value over that window is judged
(``max_over_time((Q)[5m:])`` against ``max``, ``min_over_time`` against ``min``). Of several
series the worst one counts. Outcomes (rollout/checks.py):

- a value out of bounds: VIOLATED, "xid: 3 > max 0" (the stage fails);
- Prometheus refused the query (HTTP 400/422): ERROR with its errorType and error text;
- Prometheus unreachable, a 5xx, no series or NaN: NO_DATA (the stage waits, bounded by its
  timeout, or fails with ``onNoData: fail``).
"""

from __future__ import annotations

import http.client
import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from gitops_gpu import boundedhttp, peer_limits
from gitops_gpu.fleet.compiled import MetricSpec, StageSpec
from gitops_gpu.rollout.checks import AnalysisResult, AnalysisState

TIMEOUT = 5.0


def alternation(names: Iterable[str]) -> str:
    """``a|b.c`` as a PromQL string-literal regex: dots escaped (a backslash doubled)."""
    return "|".join(re.escape(n).replace("\\", "\\\\") for n in sorted(set(names)))


def expand(query: str, nodes: Iterable[str], pools: Iterable[str]) -> str:
    return query.replace("$nodes", alternation(nodes)).replace("$pools", alternation(pools))


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


@dataclass(frozen=True)
class _Answer:
    value: float | None  # None: no data
    problem: str = ""  # why no data, or Prometheus's error
    error: bool = False


class Prometheus:
    def __init__(self, url: str, timeout: float = TIMEOUT) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout
        self._opener = boundedhttp.opener()  # a redirect is an error: set the final URL

    def query(self, expr: str, worst: str) -> _Answer:
        """One instant query; of several series the ``worst`` ("max"/"min") value."""
        data = urllib.parse.urlencode({"query": expr}).encode()
        req = urllib.request.Request(
            f"{self.url}/api/v1/query",
            data=data,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        what = "Prometheus"
        limits = peer_limits.current()
        try:
            with boundedhttp.deadline(min(self.timeout, limits.response_deadline)) as dl:
                try:
                    resp = boundedhttp.open_request(self._opener, req, self.timeout, dl, what)
                except urllib.error.HTTPError as exc:
                    with exc:
                        text = boundedhttp.read_capped(exc, 4000, dl, what, truncate=True)
                    return _refused(exc.code, text.decode("utf-8", "replace"))
                with resp:
                    raw = boundedhttp.read_capped(resp, limits.response_bytes, dl, what)
            body = boundedhttp.parse_json(raw, what)
        except boundedhttp.PeerLimitError as exc:
            # too slow reads as unreachable (the stage waits); too large is the query's doing
            return _Answer(
                None, f"Prometheus answer refused: {exc}", error=exc.reason != "deadline"
            )
        except boundedhttp.PeerJSONError as exc:
            return _Answer(None, f"Prometheus answer refused: {exc}", error=True)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return _Answer(None, f"Prometheus unreachable: {exc}")
        if not isinstance(body, dict):
            return _Answer(None, "Prometheus answered with no data object", error=True)
        answer = body.get("data") or {}
        result, kind = answer.get("result") or [], answer.get("resultType")
        if kind == "scalar":
            values = [float(result[1])]
        elif kind == "vector":
            values = [float(s["value"][1]) for s in result or []]
        else:
            return _Answer(None, f"unexpected result type {kind!r}", error=True)
        values = [v for v in values if not math.isnan(v)]
        if not values:
            return _Answer(None, "no data")
        return _Answer(max(values) if worst == "max" else min(values))


def _refused(code: int, text: str) -> _Answer:
    """Prometheus's error answer: its errorType and error for a query it refused."""
    try:
        err = json.loads(text)
        message = f"{err.get('errorType', 'error')}: {err.get('error', text)}"
    except (ValueError, AttributeError):
        message = f"HTTP {code}: {text[:200]}"
    return _Answer(None, message, error=code in (400, 422))


def _text(value: float) -> str:
    return f"{value:g}"


class Analyzer:
    def __init__(self, url: str | None, timeout: float = TIMEOUT) -> None:
        self.prometheus = Prometheus(url, timeout) if url else None

    def evaluate(
        self,
        stage: StageSpec,
        nodes: Iterable[str],
        baseline: Iterable[str] = (),
        baseline_pools: Iterable[str] = (),
    ) -> AnalysisResult:
        """``baseline``: the nodes (and pools) still running the previous commit, for
        ``compareTo: baseline``."""
        nodes, baseline, baseline_pools = list(nodes), list(baseline), list(baseline_pools)
        missing: list[str] = []
        seen: list[str] = []  # within bounds: "xid 0 (max 0)"
        values: list[tuple[str, float]] = []
        for metric in stage.gate.metrics:
            if self.prometheus is None:
                missing.append(f"{metric.name}: no --prometheus-url")
                continue
            if metric.compare_to == "baseline":
                verdict = self._compare(
                    self.prometheus, metric, stage, nodes, baseline, baseline_pools
                )
                if isinstance(verdict, AnalysisResult):
                    return verdict
                if verdict:
                    missing.append(verdict)
                    continue
            for bound, worst in (("max", "max"), ("min", "min")):
                limit = metric.max if bound == "max" else metric.min
                if limit is None:
                    continue
                answer = self.prometheus.query(self._expr(metric, stage, nodes, worst), worst)
                if answer.error:
                    return AnalysisResult(AnalysisState.ERROR, f"{metric.name}: {answer.problem}")
                if answer.value is None:
                    missing.append(f"{metric.name}: {answer.problem}")
                    break
                over = answer.value > limit if bound == "max" else answer.value < limit
                values.append((metric.name, answer.value))
                if over:
                    sign = ">" if bound == "max" else "<"
                    detail = f"{metric.name}: {_text(answer.value)} {sign} {bound} {_text(limit)}"
                    return AnalysisResult(AnalysisState.VIOLATED, detail, tuple(values))
                seen.append(f"{metric.name} {_text(answer.value)} ({bound} {_text(limit)})")
        if missing:
            return AnalysisResult(AnalysisState.NO_DATA, "; ".join(missing), tuple(values))
        return AnalysisResult(AnalysisState.OK, "; ".join(seen), tuple(values))

    def _compare(
        self,
        prometheus: Prometheus,
        metric: MetricSpec,
        stage: StageSpec,
        nodes: list[str],
        baseline: list[str],
        baseline_pools: list[str],
    ) -> AnalysisResult | str:
        """Kayenta-style: the stage's value against the baseline's, worse by at most
        ``tolerance`` (relative). An AnalysisResult ends the evaluation; a string is why there
        is no data; "" is within tolerance."""
        if not baseline:
            return f"{metric.name}: no baseline (no nodes run the previous commit)"
        worst = "max" if metric.better == "lower" else "min"
        ours = prometheus.query(self._expr(metric, stage, nodes, worst), worst)
        base_stage = StageSpec(stage.name, tuple(baseline_pools), stage.gate)
        theirs = prometheus.query(self._expr(metric, base_stage, baseline, worst), worst)
        for answer, whose in ((ours, ""), (theirs, "baseline: ")):
            if answer.error:
                return AnalysisResult(
                    AnalysisState.ERROR, f"{metric.name}: {whose}{answer.problem}"
                )
            if answer.value is None:
                return f"{metric.name}: {whose}{answer.problem}"
        assert ours.value is not None and theirs.value is not None
        slack = abs(theirs.value) * metric.tolerance
        pct = f"{metric.tolerance * 100:g}%"
        if metric.better == "lower" and ours.value > theirs.value + slack:
            detail = f"{metric.name}: {_text(ours.value)} > baseline {_text(theirs.value)} +{pct}"
            return AnalysisResult(AnalysisState.VIOLATED, detail)
        if metric.better == "higher" and ours.value < theirs.value - slack:
            detail = f"{metric.name}: {_text(ours.value)} < baseline {_text(theirs.value)} -{pct}"
            return AnalysisResult(AnalysisState.VIOLATED, detail)
        return ""

    @staticmethod
    def _expr(metric: MetricSpec, stage: StageSpec, nodes: list[str], worst: str) -> str:
        expr = expand(metric.query, nodes, stage.pools)
        if metric.for_seconds > 0:
            expr = f"{worst}_over_time(({expr})[{_duration(metric.for_seconds)}:])"
        return expr
