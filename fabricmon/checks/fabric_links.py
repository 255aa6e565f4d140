"""Fabric link health: a cabled switch port that went away is down (reported, never dropped); a
link running below what it can run at is degraded. What a link is judged against, in this order
(docs/fabric-collector.md "What a link is judged against"):

1. **What both ends enable** (InfiniBand PortInfo, read by the sweep: model.link_ability): the
   fastest width and the fastest speed both ends may train at. A link running there is not degraded,
   however slow beside its neighbours (an EDR storage appliance on an HDR leaf, a DDR host on a QDR
   leaf); one below it is.
2. **Its own past**: a link that ran faster since the collector first saw it (to the same far end)
   and runs slower now is degraded.
3. **Its link class** where neither end's abilities are known: the most common width and speed
   among the up links of the same switch level and port role (every other leaf uplink is 4X HDR,
   or 400G on Ethernet). A link narrower than its class is degraded; a host link slower than its
   class that has run at that speed since first seen is slower by design as far as fabricmon can
   tell (hosts mix generations on purpose: storage appliances, older nodes): a note on the port
   (`FabricPort.note`, logged once), never a broken cable. Links between switches are built as one
   class per level and role, so one slower than its class is degraded.

Speeds compare within a kind: IB generations by rank, Ethernet by Mb/s.

Records in (FabricPort with its link, the ends' abilities, each port's past), verdicts and
findings out; nothing here parses or fetches. The past is the check's state (`remember`)."""

from __future__ import annotations

from functools import lru_cache
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from fabricmon.model import ibspec
from fabricmon.checks import OK, Finding
from fabricmon.checks.settings import ChecksConfig
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import FabricPort, FabricSection, Link, SwitchNode, rate_class
from fabricmon.model.link_ability import LinkAbility, best_common

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

log = structlog.get_logger("fabricmon.fabric")
REASONS = ("down", "width", "speed")
CHECK = "degraded_link"          # the node's link check's name: one idea, one name
NEEDS = ("SweepData",)            # a fresh sweep: its link state reads (the topology says what is cabled)
Key = tuple[str, int]
# per port: the best width and speed rank it has run at since first seen, and the far end it ran to
# (a cable moved elsewhere starts again)
Past = tuple[int | None, int | None, Key]


def link_class_norms(ports: Iterable[FabricPort], levels: Mapping[str, int]
                     ) -> dict[tuple[int, str], tuple[int | None, str | int | None]]:
    """(level, role) -> (most common width, most common speed) among the up links of that class;
    a speed is an IB generation name or an Ethernet speed in Mb/s."""
    # counted flat, (class, value) -> links, in the order first seen: the most common value of a class is
    # the first seen among those counted most (Counter.most_common's choice), without a Counter per class
    widths: dict[tuple[tuple[int, str], int], int] = {}
    speeds: dict[tuple[tuple[int, str], str | int], int] = {}
    level = levels.get
    for p in ports:
        lk = p.link
        if lk is None or not p.up:
            continue
        cls = (level(p.guid, 0), p.role)
        if lk.width:
            k = (cls, lk.width)
            widths[k] = widths.get(k, 0) + 1
        sp = lk.rate_mbps or lk.speed
        if sp:
            ks = (cls, sp)
            speeds[ks] = speeds.get(ks, 0) + 1
    best_w: dict[tuple[int, str], tuple[int | None, int]] = {}
    best_s: dict[tuple[int, str], tuple[str | int | None, int]] = {}
    for (cls, w), n in widths.items():
        if n > best_w.get(cls, (None, 0))[1]:
            best_w[cls] = (w, n)
    for (cls, sp), n in speeds.items():
        if n > best_s.get(cls, (None, 0))[1]:
            best_s[cls] = (sp, n)
    return {cls: (best_w.get(cls, (None, 0))[0], best_s.get(cls, (None, 0))[0]) for cls in set(best_w) | set(best_s)}


def _norm_link(width: int | None, speed: str | int | None) -> Link:
    """A stand-in link at a class norm, to rank and name it as a link."""
    mbps = speed if isinstance(speed, int) else None
    return Link(0, "", 0, "", "", width, speed if isinstance(speed, str) else None, rate_mbps=mbps)


