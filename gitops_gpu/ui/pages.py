"""HTML for the web view: server-rendered, every value escaped, one small script that swaps
``<main>`` when the event stream says a pass finished (no reload, filters kept)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from gitops_gpu.components.gpu_facts import Gpu
from gitops_gpu.components.holders import age
from gitops_gpu.rollout.phases import format_time
from gitops_gpu.rollout.status import stage_context
from gitops_gpu.ui import model
from gitops_gpu.ui.facts import PassFacts

# Text on background, both ways >= 4.5:1 (WCAG AA); tests/unit/ui checks the ratios.
PALETTE = {
    "success": ("#0b5d1e", "#e3f4e6"),
    "pending": ("#6b4a00", "#fff3d6"),
    "failure": ("#8a1020", "#fde7ea"),
    "error": ("#8a1020", "#fde7ea"),
    "none": ("#3d4450", "#eceff3"),
}
BODY = ("#1b1f24", "#ffffff")
LINK = ("#0b4fa8", "#ffffff")
HEALTH_STATE = {"Healthy": "success", "Progressing": "pending", "Degraded": "failure"}

_CSS = f"""
body{{font:15px/1.45 system-ui,sans-serif;color:{BODY[0]};background:{BODY[1]};margin:0}}
header,nav,main,#filters{{padding:.5rem 1.25rem}} header{{border-bottom:1px solid #c9ced6}}
a{{color:{LINK[0]}}} code{{font-size:.92em}} h1{{font-size:1.35rem;margin:.4rem 0}}
.pipeline{{display:flex;gap:.75rem;list-style:none;padding:0;overflow-x:auto}}
.stage{{border:1px solid #c9ced6;border-radius:6px;padding:.6rem .8rem;min-width:15rem}}
.stage h2{{font-size:1.1rem;margin:0 0 .3rem}} .stage p{{margin:.2rem 0}}
.badge{{display:inline-block;border-radius:3px;padding:0 .35rem;font-weight:600}}
table{{border-collapse:collapse;margin:.5rem 0}} th,td{{text-align:left;padding:.2rem .6rem;
border-bottom:1px solid #dde1e6;vertical-align:top}} caption{{text-align:left;font-weight:600}}
.banner{{background:{PALETTE["failure"][1]};color:{PALETTE["failure"][0]};padding:.4rem .8rem}}
""" + "".join(f".s-{k}{{color:{fg};background:{bg}}}" for k, (fg, bg) in PALETTE.items())

# The whole client: on a "pass" event whose version differs from what the page shows (or on
# every pass, for a node's page; or when REFRESH_S passed, for the ages shown), fetch this
# page's <main> and put it in place.
REFRESH_S = 30
_SCRIPT = """(()=>{const es=new EventSource("/ui/events"),b=document.body;let busy=false,
at=Date.now();es.addEventListener("pass",async(ev)=>{const d=JSON.parse(ev.data);
b.dataset.pass=d.pass;const live=document.getElementById("live");
if(busy)return;if(b.dataset.live!=="pass"&&d.version===b.dataset.version&&
Date.now()-at<REFRESH_MS){live.textContent=d.line+", nothing new";return;}
busy=true;try{const r=await fetch(location.href,{headers:{"X-UI-Fragment":"1"}});
if(r.ok){document.getElementById("main").innerHTML=await r.text();at=Date.now();
b.dataset.version=d.version;b.dataset.fetched=1+(+b.dataset.fetched||0);
live.textContent=d.line+", updated live";}}finally{busy=false;}});})();""".replace(
    "REFRESH_MS", str(REFRESH_S * 1000)
)


def e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def short(sha: str | None) -> str:
    return sha[:7] if sha else "none"


def commit_link(sha: str | None) -> str:
    if not sha:
        return '<span class="badge s-none">none</span>'
    return f'<a href="/ui/commit/{quote(sha)}"><code>{e(short(sha))}</code></a>'


def badge(state: str | None, text: str | None = None) -> str:
    key = state if state in PALETTE else "none"
    return f'<span class="badge s-{key}">{e(text or state or "none")}</span>'


def health_badge(health: str) -> str:
    return badge(HEALTH_STATE.get(health, "none"), health)


def pass_line(facts: PassFacts) -> str:
    """ "pass 12 at 2026-12-06 19:40Z (ok)": the header's words, also sent with each event."""
    return f"pass {facts.seq} at {format_time(facts.at)} ({facts.result})"


def document(
    title: str,
    facts: PassFacts | None,
    main: str,
    *,
    crumbs: str = "",
    filters: str = "",
    version: str = "",
    live: str = "version",
) -> str:
    """The whole page; ``version`` is what it was rendered from, ``live`` "pass" when it
    refetches on every pass rather than on a new version."""
    seq = facts.seq if facts is not None else 0
    where = f" · cluster {e(facts.cluster)}" if facts is not None and facts.cluster else ""
    when = e(pass_line(facts)) if facts else "no pass yet"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{e(title)} · gitops-gpu</title><style>{_CSS}</style></head>"
        f'<body data-pass="{seq}" data-version="{e(version)}" data-live="{e(live)}">'
        f'<header><a href="/ui/"><strong>gitops-gpu</strong></a>{where}'
        f' · <span id="live">{when}</span></header>'
        f'<nav aria-label="Breadcrumb">{crumbs or "<a href=/ui/>Pipeline</a>"}</nav>'
        f'{filters}<main id="main">{main}</main><script>{_SCRIPT}</script></body></html>'
    )


def _banner(facts: PassFacts) -> str:
    out = []
    if facts.stop is not None:
        out.append(f'<p class="banner" role="status">{e(facts.stop.describe())}</p>')
    if facts.held:
        out.append(f'<p class="banner" role="status">held: {e(facts.held)}</p>')
    if facts.error:
        out.append(f'<p class="banner" role="alert">last pass failed: {e(facts.error)}</p>')
    return "".join(out)


def pipeline(facts: PassFacts | None) -> str:
    if facts is None:
        return "<h1>Pipeline</h1><p>The controller has not finished a pass yet.</p>"
    stages = model.stages(facts)
    cards = "".join(stage_card(s, facts.at) for s in stages)
    return (
        f"{_banner(facts)}<h1>Pipeline</h1>"
        f'<ol class="pipeline" aria-label="Stages in order">{cards}</ol>'
        f"{_commit_matrix(facts, stages)}"
    )


def stage_card(s: Mapping[str, Any], now: float) -> str:
    name = s["stage"]
    since = f" for {e(age(now - s['since']))}" if s.get("since") else ""
    lines = [
        f'<h2><a href="/ui/stage/{quote(name)}">{e(name)}</a></h2>',
        f"<p>runs {commit_link(s['commit'])} {badge(s['state']) if s['commit'] else ''}{since}</p>",
    ]
    if s["description"]:
        lines.append(f"<p>{e(s['description'])}</p>")
    taking = s.get("taking")
    if taking:
        lines.append(
            f"<p>taking {commit_link(taking['commit'])} {badge('pending')}: "
            f"{e(taking['description'])}</p>"
        )
    if s.get("approval"):
        lines.append("<p>gate: approval required</p>")
    if s.get("soakLeft") is not None:
        lines.append(f"<p>soak: {e(age(s['soakLeft']))} left</p>")
    if s["hold"]:
        lines.append(f"<p>holds: {e(s['hold'])}</p>")
    lines += [f"<p>waits: {e(w)}</p>" for w in s.get("waits", ())]
    if s["lastEvent"]:
        lines.append(f"<p>last: {e(s['lastEvent'])}</p>")
    lines += [
        f"<p>cluster {e(part['cluster'])}: {commit_link(part['commit'])} {badge(part['state'])}</p>"
        for part in s.get("parts", ())
    ]
    pools = s["pools"]
    healthy = sum(p["healthy"] for p in pools)
    total = sum(p["total"] for p in pools)
    lines.append(f"<p>{healthy}/{total} nodes healthy in {len(pools)} pools</p>")
    failing = next((p["firstFailure"] for p in pools if p["firstFailure"]), None)
    if failing:
        lines.append(f"<p>first failure: {e(failing)}</p>")
    return f'<li class="stage" aria-label="Stage {e(name)}">{"".join(lines)}</li>'


def _commit_matrix(facts: PassFacts, stages: Sequence[Mapping[str, Any]]) -> str:
    rec = model.record(facts)
    head = "".join(f'<th scope="col">{e(s["stage"])}</th>' for s in stages)
    rows = []
    for c in list(facts.commits)[:10]:
        pre = {True: "success", False: "failure", None: None}[c.preflight]
        cells = "".join(
            f"<td>{badge(st.state if st else None)}</td>"
            for s in stages
            for st in (rec.latest(c.sha, stage_context(s["stage"])),)
        )
        rows.append(
            f'<tr><th scope="row">{commit_link(c.sha)}</th><td>{badge(pre)}</td>{cells}</tr>'
        )
    return (
        "<table><caption>Recent commits, by stage</caption><thead><tr>"
        f'<th scope="col">commit</th><th scope="col">preflight</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def filters(path: str, health: str, query: str) -> str:
    options = "".join(
        f'<option value="{v}"{" selected" if v == health else ""}>{v or "any not healthy"}</option>'
        for v in ("", "Degraded", "Unknown", "Progressing", "Skipped")
    )
    return (
        f'<section id="filters" aria-label="Filter nodes"><form method="get" action="{e(path)}">'
        f'<label for="health">state</label> <select id="health" name="health">{options}</select> '
        f'<label for="q">search</label> <input id="q" name="q" type="search" value="{e(query)}"> '
        '<button type="submit">filter</button></form></section>'
    )


def nodes_section(
    facts: PassFacts, pools: Sequence[str], since: Mapping[str, float], params: Mapping[str, str]
) -> str:
    health, query = params.get("health", ""), params.get("q", "")
    counts = model.counts(facts, pools)
    summary = ", ".join(f"{health_badge(k)} {v}" for k, v in sorted(counts.items())) or "no nodes"
    rows = model.not_done(facts, pools, since, health=health, query=query)
    try:
        page = max(1, int(params.get("page", "1")))
    except ValueError:
        page = 1
    shown = rows[(page - 1) * model.PAGE_SIZE : page * model.PAGE_SIZE]
    body = "".join(
        f'<tr><th scope="row"><a href="/ui/node/{quote(r.node)}">{e(r.node)}</a></th>'
        f"<td>{e(r.pool)}</td><td>{health_badge(r.health)}</td><td>{e(r.rung)}</td>"
        f"<td>{e(r.reason)}</td><td>{e(age(facts.at - r.since)) if r.since else ''}</td></tr>"
        for r in shown
    )
    pages = -(-len(rows) // model.PAGE_SIZE)
    nav = _pager(params, page, pages)
    return (
        f"<p>Nodes: {summary}</p>"
        f"<table><caption>Nodes not healthy ({len(rows)})</caption><thead><tr>"
        '<th scope="col">node</th><th scope="col">pool</th><th scope="col">state</th>'
        '<th scope="col">first failing rung</th><th scope="col">reason</th>'
        f'<th scope="col">for</th></tr></thead><tbody>{body}</tbody></table>{nav}'
    )


def _pager(params: Mapping[str, str], page: int, pages: int) -> str:
    if pages <= 1:
        return ""
    links = []
    for label, n in (("previous", page - 1), ("next", page + 1)):
        if 1 <= n <= pages:
            links.append(f'<a href="?{e(urlencode({**params, "page": str(n)}))}">{label}</a>')
    return f'<nav aria-label="Pages">page {page} of {pages} {" ".join(links)}</nav>'


def pools_table(facts: PassFacts, entry: Mapping[str, Any]) -> str:
    rows = "".join(
        f'<tr><th scope="row"><a href="/ui/pool/{quote(p["pool"])}">{e(p["pool"])}</a></th>'
        f"<td>{p['healthy']}/{p['total']}</td><td>{health_badge(p['health'])}</td>"
        f"<td>{e(p['firstFailure'] or '')}</td>"
        f"<td>{e('; '.join(w['text'] for w in p.get('waiting', ())))}</td></tr>"
        for p in entry["pools"]
    )
    return (
        '<table><caption>Pools</caption><thead><tr><th scope="col">pool</th>'
        '<th scope="col">healthy</th><th scope="col">health</th><th scope="col">first failure</th>'
        f'<th scope="col">upgrade waits on</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def key_values(caption: str, items: Iterable[tuple[str, object]]) -> str:
    rows = "".join(f'<tr><th scope="row">{e(k)}</th><td>{e(v)}</td></tr>' for k, v in items)
    return f"<table><caption>{e(caption)}</caption><tbody>{rows}</tbody></table>"


def _plain(obj: object) -> object:
    # The cache keeps a report's GPUs as records (components/gpu_facts.py): shown as JSON.
    if isinstance(obj, Gpu):
        return obj.plain()
    return msgspec.to_builtins(obj) if isinstance(obj, msgspec.Struct) else str(obj)


def pretty(obj: object) -> str:
    return f"<pre>{e(json.dumps(obj, indent=2, sort_keys=True, default=_plain))}</pre>"


def table(caption: str, columns: Sequence[str], body: str) -> str:
    head = "".join(f'<th scope="col">{e(c)}</th>' for c in columns)
    return (
        f"<table><caption>{e(caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def row(first: str, *cells: str) -> str:
    """A table row: ``first`` as its header cell; every value already HTML."""
    return f'<tr><th scope="row">{first}</th>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
