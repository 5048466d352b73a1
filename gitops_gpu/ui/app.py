"""Routes of the web view, and the facts it serves: the controller publishes each pass's facts
here; the HTTP server asks for a page, or to hear when the next pass is published."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote

from gitops_gpu.components.health import Health
from gitops_gpu.rollout.phases import format_time
from gitops_gpu.ui import model, pages
from gitops_gpu.ui.facts import PassFacts
from gitops_gpu.ui.pages import e

HTML = "text/html; charset=utf-8"
Page = tuple[int, bytes, str]


class WebView:
    def __init__(self) -> None:
        # The last pass's facts with their version, swapped as one: a page rendered from one
        # pass never carries the next one's version.
        self._current: tuple[PassFacts | None, str] = (None, "")
        self._health_moves = 0  # pools whose health object changed, all passes together
        self._lock = threading.Lock()
        self._listeners: list[Callable[[int], None]] = []
        # node -> (its health, since when): how long a node has been as it is, as the view saw
        # it; only for nodes not healthy (a healthy node drops out).
        self._since: dict[str, tuple[str, float]] = {}
        self._seen_health: dict[str, object] = {}

    @property
    def facts(self) -> PassFacts | None:
        return self._current[0]

    @property
    def version(self) -> str:
        """What the pages other than a node's show, as of the last publish (``view_version``)."""
        return self._current[1]

    def event(self) -> str | None:
        """The event stream's data for the last pass: its number, the pages' version and the
        header's line; None before the first pass."""
        facts, version = self._current
        if facts is None:
            return None
        return json.dumps({"pass": facts.seq, "version": version, "line": pages.pass_line(facts)})

    def listen(self, callback: Callable[[int], None]) -> None:
        """``callback(seq)`` after each publish (from the pass's thread: make it cheap)."""
        with self._lock:
            self._listeners.append(callback)

    def publish(self, facts: PassFacts) -> None:
        self._track(facts)
        self._current = (facts, view_version(facts, self._health_moves))
        with self._lock:
            listeners = list(self._listeners)
        for cb in listeners:
            cb(facts.seq)

    def _track(self, facts: PassFacts) -> None:
        for pool, ph in facts.health.items():
            if self._seen_health.get(pool) is ph:
                continue  # the observer kept the pool's health: nothing moved
            self._seen_health[pool] = ph
            self._health_moves += 1
            for n in ph.nodes:
                state = str(n.health)
                if n.health is Health.HEALTHY:
                    self._since.pop(n.node, None)
                elif self._since.get(n.node, ("", 0.0))[0] != state:
                    self._since[n.node] = (state, facts.at)
        for pool in set(self._seen_health) - set(facts.health):
            del self._seen_health[pool]
            self._health_moves += 1

    def since(self) -> dict[str, float]:
        return {n: at for n, (_s, at) in self._since.items()}

    # -- pages -----------------------------------------------------------------------------------
    def page(self, target: str, fragment: bool = False) -> Page:
        """The page at ``target`` (path and query); only ``<main>``'s content when
        ``fragment`` (the live update)."""
        path, _, query = target.partition("?")
        params = dict(parse_qsl(query))
        parts = [unquote(p) for p in path.removeprefix("/ui").strip("/").split("/") if p]
        facts, version = self._current
        routes: dict[str, Callable[[PassFacts | None, str, Mapping[str, str]], Any]] = {
            "stage": self._stage,
            "pool": self._pool,
            "node": self._node,
            "commit": self._commit,
        }
        if not parts:
            title, main, crumbs, filters = "Pipeline", pages.pipeline(facts), "", ""
        elif len(parts) == 2 and parts[0] in routes:
            found = routes[parts[0]](facts, parts[1], params)
            if found is None:
                return 404, f"no {parts[0]} {parts[1]!r} in the last pass".encode(), "text/plain"
            title, main, crumbs, filters = found
        else:
            return 404, b"not found", "text/plain"
        if fragment:
            return 200, main.encode(), HTML
        live = "pass" if parts and parts[0] == "node" else "version"
        doc = pages.document(
            title, facts, main, crumbs=crumbs, filters=filters, version=version, live=live
        )
        return 200, doc.encode(), HTML

    def _crumbs(self, *trail: tuple[str, str]) -> str:
        links = ['<a href="/ui/">Pipeline</a>'] + [f'<a href="{h}">{e(t)}</a>' for t, h in trail]
        return " › ".join(links)

    def _stage(self, facts: PassFacts | None, name: str, params: Mapping[str, str]) -> Any:
        entry = (
            next((s for s in model.stages(facts) if s["stage"] == name), None) if facts else None
        )
        if facts is None or entry is None:
            return None
        pools = [p["pool"] for p in entry["pools"]]
        card = pages.stage_card(entry, facts.at)
        main = (
            f'<h1>Stage {e(name)}</h1><ul class="pipeline">{card}</ul>'
            f"{pages.pools_table(facts, entry)}"
            f"{pages.nodes_section(facts, pools, self.since(), params)}"
        )
        path = f"/ui/stage/{name}"
        return (
            name,
            main,
            self._crumbs((name, path)),
            pages.filters(path, params.get("health", ""), params.get("q", "")),
        )

    def _pool(self, facts: PassFacts | None, name: str, params: Mapping[str, str]) -> Any:
        if facts is None:
            return None
        stage = next(
            (s for s in model.stages(facts) for p in s["pools"] if p["pool"] == name), None
        )
        if stage is None:
            return None
        entry = {**stage, "pools": [p for p in stage["pools"] if p["pool"] == name]}
        obs = facts.pools.get(name)
        facts_rows = [
            ("stage", stage["stage"]),
            ("commit its objects carry", obs.commit if obs else None),
            ("objects in sync", obs.objects_in_sync if obs else None),
            ("summary", obs.summary if obs else ""),
        ]
        main = (
            f"<h1>Pool {e(name)}</h1>{pages.key_values('Pool', facts_rows)}"
            f"{pages.pools_table(facts, entry)}"
            f"{pages.nodes_section(facts, [name], self.since(), params)}"
        )
        path = f"/ui/pool/{name}"
        crumbs = self._crumbs((stage["stage"], f"/ui/stage/{stage['stage']}"), (name, path))
        return (
            name,
            main,
            crumbs,
            pages.filters(path, params.get("health", ""), params.get("q", "")),
        )

    def _node(self, facts: PassFacts | None, name: str, params: Mapping[str, str]) -> Any:
        found = model.find_node(facts, name) if facts is not None else None
        if facts is None or found is None:
            return None
        pool, node = found
        rungs = "".join(
            pages.row(
                e(r.component),
                pages.health_badge(str(r.health)),
                e(r.reason) + (" (switched off in this pool)" if r.skipped else ""),
            )
            for r in node.rungs
        )
        ev = model.evidence(facts, name)
        since = self.since().get(name)
        labels = sorted(
            ev["labels"].items(), key=lambda kv: (not kv[0].startswith("nvidia"), kv[0])
        )
        pods = "".join(pages.row(e(p["name"]), e(p["app"]), e(p["phase"])) for p in ev["pods"])
        report = ev["report"]
        nvml = pages.pretty(report.get("status") or report) if report else "<p>no report</p>"
        state = f"{pages.health_badge(str(node.health))} {e(node.reason)}"
        when = f" since {e(format_time(since))}" if since else ""
        main = (
            f'<h1>Node {e(name)}</h1><p>pool <a href="/ui/pool/{e(pool)}">{e(pool)}</a> · '
            f"{state}{when}</p>"
            + pages.table("Ladder", ("rung", "state", "evidence"), rungs)
            + f"<h2>NVML facts (NodeGPUReport)</h2>{nvml}"
            + pages.table("Operand pods", ("pod", "app", "phase"), pods)
            + pages.key_values("Labels", labels)
        )
        crumbs = self._crumbs((pool, f"/ui/pool/{pool}"), (name, f"/ui/node/{name}"))
        return name, main, crumbs, ""

    def _commit(self, facts: PassFacts | None, sha: str, params: Mapping[str, str]) -> Any:
        if facts is None:
            return None
        full = next((c.sha for c in facts.commits if c.sha.startswith(sha)), sha)
        rec = model.commit_record(facts, full)
        if not rec["known"]:
            return None
        pre = {True: "success", False: "failure", None: None}[rec["preflight"]]
        statuses = "".join(
            pages.row(
                e(s["context"]),
                pages.badge(s["state"]),
                e(s["description"]),
                e(format_time(s["at"])) if s["at"] else "",
                e(s["creator"]),
                e(s["sealed_by"] or "not sealed"),
                _link(s["url"]),
            )
            for s in rec["statuses"]
        )
        ignored = "".join(
            pages.row(e(i["context"]), e(i["state"]), e(i["reason"]), e(i["creator"]))
            for i in rec["ignored"]
        )
        plans = "".join(
            pages.row(e(p["pool"]), e(", ".join(p["objects"]) or "in sync"), str(p["nodes"]))
            for p in rec["plans"]
        )
        columns = ("context", "state", "description", "at", "posted by", "sealed by key", "link")
        main = (
            f"<h1>Commit <code>{e(full)}</code></h1>"
            f"<p>preflight {pages.badge(pre)} {e(rec['summary'])}</p>"
            + pages.table("Record", columns, statuses)
            + pages.table(
                "Ignored statuses (they decide nothing)",
                ("context", "state", "why", "posted by"),
                ignored,
            )
            + pages.table(
                "Plan at this commit (pools whose objects carry it)",
                ("pool", "objects that drift", "nodes to relabel"),
                plans,
            )
        )
        return full[:7], main, self._crumbs((full[:7], f"/ui/commit/{full}")), ""


