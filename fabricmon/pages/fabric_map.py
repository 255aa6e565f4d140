"""The live fabric map (`fabricmon fabric run`, at /): the SVG of fabric_layout, drawn by the
server from the last sweep, a legend, a summary line and the current findings; a switch's
port table on demand (`/?part=switch&guid=<guid>`).

Every switch element carries data-switch (node description), data-guid and data-state, every
link data-link ("<guid>:<port>-<guid>:<port>", the lower end first) and data-state, so tests
and operators' scripts can read the picture; a collapsed group carries data-group, a bundle of
cables into one data-bundle."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from fabricmon.model import ibspec
from fabricmon.checks import OK, STATUS_NAMES, WARNING, Finding
from fabricmon.model.fabric import EcmpGroup, FabricSection, host_name
from fabricmon.model.jobs import JobRef
from fabricmon.model.placement import Placement
from fabricmon.model.remediation import Action
from fabricmon.model.snapshot import Snapshot
from fabricmon.pages.fabric_layout import (
    BOX_H, CELL, NO_RATE, RATE_CLASSES, UTIL_SCALE, Bundle, Layout, LinkLine, SwitchBox, layout, short_name,
)
from fabricmon.model.health import health_status, verdict_findings
from fabricmon.pages import remediation
from fabricmon.pages.html import document, esc, findings_table, state_name, when
from fabricmon.pages.remediation import action_text

FIT_WIDTH, MAX_ZOOM = 1300, 1.8     # px a map is scaled up towards, and by at most
FILL = {0: "#e8f5e9", 1: "#fff4cc", 2: "#fbd5d2"}
STROKE = {0: "#2e7d32", 1: "#b58100", 2: "#c62828"}


def head(text: str, limit: int) -> str:
    """The start of a label that does not fit (a group's first name tells most)."""
    return text if len(text) <= limit else text[:max(1, limit - 1)] + "…"


def _fabric(snap: Snapshot) -> FabricSection:
    """The snapshot's fabric section: the map is drawn only for a snapshot that has one (Pages)."""
    if snap.fabric is None:
        raise ValueError("a fabric map of a snapshot without a fabric section")
    return snap.fabric


def _gbps(bps: float | None) -> str:
    return "?" if bps is None else f"{bps * 8 / 1e9:.1f} Gb/s"


def _pct(u: float | None) -> str:
    return "no rate yet" if u is None else f"{u * 100:.0f} %"


def _link_tip(ln: LinkLine) -> str:
    pa, pb, lk = ln.a.port_rec, ln.b.port_rec, ln.link
    cls = lk.rate_class if lk is not None else "?"
    exp = next((p.expected for p in (pa, pb) if p is not None and p.expected), "")
    lines = [f"{ln.a.name} [{ln.a.label}] <-> {ln.b.name} [{ln.b.label}]",
             f"{cls}" + (f" (link class {exp})" if exp else "") + (" DOWN" if ln.down else "")
             + (" DEGRADED" if ln.degraded else ""),
             f"{ln.a.name} -> {ln.b.name}: {_gbps(pa.tx_rate if pa else None)}",
             f"{ln.b.name} -> {ln.a.name}: {_gbps(pb.tx_rate if pb else None)}",
             f"utilisation {_pct(ln.util)}" + (" (hot port of an imbalanced ECMP group)" if ln.hot else "")]
    lines += [f"{STATUS_NAMES[f.status]} {f.check}: {f.message}" for f in ln.findings if f.status != OK]
    return "\n".join(lines)


def _switch_tip(b: SwitchBox, sec: FabricSection, groups: Mapping[str, list[EcmpGroup]]) -> str:
    sw = sec.switches[b.guid]
    up = sum(1 for p in b.up_ports if sec.ports[(b.guid, p)].up)
    down_links = sum(1 for p in b.down_ports if sec.ports[(b.guid, p)].role == "down")
    active, expected = sec.uplinks.get(b.guid, (up, None))
    lines = [b.name, f"GUID 0x{b.guid}  LID {sw.lid if sw.lid is not None else '?'}  level {b.level}  {sw.nports} ports",
             f"uplinks {active}" + (f" of {expected} expected" if expected is not None else "")
             + f", downlinks {down_links}, hosts {b.hosts}" + (f" (+{b.hosts_down} down)" if b.hosts_down else "")
             + (f", {b.external} to switches outside the fabric" if b.external else "")]
    an = sec.aggregation_nodes.get(b.guid)
    if an:
        lines.append(f"SHARP: Aggregation Node on port {', '.join(sec.port_label(b.guid, p) for p in an)} "
                     "(part of the switch, not a host)")
    for gr in groups.get(b.guid, ()):
        if gr.ratio is not None:
            lines.append(f"ECMP {gr.direction}: max/mean {gr.ratio:.2f}, utilisation {_pct(gr.utilisation)}"
                         + (f", hot port{'s' if len(gr.hot) > 1 else ''} "
                            f"{', '.join(sec.port_label(b.guid, p) for p in gr.hot)}"
                            if gr.imbalanced else ""))
    rb = sec.routes.get(b.guid)
    if rb is not None and rb.ratio is not None:
        lines.append(f"routes: max/mean {rb.ratio:.2f} over {len(rb.routes)} uplinks")
    lines += [f"{STATUS_NAMES[f.status]} {f.check}: {f.message}" for f in b.findings if f.status != OK]
    return "\n".join(lines)


def _switch_g(b: SwitchBox, sec: FabricSection, groups: Mapping[str, list[EcmpGroup]],
              footprint: frozenset[str] = frozenset()) -> str:
    st = state_name(b.state)
    job = ' data-in-job="1"' if b.guid in footprint else ""
    ring = (f'<rect class="job" x="{b.x - 4:.1f}" y="{b.y - 4:.1f}" width="{b.w + 8:.0f}" height="{b.h + 8:.0f}" rx="7" '
            f'fill="none" stroke="#1565c0" stroke-width="3"/>' if job else "")
    hosts = ""
    if b.level == 1 or b.hosts or b.hosts_down or b.external:
        txt = f"{b.hosts} hosts" + (f", {b.hosts_down} down" if b.hosts_down else "") \
            + (f", {b.external} external" if b.external else "")
        hosts = f'<text class="small" x="{b.x + b.w / 2:.1f}" y="{b.y + b.h + 12:.1f}" text-anchor="middle">{esc(txt)}</text>'
    sharp, badge = "", ""
    if b.guid in sec.aggregation_nodes:       # the switch's SHARP Aggregation Node
        sharp = ' data-sharp="1"'
        badge = f'<text class="small" x="{b.x + b.w - 4:.1f}" y="{b.y + 10:.1f}" text-anchor="end">SHARP</text>'
    return (f'<g class="sw" data-switch="{esc(b.name)}" data-guid="{b.guid}" data-state="{st}" data-level="{b.level}"{job}{sharp} '
            f'data-detail="/?part=switch&amp;guid={b.guid}"><title>{esc(_switch_tip(b, sec, groups))}</title>{ring}'
            f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.0f}" height="{b.h:.0f}" rx="5" fill="{FILL[b.state]}" '
            f'stroke="{STROKE[b.state]}" stroke-width="{1.5 if b.state == OK else 2.5}"/>'
            f'<text x="{b.x + b.w / 2:.1f}" y="{b.y + BOX_H / 2 + 4:.1f}" text-anchor="middle">{esc(short_name(b.label or b.name))}</text>'
            f'{badge}</g>{hosts}')


