"""events: the subnet manager's reports of port changes, and each reported switch's ports re-read at once.

Every InfiniBand switch sends the SM a trap when a port changes state (trap 128); an SM forwards a trap to
every port subscribed to it through its SA (SubnAdmSet(InformInfo)), as a SubnAdmReport. This source
subscribes the collector's port to traps 128-131 and to the SM's own GID in/out of service notices (64,
65) (sources/infiniband/mad/notice.py has the bytes and what opensm forwards), waits for reports, and on
each re-reads the ports of the switch it names (PortInfo of every port, in one MAD engine run: one switch,
a few milliseconds), so the model publishes the changed ports' state without waiting for the sweep, and
without a full build (pipeline.fabric's event build). The sweep stays the truth: it reads every port every
sweep whatever the reports say, and is all there is while no subscription is in force (docs/latency.md).

Per run (the daemon runs it again as soon as it returns; `once`, `check` and `capture` subscribe to
nothing: Inputs.continuous):
1. the master SM: PortInfo of the collector's own port (a directed-route SMP of hop count 0: its
   MasterSMLID), then SMInfo of that LID (its GUID, activity count, state);
2. the subscription, one SubnAdmSet(InformInfo) per trap, when none is in force, when the master changed
   (another LID or GUID), when it restarted (its activity count, the SMPs it sent, went back: opensm
   keeps its subscriptions in memory), when the collector's umad port was lost and opened again (the
   HostIO's MAD epoch changed: the SA port is opened again first, and an SM drops the subscriptions of a
   port that left the subnet), and every `resubscribe` seconds anyway (a repeated subscription is the
   same one to the SM: osm_sa_informinfo.c updates it);
3. the reports that came (host/sa.py answered each already), waiting up to `wait` seconds for the first
   and `batch` seconds more for those right behind it (a leaf that reboots reports each of its ports);
4. the re-read of each switch they name (trap 128: the switch's LID; 129-131: a port's LID, a switch's or
   a CA's, whose switch port the topology knows; 64/65: a CA port's GID, by the topology's CA GUIDs).

The record (model.fabric_events.FabricEventsData) is a new object only when something changed: a run
that found nothing returns the last one, and the pipeline rebuilds nothing for it (registry `quiet`).
The mode: `events` while the SM accepted the subscription to trap 128, `sweep` with why otherwise (no
umad port, the tools' sweep, no SM, the SM did not answer or refused, a replayed bundle); the model
demotes it where a sweep sees a change no report announced (an SM that does not forward).

A switch of another shard is that shard's: its reports are counted, not re-read. Unreached is not
down: a port whose re-read went unanswered is not in the record (it keeps its last state)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import structlog

from fabricmon.host.io import HostIO
from fabricmon.host.mad import Request
from fabricmon.host.sa import SaReport
from fabricmon.host.umad import UmadUnavailable
from fabricmon.model.fabric import Topology, in_shard
from fabricmon.model.fabric_events import MAX_READS, EventRead, FabricEventsData
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register
from fabricmon.registry import taking
from fabricmon.schema import Schema, from_class, number
from fabricmon.sources.infiniband.settings import FabricScope
from fabricmon.sources.infiniband.mad import codec, notice
from fabricmon.sources.infiniband.mad.codec import MadError

log = structlog.get_logger("fabricmon.sources.events")
RETRY = 15.0                         # seconds before a port that would not open, or an SM that refused or did not answer, is tried again


@dataclass(frozen=True, slots=True)
class EventsSettings:
    """fabric.sources.events' own keys."""
    wait: float = 5.0
    batch: float = 0.02
    resubscribe: float = 600.0
    scope: FabricScope = FabricScope()      # the fabric's shard and MAD settings


OPTIONS: Schema[EventsSettings] = Schema(fields=(
    number("wait", 5.0, "seconds a run waits for the SM's reports before it asks who the master SM is again "
           "(a master that changed or restarted is subscribed to again)", lo=0.1, hi=300.0),
    number("batch", 0.02, "seconds a run waits after a report for those right behind it, re-read together (a "
           "leaf that reboots reports each of its ports)", lo=0.0, hi=2.0),
    number("resubscribe", 600.0, "seconds after which the subscription is made again anyway (the SM keeps it "
           "in memory; a restart it was not seen to make drops it)", lo=10.0),
), build=taking(from_class(EventsSettings), scope=FabricScope), pure=False)


