"""The Remediator: remediation's one loop, driven by the daemon's published snapshots (Pipeline.on_snapshot)
in a thread of its own, so that a hung scontrol or an unanswered SMP costs only its own step: the daemon
keeps building, publishing and serving.

A round: ask the lease (only its holder acts); take the undo requests of `fabricmon actions undo`; decide
(remediation/policy.py: pure, on the latest published snapshot, the record and, when a drain is at stake,
what Slurm says); carry out each due step through the actuators (remediation/actuators.py, through
HostIO) and read it back: a step not confirmed failed, is retried with backoff (remediation.retry_first,
doubling up to retry_max) and reported (the action's error, a WARNING finding, the log, the metric),
never assumed done; read back what is in effect (an isolated port's PortInfo at the end set, a drained
node's reason) so that what someone else returned is released, not fought; write the record; log one line
per decision (what, why, the evidence, the cap); publish its state (`section()`), which the Pipeline
puts into the next snapshot it builds (never into a published one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import structlog

from fabricmon.config import Config
from fabricmon.host.io import HostIO
from fabricmon.model.fabric import SweepData
from fabricmon.model.finding import Finding
from fabricmon.model.remediation import (ACT, DONE, DRAIN, DRY_RUN, ISOLATE, OFF, RELEASED, RETURNED, RETURNING,
                                         TODO, UNDONE, WAITING, Action, Breaker, Refusal, RemediationSection)
from fabricmon.model.snapshot import Snapshot, source_state
from fabricmon.remediation import policy
from fabricmon.remediation.actuators import EthernetPorts, InfinibandPorts, Outcome, PortRead, Slurm
from fabricmon.remediation.lease import Lease, SingleHolder, make_lease
from fabricmon.remediation.policy import CHECK, Event, SlurmView, cap_of, counters_now, parse_key
from fabricmon.remediation.record import Record, record_path
from fabricmon.remediation.settings import effective_modes, lease_guard

log = structlog.get_logger("fabricmon.remediation")
KEEP_SHOWN = 50                 # closed actions a snapshot shows (the record keeps remediation.keep_closed)
TICK = 1.0                      # a round at least this often (undo requests, retries) without a snapshot
IDLE_TICK = 10.0                # ... and how often an idle one (Remediator._idle) looks for an undo request


class Remediator:
    def __init__(self, config: Config, io: HostIO, collector: str, host: str = "",
                 clock: Callable[[], float] = time.time, lease: Lease | None = None, record: Record | None = None):
        self.config = config
        self.cfg = config.remediation
        self.scope = "node" if collector == "node" else "fabric"
        self.io, self.clock = io, clock
        self.host = host
        sd = config.state_dir
        self.record = record if record is not None else Record(record_path(sd, self.scope), self.cfg.keep_closed)
        self.lease = lease if lease is not None else make_lease(self.cfg.lease, sd, self.scope, lease_guard(self.cfg),
                                                                config.fabric.shard)
        fc = config.fabric
        self.ports: InfinibandPorts | EthernetPorts = (
            EthernetPorts(io, self.cfg.isolate_port) if collector == "ethernet" else
            InfinibandPorts(io, self.cfg.isolate_port, fc.mad))
        self.slurm = Slurm(io, self.cfg.drain_node)
        self.verify_every = max(5.0, fc.sweep_interval) if self.scope == "fabric" else 30.0
        self.counts: dict[tuple[str, str, str], int] = {}
        self._snap: Snapshot | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held: bool | None = None
        self._logged: dict[tuple[str, str], str] = {}          # (kind, target) -> the refusal last logged
        self._last_verify = float("-inf")
        self._slurm: tuple[float, SlurmView | str] | None = None
        self._round_lock = threading.Lock()
        self._rounds = 0                # rounds run so far (the first publishes the section)
        self._section = RemediationSection(self.scope, effective_modes(self.cfg), held=False, lease="not asked yet",
                                           actions=self._shown())
        if self.record.error:
            log.warning("remediation record", error=self.record.error)

    # --- the daemon's side ------------------------------------------------------------------------
    def on_snapshot(self, snap: Snapshot) -> None:
        """Pipeline.on_snapshot: the latest published snapshot; the round runs in the Remediator's thread."""
        self._snap = snap
        self._wake.set()

    def section(self) -> RemediationSection:
        """What the next snapshot carries (Pipeline.acting)."""
        return self._section

    def start(self) -> None:
        self.record.lock()
        modes = effective_modes(self.cfg)
        log.info("remediation", scope=self.scope, modes=policy_modes(modes), record=self.record.path,
                 open=sum(1 for a in self.record.actions.values() if a.open))
        self._thread = threading.Thread(target=self._loop, name="fabricmon-remediation", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(15.0)
        self.lease.release()
        self.record.unlock()

    def _loop(self) -> None:
        idle = False
        while not self._stop.is_set():
            self._wake.wait(IDLE_TICK if idle else TICK)
            self._wake.clear()
            if self._stop.is_set():
                break
            idle = self._idle()
            if idle:
                continue
            try:
                self.round()
            except Exception:                   # a bug must not stop the daemon (nor remediation's next round)
                log.exception("remediation round failed")

    def _idle(self) -> bool:
        """Nothing a round could change: every mode off, no action open in the record, no undo asked, a lease
        that cannot change hands (a node daemon's, a single collector's) and the section published once. The
        daemon then runs no round, neither for each snapshot nor each TICK (one a second: a fifth of an idle node
        daemon's CPU, docs/benchmarks.md), and wakes every IDLE_TICK only (an undo request of a closed action is
        answered within it, well inside the CLI's UNDO_WAIT)."""
        return (self._rounds > 0 and isinstance(self.lease, SingleHolder)
                and all(m == OFF for m in effective_modes(self.cfg).values())
                and not any(a.open for a in self.record.actions.values()) and not self.record.requests())

    # --- one round --------------------------------------------------------------------------------
    def round(self, snap: Snapshot | None = None) -> RemediationSection:
        with self._round_lock:
            self._rounds += 1
            return self._round(snap if snap is not None else self._snap)

    def _round(self, snap: Snapshot | None) -> RemediationSection:
        now = self.clock()
        held, how = self.lease.hold()
        if held != self._held:
            if held and self._held is False and self.record.path is not None:
                self.record.actions.clear()
                self.record.load()              # the previous holder's record: reconciled below
            log.info("remediation lease", held=held, lease=how, scope=self.scope)
            self._held = held
        if not held:
            self._publish(held, how, {}, [], [], now)
            return self._section
        for action_id in self.record.requests():
            ok, text = self.undo(action_id, snap)
            self.record.answer(action_id, ok, text)
        actions = dict(self.record.actions)
        rnd: policy.Round
        if snap is None:
            rnd = policy.Round(actions)
        else:
            findings = [f for f in snap.findings if f.check != CHECK]
            slurm = self._slurm_view(now, findings, actions)
            if self.scope == "fabric":
                jobs = snap.jobs.hosts if snap.jobs is not None and snap.jobs.scope == "fabric" else None
                st = source_state(snap.sources, SweepData)
                sweep_time = st.data_time if st is not None and st.data is not None else None
                shard = snap.fabric.shard if snap.fabric is not None else (0, 1)
                rnd = policy.port_round(snap.fabric, findings, jobs, actions, self.cfg, self.config.checks, now,
                                        self.record.new_id, shard, slurm if isinstance(slurm, SlurmView) else None,
                                        sweep_time)
                policy.host_drains_follow(rnd, now)
            else:
                rnd = policy.node_round(findings, self.host, actions, self.cfg, self.config.checks, now,
                                        self.record.new_id, slurm if isinstance(slurm, SlurmView) else None)
        lost = self._carry_out(rnd, snap, now)
        if lost is not None:
            held, how = False, lost
        elif now - self._last_verify >= self.verify_every:
            self._last_verify = now
            self._verify(rnd, snap, now)
        for e in rnd.events:
            self._event(e)
        if self.record.replace_all(rnd.actions):
            self.record.save()
        self._publish(held, how, rnd.breakers, rnd.refusals, [], now)
        return self._section

    def _slurm_view(self, now: float, findings: list[Finding], actions: Mapping[str, Action]) -> SlurmView | str | None:
        """What Slurm says, read only when a drain is at stake (a condemning finding while drain_node is on,
        or an open drain): a 10,000-node cluster's daemons never ask slurmctld every poll for nothing. Kept
        for a few seconds (one round may need it twice)."""
        dr = self.cfg.drain_node
        need = any(a.kind == DRAIN and a.open for a in actions.values())
        if dr.mode != OFF and not need:
            from fabricmon.model.finding import class_of
            need = any(class_of(f) in dr.classes and (not dr.checks or f.check in dr.checks) for f in findings) \
                if self.scope == "node" else any(a.kind == ISOLATE and a.open and a.node for a in actions.values()) \
                or any(f.port is not None and class_of(f) in self.cfg.isolate_port.classes
                       and f.check in self.cfg.isolate_port.checks for f in findings)
        if not need:
            return None
        if self._slurm is not None and now - self._slurm[0] < 5.0:
            return self._slurm[1]
        got = self.slurm.view()
        if isinstance(got, str):
            log.warning("remediation: Slurm unreadable", error=got)
        self._slurm = (now, got)
        return got

    def _fresh_slurm(self) -> SlurmView | str:
        got = self.slurm.view()
        self._slurm = (self.clock(), got)
        return got

    # --- carrying out -----------------------------------------------------------------------------
    def _carry_out(self, rnd: policy.Round, snap: Snapshot | None, now: float) -> str | None:
        """Each due step, the lease asked again before it; why the lease ended, where it did (None: it held)."""
        modes = effective_modes(self.cfg)
        for a in sorted(rnd.actions.values(), key=lambda a: a.created):
            if not a.open:
                continue
            if a.state in (TODO, WAITING) and a.effective is None and modes.get(a.kind) != a.mode:
                # decided in another mode than the one configured now (act, then off or dry_run): never carried out
                b = self._close(a, RELEASED, now, snap, f"not carried out: remediation.{a.kind}.mode is now "
                                f"{modes.get(a.kind)}")
                rnd.put(b)
                rnd.events.append(Event(a.kind, a.mode, "released", a.target, a.label, "release", b.note))
                continue
            if a.state == RETURNING and a.mode == DRY_RUN:
                rnd.put(self._close(a, RETURNED, now, snap, "dry run: would have returned it to service"))
                rnd.events.append(Event(a.kind, a.mode, "returned", a.target, a.label, "returned",
                                        "dry run: would return it to service"))
                continue
            if a.mode != ACT or a.state not in (TODO, RETURNING):
                continue
            if a.next_try is not None and now < a.next_try:
                continue
            if self._stop.is_set():
                return None
            still, why = self.lease.hold()      # a step only on a lease that outlasts it (etcd's may be ending)
            if not still:
                log.info("remediation lease", held=still, lease=why, scope=self.scope)
                self._held = still
                return why
            rnd.put(self._step(a, rnd, snap, now))
        return None

    def _step(self, a: Action, rnd: policy.Round, snap: Snapshot | None, now: float) -> Action:
        putting_out = a.state == TODO
        if a.kind == ISOLATE:
            if isinstance(self.ports, EthernetPorts) and self.ports.command(a) is None:
                # no command for this switch: Ethernet's actions stay a dry run
                b = replace(a, mode=DRY_RUN, state=DONE, effective=now, clean_since=now, updated=now,
                            note=f"dry run: no remediation.isolate_port.ethernet command matches switch {a.switch}")
                rnd.events.append(Event(a.kind, DRY_RUN, "dry_run", a.target, a.label, "isolate", b.note, a.reason))
                return b
            out = self.ports.set(a, disable=putting_out)
            if not out.ok and a.attempts and isinstance(self.ports, InfinibandPorts):
                # an earlier Set may have landed with its answer lost: what the port says now counts
                got = self.ports.read(a)
                if isinstance(got, PortRead) and got.disabled == putting_out:
                    out = Outcome(True, f"read back: {got.text()}", out.how)
        else:
            if putting_out:
                out = self.slurm.drain(a.node, a.reason)
                if out.ok:
                    race = self._drain_race(a)
                    if race:
                        undo = self.slurm.resume(a.node)
                        b = self._close(a, RELEASED, now, snap, f"refused after the fact: {race}"
                                        + ("" if undo.ok else f"; resume failed: {undo.detail}"))
                        rnd.events.append(Event(a.kind, a.mode, "refused", a.target, a.label, "refuse", race, a.reason))
                        return b
            else:
                view = self._fresh_slurm()
                if isinstance(view, str):
                    out = Outcome(False, f"Slurm unreadable: {view}", "sinfo")
                elif not view.ours(a.node) or view.nodes[a.node].reason != a.reason:
                    n = view.nodes.get(a.node)
                    now_reason = n.reason if n is not None else ""
                    b = self._close(a, RELEASED, now, snap, f"not resumed: its reason is now {now_reason!r} "
                                    "(someone else's: left alone)" if now_reason else
                                    "not resumed: someone else resumed it already")
                    rnd.events.append(Event(a.kind, a.mode, "released", a.target, a.label, "release", b.note))
                    return b
                else:
                    out = self.slurm.resume(a.node)
        if out.ok:
            if putting_out:
                b = replace(a, state=DONE, effective=now, clean_since=now, attempts=0, next_try=None, error="",
                            updated=now, note=f"{'disabled' if a.kind == ISOLATE else 'drained'}: {out.detail}")
                rnd.events.append(Event(a.kind, a.mode, "done", a.target, a.label,
                                        "isolated" if a.kind == ISOLATE else "drained", out.detail, a.reason,
                                        self._cap_text(rnd, a.kind)))
                return b
            b = self._close(a, RETURNED, now, snap, f"{'re-enabled' if a.kind == ISOLATE else 'resumed'}: {out.detail}")
            rnd.events.append(Event(a.kind, a.mode, "returned", a.target, a.label, "returned", out.detail, a.reason))
            return b
        tries = a.attempts + 1
        wait = policy.backoff(tries, self.cfg.retry_first, self.cfg.retry_max)
        b = replace(a, attempts=tries, next_try=now + wait, error=out.detail, updated=now,
                    note=f"try {tries} failed; next in {wait:g} s")
        rnd.events.append(Event(a.kind, a.mode, "failed", a.target, a.label,
                                "isolate" if a.kind == ISOLATE and putting_out else
                                "return" if not putting_out else "drain",
                                f"{out.detail} (try {tries}; again in {wait:g} s)", a.reason))
        return b

    def _drain_race(self, a: Action) -> str:
        """After a drain: the nodes drained by fabricmon in each of the node's partitions, oldest first; a node
        past its partition's cap (daemons of two nodes drained in the same second) undoes its own ("" when
        within)."""
        view = self._fresh_slurm()
        if isinstance(view, str):
            return ""
        dr = self.cfg.drain_node
        for part in view.partitions.get(a.node, ()):
            members = view.members(part)
            ours = sorted((n for n in members if view.ours(n)), key=lambda n: (view.nodes[n].since, n))
            cap = cap_of(dr.min_cap, dr.max_fraction, len(members))
            if a.node in ours and ours.index(a.node) >= cap:
                return (f"the circuit breaker: {len(ours)} of partition {part}'s {len(members)} nodes drained by "
                        f"fabricmon at once, the cap is {cap} ({', '.join(ours[:cap])} first)")
        return ""

    def _close(self, a: Action, state: str, now: float, snap: Snapshot | None, note: str) -> Action:
        base = a.baseline
        if a.kind == ISOLATE and snap is not None and snap.fabric is not None:
            keys = [(a.guid, a.port)] + ([parse_key(a.peer)] if a.peer else [])
            vals = counters_now(snap.fabric, keys, policy.check_counters(a.check))
            base = tuple(sorted({**dict(a.baseline), **vals}.items()))
        return replace(a, state=state, closed=now, updated=now, next_try=None, error="", note=note, baseline=base)

    # --- reading back what is in effect ------------------------------------------------------------
    def _verify(self, rnd: policy.Round, snap: Snapshot | None, now: float) -> None:
        """What fabricmon put out and someone else returned is released (never put out again for the errors
        that condemned it): a port whose set end reads up again, a node no longer drained with fabricmon's
        reason."""
        drains = [a for a in rnd.actions.values() if a.kind == DRAIN and a.mode == ACT and a.state == DONE]
        view = self._fresh_slurm() if drains else None
        for a in drains:
            if view is None or isinstance(view, str):
                break
            n = view.nodes.get(a.node)
            if n is None or n.reason != a.reason:
                why = (f"its drain reason is now {n.reason!r} ({n.user}): someone else's, left alone"
                       if n is not None and n.reason else "resumed by someone else")
                rnd.put(self._close(a, RELEASED, now, snap, why))
                rnd.events.append(Event(a.kind, a.mode, "released", a.target, a.label, "release", why))
        for a in list(rnd.actions.values()):
            if a.kind != ISOLATE or a.mode != ACT or a.state != DONE:
                continue
            if isinstance(self.ports, InfinibandPorts):
                got = self.ports.read(a)
                up = isinstance(got, PortRead) and got.up and not got.disabled
                what = got.text() if isinstance(got, PortRead) else ""
            else:
                fp = snap.fabric.ports.get((a.guid, a.port)) if snap is not None and snap.fabric is not None else None
                up = fp is not None and fp.up and a.effective is not None and now - a.effective > 2 * self.verify_every
                what = "ifOperStatus up"
            if up:
                why = f"re-enabled by someone else (the port reads {what}): not disabled again unless it fails again"
                rnd.put(self._close(a, RELEASED, now, snap, why))
                rnd.events.append(Event(a.kind, a.mode, "released", a.target, a.label, "release", why))

    # --- undo ---------------------------------------------------------------------------------------
    def undo(self, action_id: str, snap: Snapshot | None = None) -> tuple[bool, str]:
        """Reverse one action now (`fabricmon actions undo ID`): re-enable the port, resume the node (only if
        its reason is still fabricmon's). The port or node is then put out again only by a new failure."""
        snap = snap if snap is not None else self._snap
        a = self.record.actions.get(action_id)
        now = self.clock()
        if a is None:
            return False, f"no action {action_id}"
        if not a.open:
            return False, f"{action_id} is closed already ({a.state}: {a.note})"
        out: Outcome | None = None
        if a.mode == ACT and a.in_effect or (a.mode == ACT and a.state in (TODO, RETURNING) and a.attempts):
            if a.kind == ISOLATE:
                out = self.ports.set(a, disable=False)
            else:
                view = self._fresh_slurm()
                if isinstance(view, SlurmView) and view.nodes.get(a.node, None) is not None \
                        and view.nodes[a.node].reason == a.reason:
                    out = self.slurm.resume(a.node)
                else:
                    out = Outcome(True, "its reason is not fabricmon's any more: left as it is", "sinfo")
            if not out.ok:
                log.warning("remediation undo failed", action=a.kind, id=a.id, target=a.label, error=out.detail)
                self.record.actions[a.id] = replace(a, error=f"undo failed: {out.detail}", updated=now)
                self.record.save()
                return False, f"{action_id}: undo failed: {out.detail}"
        text = "undone by an operator" + (f": {out.detail}" if out is not None else " (nothing was changed)")
        b = self._close(a, UNDONE, now, snap, text)
        self.record.actions[a.id] = b
        for child in [c for c in self.record.actions.values() if c.parent == a.id and c.open]:
            self.record.actions[child.id] = replace(child, state=RETURNING, next_try=None, updated=now,
                                                    note=f"its port {a.id} was undone: resuming")
        self.record.save()
        self._event(Event(a.kind, a.mode, "undone", a.target, a.label, "undo", text, a.reason))
        return True, f"{action_id} {a.label}: {text}"

    # --- the log, the counts and the section ---------------------------------------------------------
    def _event(self, e: Event) -> None:
        key = (e.kind, e.target)
        if e.what == "refuse":
            if self._logged.get(key) == e.why:
                return                          # the same refusal as last round: logged and counted once
            self._logged[key] = e.why
        else:
            self._logged.pop(key, None)
        if e.result:
            k = (e.kind, e.mode, e.result)
            self.counts[k] = self.counts.get(k, 0) + 1
        fields = {"action": e.kind, "mode": e.mode, "target": e.label, "why": e.why}
        if e.evidence:
            fields["evidence"] = e.evidence
        if e.cap:
            fields["cap"] = e.cap
        line = f"remediation {e.what}" + (" (dry run)" if e.mode == DRY_RUN else "")
        if e.result in ("failed", "refused"):
            log.warning(line, result=e.result, **fields)
        else:
            log.info(line, result=e.result or None, **fields)

    def _cap_text(self, rnd: policy.Round, kind: str) -> str:
        b = rnd.breakers.get(kind)
        return f"{b.used}/{b.cap}" if b is not None else ""

    def _shown(self) -> tuple[Action, ...]:
        acts = sorted(self.record.actions.values(), key=lambda a: a.created)
        closed = [a for a in acts if not a.open][-KEEP_SHOWN:]
        return tuple(a for a in acts if a.open) + tuple(closed)

    def _publish(self, held: bool, how: str, breakers: Mapping[str, Breaker],
                 refusals: list[Refusal], _: list[Finding], now: float) -> None:
        shown = self._shown()
        device = self.host if self.scope == "node" else ""
        findings = tuple(policy.findings_of(breakers, shown, device, refusals)) if held else ()
        self._section = RemediationSection(self.scope, effective_modes(self.cfg), held, how, shown, dict(self.counts),
                                           dict(breakers), tuple(refusals), findings)


def policy_modes(modes: Mapping[str, str]) -> str:
    from fabricmon.model.remediation import modes_line
    return modes_line(modes)


__all__ = ["Remediator"]