def _link_el(ln: LinkLine, footprint: frozenset[str] = frozenset(),
             isolated: Mapping[tuple[str, int], Action] | None = None) -> str:
    st = state_name(ln.state)
    in_job = ln.a.guid in footprint and ln.b.guid in footprint     # a link the job's traffic can cross
    flags = "".join(f' data-{k}="1"' for k, v in (("down", ln.down), ("degraded", ln.degraded),
                                                   ("errors", ln.errors), ("hot", ln.hot), ("in-job", in_job)) if v)
    iso = (isolated or {}).get((ln.a.guid, ln.a.port)) or (isolated or {}).get((ln.b.guid, ln.b.port))
    if iso is not None:        # fabricmon took it out of service (remediation): said on the link, with why
        flags += f' data-isolated="{esc(iso.id)}" data-isolated-mode="{esc(iso.mode)}"'
    util = f' data-util="{ln.util:.3f}"' if ln.util is not None else ""
    coords = f'x1="{ln.x1:.1f}" y1="{ln.y1:.1f}" x2="{ln.x2:.1f}" y2="{ln.y2:.1f}"'
    out = []
    if in_job:             # the job's footprint: a blue band under the link
        out.append(f'<line class="job" {coords} stroke="#1565c0" stroke-width="{ln.width + 7:.1f}" stroke-opacity="0.35"/>')
    if ln.errors:          # rising errors: an outline under the link
        out.append(f'<line class="outline" {coords} stroke="#7b1fa2" stroke-width="{ln.width + 5:.1f}" '
                   f'stroke-opacity="0.55"/>')
    dash = ' stroke-dasharray="6 4"' if ln.down else ""
    tip = _link_tip(ln) + (f"\nisolated by fabricmon: {action_text(iso)}" if iso is not None else "")
    out.append(f'<line data-link="{ln.key}" data-state="{st}"{util}{flags} {coords} stroke="{ln.colour}" '
               f'stroke-width="{ln.width:.1f}"{dash}><title>{esc(tip)}</title></line>')
    mx, my = (ln.x1 + ln.x2) / 2, (ln.y1 + ln.y2) / 2
    if iso is not None:        # a grey bar across the link: out of service on purpose (dashed: a dry run's)
        d = ' stroke-dasharray="2 2"' if iso.mode == "dry_run" else ""
        out.append(f'<g class="mark" data-mark="isolated"><rect x="{mx - 9:.1f}" y="{my - 5:.1f}" width="18" height="10" '
                   f'rx="2" fill="#eceff1" stroke="#37474f"{d}/><line x1="{mx - 6:.1f}" y1="{my:.1f}" x2="{mx + 6:.1f}" '
                   f'y2="{my:.1f}" stroke="#37474f" stroke-width="2"/><title>{esc(action_text(iso))}</title></g>')
    if ln.degraded:        # a marker with what it trained at
        txt = ((f"{ln.link.width}X" if ln.link.width else f"{(ln.link.rate_mbps or 0) // 1000}G" if ln.link.rate_mbps
                else "!") if ln.link is not None else "!")
        out.append(f'<g class="mark" data-mark="degraded"><circle cx="{mx:.1f}" cy="{my:.1f}" r="8" fill="#fff4cc" '
                   f'stroke="#b58100"/><text x="{mx:.1f}" y="{my + 3:.1f}" text-anchor="middle" class="small">'
                   f'{esc(txt)}</text></g>')
    if ln.hot:
        out.append(f'<g class="mark" data-mark="hot"><circle cx="{mx:.1f}" cy="{my:.1f}" r="7" fill="#d32f2f" '
                   f'stroke="#fff" stroke-width="1.5"/></g>')
    return "".join(out)