@lru_cache(maxsize=1024)
def _norm(width: int | None, speed: str | int | None) -> tuple[str, int | None]:
    """A class norm's (rate class, speed rank): a fabric has a handful of norms, judged for each of its
    ports every sweep."""
    lk = _norm_link(width, speed)
    return lk.rate_class, lk.speed_rank


@lru_cache(maxsize=1024)
def _link_facts(width: int | None, speed: str | None, rate_mbps: int | None) -> tuple[int | None, float | None, str]:
    """A link's (speed rank, data rate in bytes/s, rate class), by its width and speed (a few distinct ones)."""
    lk = Link(0, "", 0, "", "", width, speed, rate_mbps=rate_mbps)
    return lk.speed_rank, lk.rate_bps, lk.rate_class


def ceiling(p: FabricPort, abilities: Mapping[Key, LinkAbility]) -> tuple[int, str] | None:
    """The fastest width and speed both ends of a port's link enable, None where either is unknown."""
    if p.link is None or not abilities:
        return None
    lk = p.link
    return best_common(abilities.get((p.guid, p.port)), abilities.get((lk.remote_guid, lk.remote_port)))


def remember(ports: Mapping[Key, FabricPort], past: Mapping[Key, Past]) -> dict[Key, Past]:
    """Each cabled link's best width and speed since first seen (the caller keeps it between sweeps);
    a link moved to another far end starts again. What both ends enable does not reset it: a port
    whose enabled set was lowered under a running link is not told apart from one that lost lanes."""
    out: dict[Key, Past] = {}
    for key, p in ports.items():
        if p.link is None:
            continue
        old = past.get(key)
        lk = p.link
        far = (lk.remote_guid, lk.remote_port)
        if not p.up:
            if old is not None:
                out[key] = old
            continue
        w, r = lk.width, _link_facts(lk.width, lk.speed, lk.rate_mbps)[0]
        if old is None or old[2] != far:
            out[key] = (w, r, far)
            continue
        pw, pr = old[0], old[1]
        best = (max(pw, w) if pw is not None and w is not None else (pw if w is None else w),
                max(pr, r) if pr is not None and r is not None else (pr if r is None else r))
        out[key] = old if best == (pw, pr) else (*best, far)     # unchanged: the same record
    return out


# a port's verdict by reason, one dict per combination of (down, width, speed), shared by every port with it
# (FabricPort.degraded is read, never changed)
_DEGRADED = {(d, w, sp): {"down": d, "width": w, "speed": sp} for d in (False, True) for w in (False, True)
             for sp in (False, True)}


@dataclass(slots=True)
class LinkVerdicts:
    """What the check found of each cabled port, written into it by apply (FabricPort's fields). By field,
    not by port: one small record per port and sweep (16,000 on a director fabric) would cost more than
    the attributes it stands for."""
    degraded: dict[Key, dict[str, bool]] = field(default_factory=dict)     # reason -> bool (down, width, speed)
    expected: dict[Key, str] = field(default_factory=dict)     # what it is judged against, e.g. "4X HDR"
    note: dict[Key, str] = field(default_factory=dict)         # slower than its class by design (only where so)
    rate_bps: dict[Key, float] = field(default_factory=dict)   # its data rate in bytes/s (0 while down)


Norms = dict[tuple[int, str], tuple[int | None, str | int | None]]


