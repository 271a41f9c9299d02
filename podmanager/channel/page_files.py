"""The dashboard's files (`page_assets/`: one HTML page, its CSS and two small scripts, written
by hand: no build step, no library, nothing fetched from a network) and the standalone
timeline file made of the same pieces."""

from __future__ import annotations

from functools import cache
from importlib import resources

ASSETS = ("index.html", "page.css", "timeline.js", "app.js")
TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript"}


@cache
def asset(name: str) -> str:
    if name not in ASSETS:
        raise KeyError(name)
    return (resources.files("podmanager.channel") / "page_assets" / name).read_text(encoding="utf-8")


def content_type(name: str) -> str:
    return TYPES[name[name.rindex("."):]]


def embedded_json(data: str) -> str:
    """JSON safe inside a <script> element: no '</script>' or '<!--' can end or bend it."""
    return data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def standalone_timeline(timeline_json: str, title: str) -> str:
    """One HTML file that draws a run's timeline with no network: the data, the CSS and the
    drawing script all inline."""
    safe_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{safe_title}</title>\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            f"script-src 'unsafe-inline'\">\n<style>{asset('page.css')}</style></head>\n"
            f"<body><header><b>podmanager</b><span>{safe_title}</span></header><main><div id=\"summary\"></div>"
            f"<div id=\"timeline\"></div></main>\n"
            f"<script type=\"application/json\" id=\"timeline-data\">{embedded_json(timeline_json)}</script>\n"
            f"<script>{asset('timeline.js')}</script>\n<script>{_STANDALONE_MAIN}</script></body></html>\n")


_STANDALONE_MAIN = """
"use strict";
const t = JSON.parse(document.getElementById("timeline-data").textContent);
document.getElementById("summary").innerHTML = `<h2>run ${PM.esc(t.run_id)} of ${PM.esc(t.cluster)}: ` +
  `${PM.esc(t.status)}</h2><p class="muted">${t.attempts.length} attempt(s), ${t.incidents.length} incident(s), ` +
  `from ${PM.fmtTime(t.start)} to ${PM.fmtTime(t.end)}${t.live ? " (still running when saved)" : ""}. ` +
  `${PM.esc(t.message)}</p>`;
PM.drawTimeline(document.getElementById("timeline"), t);
"""