def svg(lay: Layout, sec: FabricSection, footprint: frozenset[str] = frozenset(),
        isolated: Mapping[tuple[str, int], Action] | None = None) -> str:
    zoom = min(MAX_ZOOM, max(1.0, FIT_WIDTH / lay.width))      # a small fabric drawn larger
    # a map a little wider than the page shrinks to fit it; a much wider one (groups expanded) scrolls
    fit = ' class="fit"' if lay.width <= FIT_WIDTH * 1.5 else ""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg"{fit} viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" '
             f'width="{lay.width * zoom:.0f}" height="{lay.height * zoom:.0f}" role="img" aria-label="fabric map">']
    for row in lay.rows:
        parts.append(f'<text class="small" x="8" y="{row.y + 22:.1f}">{esc(row.label)}</text>')
    for bd in lay.bundles:
        parts.append(
            f'<line data-bundle="{esc(bd.key)}" data-links="{len(bd.links)}" data-state="{state_name(bd.state)}" '
            f'x1="{bd.x1:.1f}" y1="{bd.y1:.1f}" x2="{bd.x2:.1f}" y2="{bd.y2:.1f}" stroke="{bd.colour}" '
            f'stroke-width="{bd.width:.1f}" stroke-opacity="0.8"><title>{esc(_bundle_tip(bd))}</title></line>')
    # quiet links first, so a hot, down or degraded one is drawn on top
    for ln in sorted(lay.links, key=lambda ln: (ln.state, ln.hot, ln.util or 0.0)):
        parts.append(_link_el(ln, footprint, isolated))
    grouped = set()
    for gr in lay.groups:
        if gr.expanded:
            parts.append(f'<g data-group="{esc(gr.id)}" data-state="{state_name(gr.state)}" data-expanded="1">'
                         f'<text class="small toggle" data-toggle="{esc(gr.id)}" x="{_first_x(lay, gr.members):.1f}" '
                         f'y="{min(lay.switches[m].y for m in gr.members) - 4:.1f}">[-] {esc(gr.label)}</text></g>')
            continue
        grouped.update(gr.members)
        count = f" ({len(gr.members)})"
        members = "\n".join(c.name for c in gr.cells[:40]) + ("\n…" if len(gr.cells) > 40 else "")
        cells = "".join(
            f'<rect data-switch="{esc(c.name)}" data-guid="{c.guid}" data-state="{state_name(c.state)}" '
            f'data-detail="/?part=switch&amp;guid={c.guid}" x="{c.x:.1f}" y="{c.y:.1f}" width="{CELL}" height="{CELL}" '
            f'fill="{FILL[c.state] if c.state == OK else STROKE[c.state]}" stroke="{STROKE[c.state]}" stroke-width="0.6">'
            f'<title>{esc(c.name)}</title></rect>' for c in gr.cells)
        parts.append(
            f'<g data-group="{esc(gr.id)}" data-state="{state_name(gr.state)}" data-expanded="0" '
            f'data-switches="{len(gr.members)}"><title>{esc(gr.label)}: {len(gr.members)} switches, worst '
            f'{STATUS_NAMES[gr.state]}; click the box to expand; members:\n{esc(members)}</title>'
            f'<rect data-toggle="{esc(gr.id)}" x="{gr.x:.1f}" y="{gr.y:.1f}" width="{gr.w:.0f}" height="{gr.h:.0f}" '
            f'rx="5" fill="#f6f8fa" stroke="{STROKE[gr.state]}" stroke-width="{1.2 if gr.state == OK else 2.5}"/>'
            f'<text class="toggle" data-toggle="{esc(gr.id)}" x="{gr.x + 6:.1f}" y="{gr.y + 14:.1f}">'
            f'[+] {esc(head(gr.label, int((gr.w - 12) / 6.6) - len(count) - 4))}'
            f'{count}</text>'
            f'{cells}</g>')
    ecmp: dict[str, list[EcmpGroup]] = {}
    for eg in sec.groups:
        ecmp.setdefault(eg.guid, []).append(eg)
    for g, b in lay.switches.items():
        if g not in grouped:
            parts.append(_switch_g(b, sec, ecmp, footprint))
    parts.append("</svg>")
    return "".join(parts)