def judge(ports: Mapping[tuple[str, int], FabricPort], switches: Mapping[str, SwitchNode],
          levels: Mapping[str, int], checks: ChecksConfig, abilities: Mapping[Key, LinkAbility] | None = None,
          past: Mapping[Key, Past] | None = None, norms: Norms | None = None) -> tuple[LinkVerdicts, list[Finding]]:
    """The verdict of every cabled port and the non-OK findings (a fabric has too many ports for one OK
    finding each); the ports are not changed (apply writes the verdicts into them). `norms`: the link classes'
    (link_class_norms of the whole section; default: of `ports`)."""
    abilities = abilities or {}
    past = past or {}
    if norms is None:
        norms = link_class_norms(ports.values(), levels)
    findings = []
    verdicts = LinkVerdicts()
    v_degraded, v_expected, v_note, v_rate = verdicts.degraded, verdicts.expected, verdicts.note, verdicts.rate_bps
    level, norm_of, past_of = levels.get, norms.get, past.get
    for key, p in ports.items():
        lk = p.link
        if lk is None:
            continue
        guid = key[0]
        note = ""
        nw, ns = norm_of((level(guid, 0), p.role), (None, None))
        ceil = ceiling(p, abilities)
        s_rank, rate_bps, lk_class = _link_facts(lk.width, lk.speed, lk.rate_mbps)
        before = past_of(key)
        same = before is not None and before[2] == (lk.remote_guid, lk.remote_port)
        pw, pr = (before[0], before[1]) if before is not None and same else (None, None)
        low_w = low_s = False
        why: list[str] = []
        if ceil is not None:             # 1. what both ends enable
            cw, cs = ceil
            expected, c_rank = _norm(cw, cs)
            low_w = lk.width is not None and lk.width < cw
            low_s = s_rank is not None and c_rank is not None and s_rank < c_rank
            if low_w or low_s:
                why.append(f"below the {expected} both ends enable")
        else:                            # 3. its link class
            norm_class, ns_rank = _norm(nw, ns)
            expected = norm_class if nw or ns else ""
            low_w = nw is not None and lk.width is not None and lk.width < nw
            below_class = ns_rank is not None and s_rank is not None and s_rank < ns_rank
            if low_w:
                why.append(f"below the {expected} of its link class")
            if below_class and p.role == "host" and s_rank is not None and (pr is None or s_rank >= pr) and p.up:
                note = (f"slower than its link class ({expected}): it has run at {lk_class} since "
                        f"first seen and neither end's abilities are known, so it is taken as slower by design")
            elif below_class:
                low_s = True
                if not low_w:
                    why.append(f"below the {expected} of its link class")
        # 2. its own past
        past_w = pw is not None and lk.width is not None and lk.width < pw
        past_s = pr is not None and s_rank is not None and s_rank < pr
        if past_w or past_s:
            why.append(f"below the {_past_class(lk, pw, pr)} it ran at earlier")
            note = ""
        up = p.up
        degraded = _DEGRADED[(not up, up and (low_w or past_w), up and (low_s or past_s))]
        v_degraded[key], v_expected[key], v_rate[key] = degraded, expected, (rate_bps or 0.0) if up else 0.0
        if note:
            v_note[key] = note
        if not up or degraded["width"] or degraded["speed"]:
            name = switches[guid].name if guid in switches else guid
            where = f'{name} port {p.label} ({p.role} to "{lk.remote_name}"[{lk.remote_port_label}])'
            if not up:
                if not p.seen_up:           # a first discovery claims no history
                    was = "no read has seen it up; the switch still lists its LLDP neighbour"
                else:
                    was = f"was up at an earlier {p.seen_by}"
                findings.append(Finding(CHECK, guid, key[1], checks.down_severity,
                                        f"{where}: link is down ({was}): check the cable, "
                                        f"the transceivers and both ports"))
            else:
                what = [r for r in ("width", "speed") if degraded[r]]
                findings.append(Finding(CHECK, guid, key[1], checks.degraded_severity,
                                        f"{where}: runs at {lk_class}, {' and '.join(why)} "
                                        f"({' and '.join(what)}): reseat or replace the cable/transceiver"))
    return verdicts, [f for f in findings if f.status != OK]


def apply(ports: Mapping[Key, FabricPort], verdicts: LinkVerdicts) -> None:
    """Write the verdicts into the ports (the section being built: FabricPort.degraded, expected, note, rate_bps)."""
    expected, note, rate = verdicts.expected, verdicts.note, verdicts.rate_bps
    for key, degraded in verdicts.degraded.items():
        p = ports[key]
        p.degraded, p.expected, p.note, p.rate_bps = degraded, expected[key], note.get(key, ""), rate[key]


# what judge reads of each port, in the section's order (with its key): equal to the last build's, with the same
# switches, levels, abilities and past (equal, not only alike), the verdicts are the last build's
_Read = tuple[Key, "Link | None", bool, str, bool, str]