def view_version(facts: PassFacts, health_moves: int) -> str:
    """A short hash of what the pipeline, stage, pool and commit pages are rendered from, the
    pass's number and clock aside: equal across idle passes, so an open page skips refetching
    (a node's page shows its report's heartbeat and follows every pass instead). Health is
    counted by ``health_moves`` rather than read: 5,000 nodes are not hashed per pass."""
    plans = (
        [
            (key, len(plan.nodes), [(o.kind, o.name, o.action, o.drifted) for o in plan.objects])
            for key, plan in sorted(facts.snap.plans.items())
        ]
        if facts.snap is not None
        else []
    )
    judged = facts.judged
    shown = (
        facts.result,
        facts.head,
        facts.error,
        facts.held,
        facts.cluster,
        tuple(facts.commits),
        facts.compiled.commit if facts.compiled is not None else None,
        tuple(judged.trusted) if judged is not None else (),
        tuple(judged.ignored) if judged is not None else (),
        facts.stop,
        sorted(facts.pools.items()),
        health_moves,
        sorted((k, tuple(v)) for k, v in facts.waits.items()),
        tuple(facts.actions),
        plans,
    )
    return hashlib.blake2b(repr(shown).encode(), digest_size=8).hexdigest()


def _link(url: str) -> str:
    if not url.startswith(("https://", "http://")):
        return ""
    return f'<a href="{e(url)}" rel="noreferrer">forge</a>'