def _first_x(lay: Layout, members: list[str]) -> float:
    return min(lay.switches[m].x for m in members)


def _bundle_tip(bd: Bundle) -> str:
    down = sum(ln.down for ln in bd.links)
    bad = [ln for ln in bd.links if ln.state != OK]
    lines = [f"{len(bd.links)} links, busiest {_pct(bd.util)}" + (f", {down} down" if down else "")]
    lines += [f"{STATUS_NAMES[ln.state]} {ln.a.name} [{ln.a.label}] <-> {ln.b.name} [{ln.b.label}]"
              + (" hot" if ln.hot else "") + (" down" if ln.down else "") + (" degraded" if ln.degraded else "")
              for ln in bad[:12]]
    if len(bad) > 12:
        lines.append(f"... {len(bad) - 12} more")
    return "\n".join(lines)


def legend() -> str:
    """The fixed colour scale and the line styles, as a small SVG of its own."""
    items: list[tuple[str, str]] = []
    x: float = 0
    out = []
    for _, colour, label in UTIL_SCALE:
        items.append((f'<line x1="0" y1="0" x2="26" y2="0" stroke="{colour}" stroke-width="5"/>', label))
    items.append((f'<line x1="0" y1="0" x2="26" y2="0" stroke="{NO_RATE}" stroke-width="5"/>', "no rate yet"))
    items.append(('<line x1="0" y1="0" x2="26" y2="0" stroke="#c62828" stroke-width="3" stroke-dasharray="6 4"/>',
                  "down"))
    items.append(('<circle cx="13" cy="0" r="7" fill="#fff4cc" stroke="#b58100"/>', "degraded (width/speed)"))
    items.append(('<line x1="0" y1="0" x2="26" y2="0" stroke="#7b1fa2" stroke-width="8" stroke-opacity="0.55"/>'
                  '<line x1="0" y1="0" x2="26" y2="0" stroke="#b0b7bf" stroke-width="3"/>', "rising errors"))
    items.append(('<circle cx="13" cy="0" r="6" fill="#d32f2f" stroke="#fff"/>', "hot port (ECMP imbalance)"))
    items.append(('<rect x="4" y="-5" width="18" height="10" rx="2" fill="#eceff1" stroke="#37474f"/>'
                  '<line x1="7" y1="0" x2="19" y2="0" stroke="#37474f" stroke-width="2"/>', "isolated by fabricmon"))
    for sym, label in items:
        out.append(f'<g transform="translate({x},10)">{sym}<text class="small" x="32" y="4">{esc(label)}</text></g>')
        x += 44 + 6.6 * len(label)
    widths = " · ".join(f"{w:g} px {label}" for _, w, label in RATE_CLASSES)
    return (f'<div class="legend" data-legend="utilisation"><span>link utilisation (busier direction, last sweep):'
            f'</span><svg width="{x:.0f}" height="20" role="img" aria-label="legend">{"".join(out)}</svg>'
            f'<span>width: rate class ({esc(widths)})</span></div>')


