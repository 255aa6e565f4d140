"""The node status page (`fabricmon run`, at /): the node's ports with their state and rate
against the expected, the sources with their last success, GPUDirect and GPU-NIC affinity when
there are GPUs, and the current findings with their reasons. It reads the snapshot only.

Every port is one element carrying `data-port="<device>/<port>"` and `data-state` (the worst
finding about that port, so it agrees with `fabricmon check`), a `data-tip` summary and a
`data-detail` URL (the "port" part: every check result and counter of that port). Every source
row carries `data-source="<name>"`. Every string from the host goes through esc()."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from fabricmon.model import ibspec
from fabricmon.checks import OK, STATUS_NAMES, WARNING, Finding, worst
from fabricmon.model.ports import PortView
from fabricmon.model.roce import RoceView
from fabricmon.model.snapshot import Snapshot, SourceState
from fabricmon.pages import remediation
from fabricmon.pages.html import ago, document, esc, findings_table, natural_key, state_name, when
from fabricmon.model.health import health_status, verdict_findings

TITLE = "fabricmon node"
STATE_DOWN = 1            # PortState DOWN (ibspec.PORT_STATES)


# --- what the page says about ports, sources and GPUs ------------------------------------------

def port_order(snap: Snapshot) -> list[tuple[str, int]]:
    return sorted(snap.ib.ports, key=lambda k: (natural_key(k[0]), k[1]))


def port_id(key: tuple[str, int]) -> str:
    return f"{key[0]}/{key[1]}"


def port_findings(snap: Snapshot, key: tuple[str, int]) -> list[Finding]:
    """Every check result about this port (OK included); a finding about the whole device (no
    port) counts for each of its ports."""
    dev, num = key
    return [f for f in snap.findings if f.device == dev and (f.port == num or f.port is None)]


def port_status(snap: Snapshot, key: tuple[str, int]) -> int:
    return worst(port_findings(snap, key))


def _state_text(p: PortView) -> str:
    st = ibspec.PORT_STATES.get(p.state_id, "unknown") if p.state_id is not None else "unknown"
    ph = ibspec.PHYS_STATES.get(p.phys_state_id, "unknown") if p.phys_state_id is not None else "unknown"
    return f"{st}/{ph}"


def _gbps(v: float | None) -> str:
    return "?" if v is None else f"{v:g} Gb/s"


def _expected_text(snap: Snapshot, p: PortView) -> str:
    v = snap.ib.verdicts.get(p.key)
    if v is not None and v.expected_rate_gbps is not None:
        return f"expected {_gbps(v.expected_rate_gbps)}"
    if p.is_ib and p.could_be_width and p.could_be_generation:
        return f"could be {p.could_be_width}X {p.could_be_generation}"
    return "no expectation set"


def _below(snap: Snapshot, p: PortView) -> bool:
    v = snap.ib.verdicts.get(p.key)
    return bool(v and (v.degraded.get("width") or v.degraded.get("speed")))


def _roce_view(snap: Snapshot, key: tuple[str, int]) -> RoceView | None:
    return next((v for v in snap.roce.views if (v.target.device, v.target.port) == key), None)


def _roce_text(snap: Snapshot, key: tuple[str, int]) -> str:
    v = _roce_view(snap, key)
    if v is None:
        return ""
    parts = [v.target.netdev or "netdev unknown"]
    if v.netdev is not None and v.netdev.mtu is not None:
        parts.append(f"MTU {v.netdev.mtu}")
    if v.qos is not None and v.qos.qos is not None:
        prios = v.qos.qos.pfc_priorities()
        parts.append(f"PFC {','.join(map(str, prios))}" if prios else "PFC off")
        if v.qos.qos.trust:
            parts.append(f"trust {v.qos.qos.trust}")
    return " · ".join(parts)


def _netdev(snap: Snapshot, p: PortView) -> str:
    v = _roce_view(snap, p.key)
    if v is not None and v.target.netdev:
        return v.target.netdev
    d = snap.ib.devices.get(p.device)
    return d.netdev if d is not None else ""


def _link(p: PortView) -> str:
    """Width and generation ("4X NDR"); those of a port whose link is not up are stale (ibstat
    and sysfs keep the last trained values), so such a port is just "link down"."""
    if p.state_id == STATE_DOWN or p.phys_state_id not in (None, ibspec.PHYS_LINKUP):
        return "link down"
    return p.link_text()


def port_tip(snap: Snapshot, key: tuple[str, int]) -> str:
    """The multi-line summary the details panel shows for a port."""
    p = snap.ib.ports[key]
    d = snap.ib.devices.get(p.device)
    lines = [f"{p.label()} ({p.link_layer})",
             f"state: {_state_text(p)}",
             f"link: {_link(p)}, {_gbps(p.rate_gbps)} ({_expected_text(snap, p)})"]
    ident = []
    if _netdev(snap, p):
        ident.append(f"netdev {_netdev(snap, p)}")
    if d is not None and d.numa_node is not None and d.numa_node >= 0:
        ident.append(f"NUMA node {d.numa_node}")
    if d is not None and d.hca_type:
        ident.append(d.hca_type + (f" fw {d.firmware_version}" if d.firmware_version else ""))
    if ident:
        lines.append(" · ".join(ident))
    if p.lid or p.port_guid:
        lines.append(" · ".join(x for x in (f"LID {p.lid}" if p.lid else "",
                                            f"GUID {p.port_guid}" if p.port_guid else "") if x))
    roce = _roce_text(snap, key)
    if roce:
        lines.append(f"RoCE: {roce}")
    lines.append(f"counters from: {p.counter_source or 'none'}")
    bad = sorted((f for f in port_findings(snap, key) if f.status != OK), key=lambda f: (-f.status, f.check))
    if bad:
        lines.append("findings:")
        lines += [f"  {f.line()}" for f in bad]
    else:
        lines.append("no findings")
    return "\n".join(lines)


def port_card(snap: Snapshot, key: tuple[str, int]) -> str:
    p = snap.ib.ports[key]
    st = state_name(port_status(snap, key))
    pid = port_id(key)
    bad = sorted((f for f in port_findings(snap, key) if f.status != OK), key=lambda f: (-f.status, f.check))
    if p.is_ib:
        netdev = _netdev(snap, p)
        what = f"IB · {_state_text(p)}" + (f" · {netdev}" if netdev else "")
        link = f"{_link(p)} · {_gbps(p.rate_gbps)}"
        roce = ""
    else:       # a RoCE port's width/generation names are IB's; the rate is what counts
        what = f"RoCE · {_state_text(p)}"
        link = _gbps(p.rate_gbps)
        roce = _roce_text(snap, key)
    short = (_below(snap, p) or not p.up) and st != "ok"
    link_html = f'<span class="sev {st}">{esc(link)}</span>' if short else esc(link)
    body = (f'<div class="rate">{link_html} <span class="muted">{esc(_expected_text(snap, p))}</span></div>'
            + (f'<div class="what">{esc(roce)}</div>' if roce else ""))
    if bad:
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        body += f'<div class="why">{esc(bad[0].check)}{esc(more)}: {esc(bad[0].message)}</div>'
    detail = f"/?part=port&port={quote(pid, safe='')}"
    return (f'<div class="card port {st}" data-port="{esc(pid)}" data-state="{st}" '
            f'data-detail="{esc(detail)}" data-tip="{esc(port_tip(snap, key))}">'
            f'<div class="name">{esc(pid)}</div><div class="what">{esc(what)}</div>{body}</div>')


def ports_section(snap: Snapshot) -> str:
    if not snap.inventory_known:
        return ('<h2>Ports</h2><p class="none" data-inventory="waiting">Waiting for the port inventory: the '
                'inventory sources (sysfs, ibstat) have not answered yet, so no port is judged yet.</p>')
    keys = port_order(snap)
    if not keys:
        why = (f' data-verdict="unknown">UNKNOWN - {esc(snap.unknown)}' if snap.unknown else
               '>No InfiniBand or RoCE port found on this node.')
        return f'<h2>Ports</h2><p class="none" data-inventory="empty"{why}</p>'
    return f'<h2>Ports</h2><div class="cards ports">{"".join(port_card(snap, k) for k in keys)}</div>'


def _duration(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def _source_state(s: SourceState) -> tuple[str, str]:
    """(state name, what the row says): a failing source is a warning, as in `check`."""
    if s.ran and s.active_errors:
        return state_name(WARNING), "up, with errors" if s.up else "down"
    if not s.ran:
        return "ok", "not run yet"
    return "ok", "up" if s.up else "no data"


def source_row(name: str, s: SourceState, now: float) -> str:
    st, text = _source_state(s)
    errors = ", ".join(sorted(s.active_errors))
    totals = ", ".join(f"{k} {v}" for k, v in sorted(s.errors_total.items()) if v)
    tip = "\n".join(x for x in (
        f"source {name}: {text}",
        f"program: {s.program}" if s.program else "",
        f"every {s.interval:g} s, timeout {s.timeout:g} s; {s.runs} run(s)",
        f"last success: {when(s.last_success)} ({ago(s.last_success, now)})" if s.last_success else
        "last success: never",
        f"last run took {_duration(s.duration)}" if s.ran else "",
        f"failing now: {errors}" if errors else "",
        f"errors since start: {totals}" if totals else "errors since start: none",
    ) if x)
    return (f'<tr data-source="{esc(name)}" data-state="{st}" data-tip="{esc(tip)}">'
            f'<td>{esc(name)}</td><td class="sev {st}">{esc(text)}</td>'
            f'<td>{esc(ago(s.last_success, now))}</td><td class="num">{esc(f"{s.interval:g} s")}</td>'
            f'<td class="num">{esc(_duration(s.duration) if s.ran else "")}</td><td class="num">{s.runs}</td>'
            f'<td>{esc(errors or "")}{esc(" (since start: " + totals + ")" if totals else "")}</td></tr>')


def sources_section(snap: Snapshot) -> str:
    active = [(n, s) for n, s in sorted(snap.sources.items()) if s.enabled and s.active]
    off = [(n, "disabled" if not s.enabled else "not installed") for n, s in sorted(snap.sources.items())
           if not (s.enabled and s.active)]
    rows = "".join(source_row(n, s, snap.time) for n, s in active)
    table = (f'<table class="sources"><thead><tr><th>source</th><th>state</th><th>last success</th>'
             f'<th class="num">interval</th><th class="num">last run</th><th class="num">runs</th>'
             f'<th>errors</th></tr></thead><tbody>{rows}</tbody></table>' if active else
             '<p class="none">No active source.</p>')
    muted = (f'<p class="muted" data-sources-off="{len(off)}">Off: '
             f'{esc(", ".join(f"{n} ({why})" for n, why in off))}</p>' if off else "")
    return f"<h2>Sources</h2>{table}{muted}"


def gpu_section(snap: Snapshot) -> str:
    """GPUDirect RDMA and GPU-NIC affinity: one line and a small table, only where there are GPUs."""
    gd, data, aff = snap.gpu.gpudirect, snap.gpu.gpus, snap.gpu.affinity
    gpus = list(data.gpus) if data is not None and data.gpus else []
    if not gpus and not (gd is not None and gd.has_gpus):
        return ""
    out = ["<h2>GPUs and GPUDirect RDMA</h2>"]
    if gd is not None and gd.finding is not None:
        st = state_name(gd.finding.status)
        methods = " · ".join(f"{m} {'yes' if on else 'no'}" for m, on in gd.methods.items())
        how = f' <span class="muted">({esc(methods)})</span>' if methods else ""
        out.append(f'<p class="gpudirect" data-state="{st}"><span class="sev {st}">'
                   f'{esc(STATUS_NAMES[gd.finding.status])}</span> {esc(gd.finding.message)}{how}</p>')
    if gpus:
        rows = []
        for g in sorted(gpus, key=lambda g: g.index):
            name = f"GPU{g.index}"
            mine = [f for f in snap.findings if f.device == name]
            st = state_name(worst(mine))
            cls, near = aff.nearest.get(g.index, ("", ())) if aff is not None else ("", ())
            assigned = aff.assigned.get(g.index, "") if aff is not None else ""
            bad = ", ".join(sorted({f.check for f in mine if f.status != OK}))
            numa = str(g.numa_node) if g.numa_node is not None and g.numa_node >= 0 else "?"
            rows.append(f'<tr data-gpu="{esc(name)}" data-state="{st}"><td>{esc(name)}</td><td>{esc(g.bus_id)}</td>'
                        f'<td class="num">{esc(numa)}</td><td>{esc(", ".join(near) or "none")}'
                        f'{" (" + esc(cls) + ")" if cls else ""}</td><td>{esc(assigned)}</td>'
                        f'<td class="sev {st}">{esc(bad or "ok")}</td></tr>')
        out.append('<table class="gpus"><thead><tr><th>GPU</th><th>bus</th><th class="num">NUMA</th>'
                   '<th>nearest RDMA NIC (path)</th><th>paired NIC</th><th>affinity</th></tr></thead>'
                   f'<tbody>{"".join(rows)}</tbody></table>')
    return "".join(out)


def summary(snap: Snapshot) -> str:
    parts = []
    if snap.inventory_known:
        counts = {"ok": 0, "warning": 0, "critical": 0}
        for k in snap.ib.ports:
            counts[state_name(port_status(snap, k))] += 1
        bad = ", ".join(f"{n} {s}" for s, n in counts.items() if n and s != "ok")
        parts.append(f"{len(snap.ib.ports)} port(s): {counts['ok']} ok" + (f", {bad}" if bad else ""))
    else:
        parts.append("port inventory not known yet")
    active = [s for s in snap.sources.values() if s.enabled and s.active]
    failing = sum(1 for s in active if s.ran and s.active_errors)
    parts.append(f"{len(active)} source(s) active" + (f", {failing} failing" if failing else ""))
    findings = [f for f in verdict_findings(snap) if f.status != OK]
    parts.append(f"{len(findings)} finding(s)" if findings else "no findings")
    return f'<p class="summary">{esc(" · ".join(parts))}</p>'


# --- the parts ---------------------------------------------------------------------------------

def live(snap: Snapshot, query: Mapping[str, str]) -> str:
    return (f'<div id="meta" hidden data-when="{esc(when(snap.time))}" data-state="{state_name(health_status(snap))}"></div>'
            f"{summary(snap)}{remediation.summary(snap.remediation)}{ports_section(snap)}"
            f"<h2>Findings</h2>{findings_table(verdict_findings(snap))}{remediation.table(snap.remediation)}"
            f"{gpu_section(snap)}{sources_section(snap)}")


def port_detail(snap: Snapshot, query: Mapping[str, str]) -> str | None:
    """The "port" part (`/?part=port&port=<device>/<port>`): every check result about the port,
    its RoCE settings and its counters, for the details panel."""
    key = _port_key(snap, query.get("port", ""))
    if key is None:
        return None
    p = snap.ib.ports[key]
    checks = sorted(port_findings(snap, key), key=lambda f: (-f.status, f.check))
    rows = "".join(f'<tr data-state="{state_name(f.status)}"><td class="sev {state_name(f.status)}">'
                   f'{STATUS_NAMES[f.status]}</td><td>{esc(f.check)}</td><td class="msg">{esc(f.message)}</td></tr>'
                   for f in checks)
    out = [f'<h3>Checks of {esc(port_id(key))}</h3>' + (
        f'<table class="port-checks"><tbody>{rows}</tbody></table>' if rows else '<p class="none">No check result.</p>')]
    v = _roce_view(snap, key)
    if v is not None:
        items = [("netdev", v.target.netdev or "unknown")]
        if v.netdev is not None:
            items += [("operstate", v.netdev.operstate or "?"), ("MTU", str(v.netdev.mtu or "?")),
                      ("RoCE MTU", str(v.roce_mtu or "?"))]
        q = v.qos.qos if v.qos is not None else None
        if q is not None:
            items += [("trust", q.trust or "?"),
                      ("PFC priorities", ",".join(map(str, q.pfc_priorities())) or "none")]
        elif v.qos_note:
            items.append(("QoS", v.qos_note))
        out.append("<h3>RoCE</h3><table><tbody>" + "".join(
            f"<tr><td>{esc(k)}</td><td>{esc(x)}</td></tr>" for k, x in items) + "</tbody></table>")
    sat = snap.ib.saturation.get(key, {})
    counters = sorted(p.counters.items())
    if counters:
        crow = "".join(f'<tr data-state="{"warning" if sat.get(n) else "ok"}"><td>{esc(n)}</td>'
                       f'<td class="num">{c}{" (saturated)" if sat.get(n) else ""}</td></tr>' for n, c in counters)
        out.append(f'<h3>Counters ({esc(p.counter_source or "?")})</h3><table class="counters"><tbody>{crow}'
                   f'</tbody></table>')
    if p.hw_counters:
        hrow = "".join(f'<tr><td>{esc(n)}</td><td class="num">{c}</td></tr>' for n, c in sorted(p.hw_counters.items()))
        out.append(f'<h3>hw_counters</h3><table class="counters"><tbody>{hrow}</tbody></table>')
    return "".join(out)


def page(snap: Snapshot, query: Mapping[str, str]) -> str:
    n = len(snap.ib.ports)
    sub = f"{n} port{'' if n == 1 else 's'}" if snap.inventory_known else "inventory pending"
    return document("node", TITLE, live(snap, query), snap.time, health_status(snap), sub, host=snap.host)


def _port_key(snap: Snapshot, value: str) -> tuple[str, int] | None:
    """`<device>/<port>` of a known port (ASCII digits only: `isdigit()` takes `²`), else None."""
    dev, _, num = value.rpartition("/")
    if not num.isascii() or not num.isdigit() or len(num) > 5:
        return None
    key = (dev, int(num))
    return key if key in snap.ib.ports else None


def params(snap: Snapshot, part: str, query: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    """The parameters a part understands, normalised (the page cache's key): unknown ones are
    ignored; None for a port the snapshot does not have (404)."""
    if part != "port":
        return ()
    key = _port_key(snap, query.get("port", ""))
    return None if key is None else (("port", f"{key[0]}/{key[1]}"),)


PARTS = {"page": page, "live": live, "port": port_detail}
