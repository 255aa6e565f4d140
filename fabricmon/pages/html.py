"""The shell every page shares: one document with a header, the live part (replaced in place
by page.js every few seconds), a details panel and a findings table, in one style. Every
string from the fabric (node descriptions, messages) goes through esc()."""

from __future__ import annotations

import html
import re
import socket
import time
from collections.abc import Callable, Iterable, Sequence

from fabricmon import __version__
from fabricmon.checks import CRITICAL, OK, STATUS_NAMES, WARNING, Finding
from fabricmon.model.health import UNKNOWN      # nothing could be checked: grey, never green
from fabricmon.model.jobs import JobRef

REFRESH_MS = 5000
STATE_NAMES = {OK: "ok", WARNING: "warning", CRITICAL: "critical", UNKNOWN: "unknown"}


def natural_key(text: str) -> tuple[int | str, ...]:
    """Sort key for names with numbers: mlx5_2 before mlx5_10, leaf9 before leaf10 (text and numbers
    alternate, text first: two keys compare str with str and int with int)."""
    return tuple(int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", text))


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def state_name(status: int) -> str:
    return STATE_NAMES.get(status, "critical")


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "never"


def ago(t: float, now: float) -> str:
    if not t:
        return "never"
    s = max(0.0, now - t)
    return f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


def jobs_note(jobs: Sequence[JobRef], links: bool = False) -> str:
    """The jobs a finding hurts, under its reason; on the map (`links`) each id links to its
    footprint (`/?job=<id>`)."""
    if not jobs:
        return ""
    items = ", ".join(f'<a href="/?job={esc(j.job_id)}" data-job="{esc(j.job_id)}">{esc(j.text())}</a>' if links
                      else f'<span data-job="{esc(j.job_id)}">{esc(j.text())}</span>' for j in jobs)
    return f'<div class="jobs" data-jobs="{esc(" ".join(j.job_id for j in jobs))}">jobs: {items}</div>'


def findings_table(findings: Iterable[Finding], names: dict[str, str] | None = None, empty: str = "No findings.",
                   job_links: bool = False, port_label: Callable[[str, int], str] | None = None) -> str:
    """The current WARNING/CRITICAL findings, worst first, each with its reason. `port_label(device, port)`:
    how the port column names a port (the fabric map: a switch port's label, the ifName its message names
    on Ethernet); its number when None."""
    bad = sorted((f for f in findings if f.status != OK), key=lambda f: (-f.status, f.check, f.device, f.port or 0))
    if not bad:
        return f'<p class="none" data-findings="0">{esc(empty)}</p>'
    rows = []
    for f in bad:
        where = (names or {}).get(f.device, f.device) or "fabric"
        port = "" if f.port is None else port_label(f.device, f.port) if port_label is not None else str(f.port)
        rows.append(f'<tr data-finding="{esc(f.check)}" data-state="{state_name(f.status)}">'
                    f'<td class="sev {state_name(f.status)}">{STATUS_NAMES[f.status]}</td><td>{esc(f.check)}</td>'
                    f'<td>{esc(where)}</td><td>{esc(port)}</td><td class="msg">{esc(f.message)}{jobs_note(f.jobs, job_links)}</td></tr>')
    return (f'<table class="findings" data-findings="{len(bad)}"><thead><tr><th>status</th><th>check</th>'
            f'<th>where</th><th>port</th><th>reason</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def document(kind: str, title: str, live: str, snap_time: float, status: int, subtitle: str = "",
             host: str = "") -> str:
    """The whole page: `live` is the fragment page.js replaces on every refresh; `host` the daemon's host
    identity (Snapshot.host), this machine's name when empty."""
    host = host or socket.gethostname()
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc(title)} · {esc(host)}</title><link rel=\"stylesheet\" href=\"/static/page.css\"></head>"
        f"<body data-page=\"{esc(kind)}\" data-snapshot=\"{snap_time:.3f}\" data-refresh=\"{REFRESH_MS}\">"
        f"<header><h1><span class=\"dot {state_name(status)}\" id=\"overall\"></span>{esc(title)}</h1>"
        f"<span class=\"sub\">{esc(host)}{' · ' + esc(subtitle) if subtitle else ''} · fabricmon {esc(__version__)}"
        f" · <span id=\"updated\">snapshot {esc(when(snap_time))}</span></span>"
        "<nav><a href=\"/metrics\">/metrics</a> <a href=\"/healthz\">/healthz</a> <a href=\"/readyz\">/readyz</a> "
        "<a href=\"/api/v1/findings\">/api/v1/findings</a></nav></header>"
        f"<main id=\"live\">{live}</main>"
        "<aside id=\"details\" hidden><button type=\"button\" id=\"close\" title=\"close\">×</button>"
        "<div id=\"details-body\"></div></aside>"
        "<script src=\"/static/page.js\"></script></body></html>\n")


__all__ = ["REFRESH_MS", "ago", "document", "esc", "findings_table", "jobs_note", "natural_key", "state_name", "when"]