def _summary(sec: FabricSection, lay: Layout) -> str:
    links = lay.links + [ln for bd in lay.bundles for ln in bd.links]
    down = sum(ln.down for ln in links)
    degraded = sum(ln.degraded for ln in links)
    hosts = sum(b.hosts for b in lay.switches.values())
    sm = ""
    if sec.sms is not None:
        masters = [s for s in sec.sms if s.state == "MASTER"]
        sm = (f" · SM master LID {masters[0].lid} (priority {masters[0].priority})" if len(masters) == 1
              else " · NO subnet manager answering" if not masters else f" · {len(masters)} SM masters")
    sweep = f" · sweep {sec.sweep_duration:.2f} s" if sec.sweep_duration is not None else ""
    shard = f" · shard {sec.shard[0] + 1} of {sec.shard[1]}" if sec.shard[1] > 1 else ""
    off = f" ({lay.off_shard} cables to other shards not drawn)" if lay.off_shard else ""
    return (f'<p class="summary">{len(sec.switches)} switches on {len([r for r in lay.rows if r.level])} levels · '
            f'{len(links)} inter-switch links ({down} down, {degraded} degraded){esc(off)} · {hosts} hosts'
            f'{esc(sweep)}{esc(sm)}{esc(shard)}</p>')


def live(snap: Snapshot, query: Mapping[str, str]) -> str:
    sec = _fabric(snap)
    meta = f'<div id="meta" hidden data-when="{esc(when(snap.time))}" data-state="{state_name(health_status(snap))}"></div>'
    names = {g: sw.name for g, sw in sec.switches.items()}
    # the port column names a switch port as its message and its series do (Ethernet: the ifName, not the ifIndex)
    table = (f'<h2>Findings</h2>'
             f'{findings_table(verdict_findings(snap), names, job_links=True, port_label=sec.port_label)}')
    if not sec.switches:
        why = (f"No switch could be read: {snap.unknown}. Retrying." if snap.unknown
               else "No fabric discovered yet: waiting for the first discovery.")
        return meta + f'<p class="none" data-empty="1" data-unknown="{esc(snap.unknown)}">{esc(why)}</p>' + table
    expand = [e for e in query.get("expand", "").split(",") if e]
    job = query.get("job", "").strip()
    footprint = frozenset(snap.jobs.switches.get(job, ())) if job and snap.jobs is not None else frozenset()
    lay = layout(sec, snap.findings, expand)
    isolated = snap.remediation.isolated() if snap.remediation is not None else {}
    return (meta + _summary(sec, lay) + remediation.summary(snap.remediation)
            + (_footprint(snap, job, names) if job else "") + legend()
            + f'<div class="map">{svg(lay, sec, footprint, isolated)}</div>' + remediation.table(snap.remediation) + table)