@register("events", enabled=True, interval=0.1, timeout=15.0, needs=(INVENTORY,), collector="infiniband",
          records=FabricEventsData, options=OPTIONS, quiet=True)
class EventsSource(Source):
    """The subscription (kept between runs) and the reports' re-reads."""

    _data: FabricEventsData | None = None
    _sm: tuple[int, str, int] | None = None        # the master subscribed with: (LID, GUID, activity count)
    _subscribed_at: float | None = None            # monotonic time of the last subscription made
    _failed_at: float | None = None                # monotonic time a port or a subscription last failed
    _io: HostIO | None = None
    _epoch: int | None = None                      # the MAD port's epoch (HostIO.mad_open) the SA port was opened in
    _reopened = False                              # the MAD port was lost and opened again since the last subscription
    _lid_map: tuple[object, dict[int, str], dict[int, tuple[str, int]], dict[str, tuple[str, int]]] | None = None

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        st = self.sc.settings(EventsSettings)
        if not inputs.continuous:
            return self._emit(out, "sweep", "a single collection (fabric once, check, capture) subscribes to no "
                                            "reports: link state comes from the sweep")
        fc = self.sc.settings(EventsSettings).scope
        if fc.sweep_method == "tools":
            return self._emit(out, "sweep", "fabric.sweep_method is tools: the subscription needs the MAD engine's "
                                            "umad port", inputs, st.wait)
        now = time.monotonic()
        if self._failed_at is not None and now - self._failed_at < RETRY:
            return self._emit(out, None, "", inputs, st.wait)
        try:
            epoch = io.mad_open(fc.mad)
            if self._epoch is not None and epoch != self._epoch:
                # the port was lost (an HCA reset, the simulator restarted) and opened again: the SA port on the
                # same device is opened again too, and the SM subscribed to again (it dropped a port that left)
                io.sa_close()
                self._sm, self._subscribed_at, self._reopened = None, None, True
            self._epoch = epoch
            io.sa_open()
        except UmadUnavailable as exc:
            self._failed_at = now
            return self._emit(out, "sweep", f"no umad port for the subscription: {exc.strerror or exc}", inputs, st.wait)
        self._io = io
        master = self._master(io, inputs)
        if isinstance(master, str):
            self._sm = None
            self._failed_at = now
            return self._emit(out, "sweep", master, inputs, st.wait)
        lid, guid, activity = master
        old = self._sm
        if old is None or old[0] != lid or old[1] != guid or activity < old[2] \
                or self._subscribed_at is None or now - self._subscribed_at >= st.resubscribe:
            why = "port reopened" if self._reopened else "first" if old is None else \
                "master changed" if old[:2] != (lid, guid) else "master restarted" if activity < old[2] else "renewed"
            refused = self._subscribe(io, inputs, lid, guid, activity, why)
            if refused:
                self._failed_at = now
                return self._emit(out, "sweep", refused, inputs, st.wait)
            if self._data is None or self._data.mode != "events":
                self._failed_at = None
                return self._emit(out, "events", "")        # in force now; the next run takes the reports
        else:
            self._sm = (lid, guid, activity)
        self._failed_at = None
        topo: Topology | None = inputs.inventory
        reports = io.sa_reports(max(0.0, min(st.wait, inputs.remaining(self.sc.timeout) - 1.0)))
        if reports and st.batch:
            time.sleep(st.batch)
            reports += io.sa_reports(0.0)
        if reports:
            self._take(io, inputs, reports, topo, out)
        return self._emit(out, "events", "")

    # --- the master and the subscription ----------------------------------------------------
    def _master(self, io: HostIO, inputs: Inputs) -> tuple[int, str, int] | str:
        """(LID, GUID, activity count) of the master SM, or why there is none to subscribe with."""
        deadline = time.monotonic() + min(2.0, inputs.remaining(self.sc.timeout))
        try:
            local = io.mad_run([Request("local", notice.PERMISSIVE_LID, bytes(notice.encode_local_port_info(0)))],
                               deadline)[0]
            if local is None:
                return "the collector's own port did not answer PortInfo"
            own_lid, sm_lid = notice.decode_local_port_info(local)
            if not sm_lid:
                return "no subnet manager has configured the collector's port (its MasterSMLID is 0)"
            ans = io.mad_run([Request("sm", sm_lid, bytes(notice.encode_sm_info(0)))], deadline)[0]
        except (OSError, MadError) as exc:
            return f"the master SM could not be asked: {exc}"
        if ans is None:
            return f"the master SM (LID {sm_lid}) does not answer SMInfo"
        try:
            sm = notice.decode_sm_info(ans)
        except MadError as exc:
            return f"the master SM (LID {sm_lid}) answered no SMInfo: {exc}"
        if sm.state != "MASTER":
            return f"the SM at LID {sm_lid} (0x{sm.guid}) is {sm.state}, not MASTER"
        return sm_lid, sm.guid, sm.activity

    def _subscribe(self, io: HostIO, inputs: Inputs, lid: int, guid: str, activity: int, why: str) -> str:
        """Subscribe to every trap; "" when the SM accepted trap 128, else why not."""
        traps = notice.TRAPS
        answers = io.sa_run([(lid, bytes(notice.encode_subscribe(t, 0))) for t in traps],
                            min(3.0, inputs.remaining(self.sc.timeout)))
        accepted: list[int] = []
        refused: list[str] = []
        for t, a in zip(traps, answers):
            if a is None:
                refused.append(f"trap {t}: no answer")
                continue
            try:
                ans = notice.decode_subscribe_answer(a)
            except MadError as exc:
                refused.append(f"trap {t}: {exc}")
                continue
            if ans.accepted:
                accepted.append(t)
            else:
                refused.append(f"trap {t}: {notice.status_text(ans.status)}")
        sm = f"the SM at LID {lid} (0x{guid})"
        if notice.LINK_STATE_CHANGE not in accepted:
            self._sm, self._subscribed_at = None, None
            if all(a is None for a in answers):
                return f"{sm} did not answer the subscription (SubnAdmSet(InformInfo))"
            return f"{sm} refused the subscription: {'; '.join(str(r) for r in refused)}"
        self._sm, self._subscribed_at, self._reopened = (lid, guid, activity), time.monotonic(), False
        log.info("subscribed to the subnet manager's reports", sm_lid=lid, sm_guid=guid, why=why,
                 traps=accepted, refused=refused or None)
        data = self._data or FabricEventsData()
        self._data = replace(data, sm_lid=lid, sm_guid=guid, traps=tuple(int(t) for t in accepted),
                             subscribed_at=time.time())
        return ""

    # --- the reports ----------------------------------------------------------------------
    def _maps(self, topo: Topology) -> tuple[dict[int, str], dict[int, tuple[str, int]], dict[str, tuple[str, int]]]:
        """By LID: the switches; a CA port's LID and its node GUID: the switch port it is cabled to."""
        if self._lid_map is None or self._lid_map[0] is not topo:
            switches = {sw.lid: g for g, sw in topo.switches.items() if sw.lid is not None}
            by_lid: dict[int, tuple[str, int]] = {}
            by_guid: dict[str, tuple[str, int]] = {}
            for g, sw in topo.switches.items():
                for p, lk in sw.links.items():
                    if lk.remote_type != "Switch":
                        if lk.remote_lid:
                            by_lid[lk.remote_lid] = (g, p)
                        by_guid[lk.remote_guid] = (g, p)
            self._lid_map = (topo, switches, by_lid, by_guid)
        return self._lid_map[1], self._lid_map[2], self._lid_map[3]

    def _take(self, io: HostIO, inputs: Inputs, reports: list[SaReport], topo: Topology | None, out: SourceOutput) -> None:
        data = self._data or FabricEventsData()
        counts = dict(data.reports)
        unmatched = data.unmatched
        named: list[str] = []
        fc = self.sc.settings(EventsSettings).scope
        switches, by_lid, by_guid = self._maps(topo) if topo is not None else ({}, {}, {})
        first = min(r.received for r in reports)
        for r in reports:
            try:
                n = notice.decode_report(r.mad)
            except MadError as exc:
                out.error("parse", f"a report the SM sent could not be read: {exc}")
                continue
            counts[n.trap] = counts.get(n.trap, 0) + 1
            g = None
            if n.lid is not None:
                g = switches.get(n.lid) or (by_lid.get(n.lid) or (None, 0))[0]
            elif n.trap in (notice.GID_IN_SERVICE, notice.GID_OUT_OF_SERVICE):
                g = (by_guid.get(n.port_guid) or (None, 0))[0]
            if g is None:
                unmatched += 1
            elif g not in named:
                named.append(g)
        mine = [g for g in named if in_shard(g, *fc.shard)] if topo is not None else []
        reads, abilities, seq = data.reads, data.abilities, data.seq
        reported = dict(data.reported)
        rereads = data.rereads
        latency = data.latency
        if mine:
            assert topo is not None
            reqs: list[Request] = []
            where: list[tuple[str, int]] = []
            for g in mine:
                sw = topo.switches[g]
                for p in range(1, sw.nports + 1):
                    reqs.append(Request(g, sw.lid or 0, _port_info(p)))
                    where.append((g, p))
            try:
                answers = io.mad_run(reqs, time.monotonic() + inputs.remaining(self.sc.timeout))
            except OSError as exc:
                out.error("read", f"MAD engine: {exc.strerror or exc}; the reported switches were not re-read")
                answers = [None] * len(reqs)
            reads, abilities = dict(reads), dict(abilities)
            lost: dict[str, int] = {}
            for (g, p), a in zip(where, answers):
                if a is None:
                    lost[g] = lost.get(g, 0) + 1
                    continue
                try:
                    up, width, speed, ability = codec.decode_port_link(a)
                except MadError:
                    lost[g] = lost.get(g, 0) + 1
                    continue
                seq += 1
                reads[(g, p)] = EventRead(seq, up, width, speed)
                abilities[(g, p)] = ability
            for g in mine:
                rereads += 1
                reported[g] = rereads
            for g, k in sorted(lost.items()):
                out.error("unanswered", f"switch {topo.switches[g].name or g} (0x{g}): {k} PortInfo queries of its "
                                        "re-read on a report unanswered; its last known state is kept")
            latency = time.monotonic() - first
            if len(reads) > MAX_READS:
                keep = sorted(reads.items(), key=lambda kv: kv[1].seq)[-MAX_READS:]
                reads = dict(keep)
                abilities = {k: abilities[k] for k in reads if k in abilities}
        self._data = replace(data, reports=counts, unmatched=unmatched, reads=reads, abilities=abilities, seq=seq,
                             reported=reported, rereads=rereads, latency=latency)

    def _emit(self, out: SourceOutput, mode: str | None, reason: str, inputs: Inputs | None = None,
              pause: float = 0.0) -> SourceOutput:
        """The record: the last one when nothing changed (mode None: as it was). A run of the daemon that
        waited for no report pauses `pause` seconds first (the worker runs it again at once)."""
        if inputs is not None and pause > 0:
            left = min(pause, inputs.remaining(self.sc.timeout) - 1.0)
            if left > 0:
                if inputs.cancel is not None:
                    inputs.cancel.wait(left)
                else:
                    time.sleep(left)
        data = self._data
        if data is None:
            data = FabricEventsData()
        if mode is not None and (mode, reason) != (data.mode, data.reason):
            log.info("link state from the SM's reports" if mode == "events" else "link state from the sweep",
                     reason=reason or None)
            data = replace(data, mode=mode, reason=reason)
        self._data = data
        out.data = data
        return out

    def close(self) -> None:
        """Unsubscribe (the SM would keep reporting to a port nobody reads) and close the SA port."""
        io, sm, data = self._io, self._sm, self._data
        if io is not None and sm is not None and data is not None and data.traps:
            try:
                io.sa_run([(sm[0], bytes(notice.encode_subscribe(t, 0, subscribe=False))) for t in data.traps], 1.0)
            except (OSError, AttributeError):
                pass
        if io is not None:
            try:
                io.sa_close()
            except (OSError, AttributeError):
                pass
        self._sm = None
        super().close()


def _port_info(port: int) -> bytes:
    return _PORT_INFO[port] if port < len(_PORT_INFO) else bytes(codec.encode_port_info(port, 0))


_PORT_INFO = [bytes(codec.encode_port_info(p, 0)) for p in range(256)]


__all__ = ["EventsSettings", "EventsSource"]