@dataclass(slots=True)
class LastJudged:
    """The last build's inputs to judge and what it found (Links: a build whose links did not change, the common
    case between sweeps whatever the traffic, reuses them; comparing costs a few per cent of judging)."""
    ports: list[_Read]
    switches: dict[str, SwitchNode]
    levels: dict[str, int]
    abilities: dict[Key, LinkAbility]
    past: dict[Key, Past]               # the past it was judged against (remember makes a new one, never changes it)
    verdicts: LinkVerdicts
    findings: list[Finding]
    norms: Norms | None = None          # the link classes it judged against


@dataclass(slots=True)
class LinksState:
    past: dict[Key, Past] = field(default_factory=dict)     # each link's best since first seen (remember)
    noted: set[Key] = field(default_factory=set)            # the ports noted slower than their class
    last: LastJudged | None = None                          # the last judge's inputs and verdicts


class Links:
    """degraded_link on the switch ports (checks.shape): against what both ends enable, each link's past
    (its state) and its class; a port newly noted slower than its class is logged once."""
    reports = (report(CHECK, *NEEDS),)

    def __init__(self, settings: ChecksConfig):
        self.settings = settings
        self.state = LinksState()

    def run(self, inputs: FabricInputs) -> Outcome:
        sec, st = inputs.sec, self.state
        # judged: the switches this sweep read (a switch that answered nothing keeps its ports' last state, and
        # gets no status here: unresponsive judges it); its derived sub-section is every port's verdict
        swept = inputs.sweep.switches_read() if inputs.sweep is not None else set()
        judged = tuple(g for g in sec.switches if g in swept)
        read = [(key, p.link, p.up, p.role, p.seen_up, p.seen_by) for key, p in sec.ports.items()]
        last = st.last
        if last is not None and last.ports == read and last.switches == sec.switches and last.levels == sec.levels \
                and last.abilities == inputs.abilities and last.past == st.past:
            # the same links, ends and past (remember would keep every record, the same past again): the same verdicts
            return Outcome([f for f in last.findings if f.device in swept], judged, last.verdicts)
        norms = link_class_norms(sec.ports.values(), sec.levels)
        verdicts, findings = judge(sec.ports, sec.switches, sec.levels, self.settings, inputs.abilities, st.past, norms)
        st.last = LastJudged(read, dict(sec.switches), dict(sec.levels), dict(inputs.abilities), st.past, verdicts,
                             list(findings), norms)
        st.past = remember(sec.ports, st.past)
        noted = set(verdicts.note)
        for g, port in sorted(noted - self.state.noted):
            p = sec.ports[(g, port)]
            log.info("link slower than its class", switch=sec.switches[g].name, switch_guid=g, port=p.label,
                     remote=p.link.remote_name if p.link is not None else "", note=verdicts.note[(g, port)])
        self.state.noted = noted
        return Outcome([f for f in findings if f.device in swept], judged, verdicts)


    def rejudge(self, sec: FabricSection, keys: Iterable[Key], abilities: Mapping[Key, LinkAbility]
                ) -> tuple[LinkVerdicts, list[Finding]]:
        """The verdicts and findings of a few ports whose state changed since the last run (the SM's reports:
        pipeline.fabric's event build), against the link classes and the past of that run; written into those
        ports (their FabricPort objects are the event build's own). The other ports keep theirs."""
        st = self.state
        ports = {k: sec.ports[k] for k in keys if k in sec.ports}
        norms = st.last.norms if st.last is not None else None
        if norms is None:
            norms = link_class_norms(sec.ports.values(), sec.levels)
        verdicts, findings = judge(ports, sec.switches, sec.levels, self.settings, abilities, st.past, norms)
        apply(ports, verdicts)
        return verdicts, findings


def _past_class(lk: Link, width: int | None, rank: int | None) -> str:
    """The rate class a link ran at before, from its best width and speed rank."""
    if lk.rate_mbps:
        return rate_class(None, None, rank) if rank else lk.rate_class
    speed = ibspec.GENERATIONS[rank].name if rank is not None and 0 <= rank < len(ibspec.GENERATIONS) else lk.speed
    return rate_class(width or lk.width, speed)


__all__ = ["CHECK", "NEEDS", "REASONS", "LinkVerdicts", "Links", "LinksState", "Norms", "apply", "ceiling", "judge",
           "link_class_norms", "remember"]