def _job_link(j: JobRef) -> str:
    return f'<a href="/?job={esc(j.job_id)}" data-job="{esc(j.job_id)}">{esc(j.text())}</a>'


def _footprint(snap: Snapshot, job: str, names: Mapping[str, str]) -> str:
    """A job's footprint (`/?job=<id>`): its hosts, its leaves and the switches its traffic can
    cross (outlined on the map, with the links between them), and the findings that name it."""
    jobs = snap.jobs
    if jobs is None:
        return (f'<p class="footprint none" data-footprint="{esc(job)}" data-known="0">No job source runs on this '
                f'collector (fabric.sources.slurm_jobs), so job {esc(job)} cannot be placed.</p>')
    ref = jobs.jobs.get(job)
    if ref is None:
        return (f'<p class="footprint none" data-footprint="{esc(job)}" data-known="0">Job {esc(job)} is not running '
                f'(or not yet seen by the last squeue).</p>')
    sws = jobs.switches.get(job, ())
    levels = _fabric(snap).levels
    leaves = [g for g in sws if levels.get(g) == 1]
    higher = [g for g in sws if levels.get(g, 0) >= 2]
    hosts = jobs.hosts.get(job, ())

    def sw_list(gs: Iterable[str]) -> str:
        return ", ".join(f'<span data-job-switch="{g}">{esc(names.get(g, g))}</span>' for g in gs) or "none"
    hurt = [f for f in snap.findings if f.status != OK and any(j.job_id == job for j in f.jobs)]
    shown = ", ".join(esc(h) for h in hosts[:16]) + (f" +{len(hosts) - 16} more" if len(hosts) > 16 else "")
    flagged = _flagged_paths(snap, frozenset(sws), frozenset(hosts), bool(higher), names)
    return (f'<section class="footprint" data-footprint="{esc(job)}" data-known="1"><h2>Job {esc(ref.text())}</h2>'
            f'<p>{len(hosts)} hosts ({shown}) under {len(leaves)} leaf switch{"es" if len(leaves) != 1 else ""}: '
            f'{sw_list(leaves)}. Its traffic can cross: {sw_list(higher) if higher else "no uplink (one leaf)"}.'
            f' <a href="/">clear</a></p>'
            + _placement(jobs.placement.get(job)) +
            f'<p data-job-findings="{len(hurt)}">{len(hurt)} finding{"s" if len(hurt) != 1 else ""} name this job.</p>'
            f'<div data-job-flagged="{len(flagged)}">'
            + (f'Flagged on its paths: <ul>{"".join(flagged)}</ul>' if flagged else "No flagged link or imbalanced "
               "group on its paths.") + '</div></section>')


