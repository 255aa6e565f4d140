"""Remediation on the pages (the node page and the fabric map): which mode each action is in, what is out of
service now and why, what the breaker refused. From the published snapshot's remediation section only."""

from __future__ import annotations

import time

from fabricmon.model.remediation import ISOLATE, Action, RemediationSection, modes_line
from fabricmon.pages.html import esc


def _when(t: float | None) -> str:
    return "" if t is None else time.strftime("%H:%M:%S", time.localtime(t))


def action_text(a: Action) -> str:
    """One action in words, for a tooltip or a table cell."""
    verb = {"todo": "being put out of service", "done": "out of service", "waiting": "waiting",
            "returning": "being returned"}.get(a.state, a.state)
    dry = " (dry run: nothing touched)" if a.mode == "dry_run" else ""
    ret = a.returns_at()
    back = f"; returns at {_when(ret)} unless it fails again" if ret is not None else ""
    waits = f"; waits for {a.waits}" if a.waits else ""
    err = f"; last try failed: {a.error}" if a.error else ""
    return f"{a.kind} {a.id}: {verb}{dry} since {_when(a.effective or a.created)}: {a.reason}{waits}{back}{err}"


def summary(rem: RemediationSection | None) -> str:
    """One line under the header: the modes (always said), what is out now, the breaker."""
    if rem is None:
        return ""
    open_ = [a for a in rem.actions if a.open]
    ports = [a for a in open_ if a.kind == ISOLATE and a.in_effect]
    nodes = [a for a in open_ if a.kind != ISOLATE and a.in_effect]
    parts = [f"remediation: {modes_line(rem.modes)}"]
    if not rem.held:
        parts.append(f"standby ({rem.lease})")
    if ports:
        parts.append(f"{len(ports)} port(s) isolated: " + ", ".join(f"{a.id} {a.label}" for a in ports[:5])
                     + (" …" if len(ports) > 5 else ""))
    if nodes:
        parts.append(f"{len(nodes)} node(s) drained: " + ", ".join(f"{a.id} {a.node}" for a in nodes[:5]))
    waiting = [a for a in open_ if a.state == "waiting" or a.error]
    if waiting:
        parts.append(f"{len(waiting)} waiting or retrying")
    tripped = [k for k, b in rem.breakers.items() if b.tripped]
    if tripped:
        parts.append("breaker tripped: " + ", ".join(tripped))
    dry = " data-dry-run=\"1\"" if any(m == "dry_run" for m in rem.modes.values()) else ""
    return (f'<p class="summary" data-remediation="{esc(modes_line(rem.modes))}"{dry}>{esc(" · ".join(parts))} '
            f'(<code>fabricmon actions</code>)</p>')


def table(rem: RemediationSection | None) -> str:
    """The open actions and this round's refusals."""
    if rem is None or not (any(a.open for a in rem.actions) or rem.refused):
        return ""
    rows = [f'<tr data-action="{esc(a.id)}" data-state="{esc(a.state)}" data-mode="{esc(a.mode)}"><td>{esc(a.id)}</td>'
            f'<td>{esc(a.kind)}</td><td>{esc(a.mode)}</td><td>{esc(a.state)}</td><td>{esc(a.label)}</td>'
            f'<td>{esc(action_text(a))}</td></tr>' for a in rem.actions if a.open]
    rows += [f'<tr data-refused="{esc(r.target)}"><td></td><td>{esc(r.kind)}</td><td></td><td>refused</td>'
             f'<td>{esc(r.label)}</td><td>{esc(r.why)}</td></tr>' for r in rem.refused[:50]]
    return ('<h2>Remediation</h2><table data-remediation-actions="1"><thead><tr><th>id</th><th>action</th><th>mode</th>'
            f'<th>state</th><th>target</th><th>why, what it waits for</th></tr></thead><tbody>{"".join(rows)}</tbody>'
            '</table>')


__all__ = ["action_text", "summary", "table"]