def _flagged_paths(snap: Snapshot, footprint: frozenset[str], hosts: frozenset[str], crosses: bool,
                   names: Mapping[str, str]) -> list[str]:
    """The links of a job's paths with a finding (WARNING, CRITICAL) on either end's switch port: its
    hosts' cables, and links between two switches its traffic can cross; and, where its traffic leaves
    its leaves, the imbalanced ECMP groups of its switches (issue 38 item 4)."""
    sec = _fabric(snap)
    out: dict[str, str] = {}
    for f in snap.findings:
        if f.status == OK or f.port is None or f.device not in footprint:
            continue
        sw = sec.switches.get(f.device)
        link = sw.links.get(f.port) if sw is not None else None
        if link is None or not (link.remote_guid in footprint or host_name(link.remote_guid, link.remote_name, {}) in hosts):
            continue
        key = f"{f.device}:{f.port}"
        where = (f'{esc(names.get(f.device, f.device))} port {esc(sec.port_label(f.device, f.port))} to '
                 f'"{esc(link.remote_name)}"[{link.remote_port}]')
        out.setdefault(key, f'<li data-job-flagged-link="{esc(key)}">{where}:')
        out[key] += f' {esc(f.check)} {STATUS_NAMES[f.status]}'
    items = [v + "</li>" for _, v in sorted(out.items())]
    if crosses:
        for gr in sec.groups:
            if gr.imbalanced and gr.guid in footprint:
                items.append(f'<li data-job-flagged-group="{esc(gr.guid)}:{esc(gr.direction)}">'
                             f'{esc(names.get(gr.guid, gr.guid))}: its {esc(gr.direction)} ECMP group is imbalanced'
                             f' (max/mean {gr.ratio or 0:.2f})</li>')
    return items


def _placement(p: Placement | None) -> str:
    """What the job's placement costs (model.placement): the leaves and spines it spans on the rail,
    and what would do."""
    if p is None or not p.nodes:
        return ""
    leaves = f"{len(p.leaves)} leaf switch{'es' if len(p.leaves) != 1 else ''}"
    spines = f"{p.spines} spine{'s' if p.spines != 1 else ''}"
    unplaced = f" ({len(p.unplaced)} more on no leaf of the rail)" if p.unplaced else ""
    example = f" (e.g. {', '.join(p.would_do)})" if p.excess > 0 and p.would_do else ""
    verdict = f"{p.excess} more than needed{example}" if p.excess > 0 else "as few as its node count allows"
    return (f'<p class="placement" data-placement="{esc(p.job_id)}" data-leaves="{len(p.leaves)}" '
            f'data-leaves-needed="{p.leaves_needed}" data-spines="{p.spines}" data-spines-needed="{p.spines_needed}">'
            f'Placement: {p.nodes} node{"s" if p.nodes != 1 else ""}{unplaced} span {leaves} where {p.leaves_needed} '
            f'would do, and {spines} where {p.spines_needed} would do: {esc(verdict)}.</p>')


def page(snap: Snapshot, query: Mapping[str, str]) -> str:
    sec = _fabric(snap)
    # titled by the fabric's name (fabric.name) where it has one, the collector's host then in the header
    sub = " · ".join(([f"collector on {snap.host}"] if sec.name and snap.host else [])
                     + ([f"shard {sec.shard[0] + 1} of {sec.shard[1]}"] if sec.shard[1] > 1 else []))
    return document("fabric", "fabricmon fabric map", live(snap, query), snap.time, health_status(snap), sub,
                    host=sec.name or snap.host)


def switch(snap: Snapshot, query: Mapping[str, str]) -> str | None:
    """One switch's ports: role, state, link against its class, remote end, rates, findings."""
    sec = _fabric(snap)
    guid = query.get("guid", "").lower().removeprefix("0x")
    sw = sec.switches.get(guid)
    if sw is None:
        return None
    by_port: dict[int, list[Finding]] = {}
    for f in snap.findings:
        if f.device == guid and f.port is not None and f.status != OK:
            by_port.setdefault(f.port, []).append(f)
    hot = {p for gr in sec.groups if gr.guid == guid and gr.imbalanced for p in gr.hot}
    isolated = snap.remediation.isolated() if snap.remediation is not None else {}
    rows = []
    for port in sw.ports():
        p = sec.ports.get((guid, port))
        if p is None or p.link is None:
            continue
        lk = p.link
        st = max((f.status for f in by_port.get(port, ())), default=WARNING if port in hot else OK)
        util = p.tx_rate / p.rate_bps if p.tx_rate is not None and p.rate_bps else None
        errs = ", ".join(f"{k} {v}" for k, v in sorted(p.counters.items())
                         if v and (spec := ibspec.COUNTER_BY_NAME.get(k)) is not None and spec.kind != "traffic")
        iso = isolated.get((guid, port))
        why = "<br>".join(([esc("isolated by fabricmon: " + action_text(iso))] if iso is not None else [])
                          + [esc(f.message) for f in by_port.get(port, ())]
                          + (["hot port of an imbalanced ECMP group"] if port in hot else [])
                          + ([esc(p.note)] if p.note else [])        # slower than its class, by design
                          + ([esc(f"{len(sw.neighbours[port])} LLDP neighbours: " + ", ".join(sw.neighbours[port]))]
                             if port in sw.neighbours else []))
        rows.append(f'<tr data-port="{port}" data-state="{state_name(st)}"><td class="num">{esc(p.label)}'
                    f'{" (" + esc(sw.lags[port]) + ")" if port in sw.lags else ""}</td><td>{p.role}</td>'
                    f'<td>{"up" if p.up else "DOWN"}</td><td>{esc(lk.rate_class)}'
                    f'{" / " + esc(p.expected) if p.expected else ""}</td>'
                    f'<td>{esc(lk.remote_name)} [{esc(lk.remote_port_label)}]</td><td class="num">{_gbps(p.tx_rate)}</td>'
                    f'<td class="num">{_gbps(p.rx_rate)}</td><td class="num">{_pct(util) if util is not None else ""}</td>'
                    f'<td>{esc(errs)}</td><td>{why}</td></tr>')
    behind = []
    if snap.jobs is not None:
        behind = [snap.jobs.jobs[j] for j, gs in snap.jobs.switches.items() if guid in gs and j in snap.jobs.jobs]
    jobs = (f'<p data-switch-jobs="{len(behind)}">Jobs whose traffic can cross it: '
            f'{", ".join(_job_link(j) for j in behind[:50]) or "none"}'
            f'{f" +{len(behind) - 50} more" if len(behind) > 50 else ""}</p>' if snap.jobs is not None else "")
    return jobs + (f'<table data-switch-ports="{guid}"><thead><tr><th>port</th><th>role</th><th>state</th>'
            f'<th>link / class</th><th>remote</th><th>tx</th><th>rx</th><th>util</th><th>counters</th>'
            f'<th>findings</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def params(snap: Snapshot, part: str, query: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    """The parameters a part understands, normalised (the page cache's key): `expand` keeps the
    ids of groups that can exist (`<level>-<guid>` of a switch at that level), sorted, once
    each; `job` must look like a Slurm job id; `guid` must name a switch (None: 404). Unknown
    parameters are ignored."""
    sec = _fabric(snap)
    if part == "switch":
        guid = query.get("guid", "").lower().removeprefix("0x")
        return (("guid", guid),) if guid in sec.switches else None
    if part not in ("page", "live"):
        return ()
    keep = set()
    for e in query.get("expand", "").split(",")[:MAX_EXPAND]:
        level, _, guid = e.partition("-")
        if guid in sec.switches and level.isascii() and level.isdigit() and int(level) == sec.levels.get(guid, 0):
            keep.add(e)
    job = query.get("job", "").strip()
    return ((("expand", ",".join(sorted(keep))),) if keep else ()) + \
        ((("job", job),) if JOB_ID.fullmatch(job) else ())


JOB_ID = re.compile(r"[0-9]{1,10}(?:[_+][0-9]{1,10})?")     # a Slurm job id (array and het jobs too)
MAX_EXPAND = 64          # groups open at once in one request; more are ignored
PARTS = {"page": page, "live": live, "switch": switch}

__all__ = ["PARTS", "legend", "live", "page", "params", "svg", "switch"]
