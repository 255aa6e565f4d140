"""kernel_log source: the NIC events of the kernel log (parsers.kmsg.PATTERNS), read from /dev/kmsg
through the host interface, else from `journalctl -k -o json` where /dev/kmsg cannot be read (a
daemon without CAP_SYSLOG under kernel.dmesg_restrict, in the systemd-journal group).

- Neither readable: no records (the pipeline reports the source down) and one error that says why
  each failed and the fix, e.g. `/dev/kmsg: Operation not permitted (kernel.dmesg_restrict=1 and no
  CAP_SYSLOG); journalctl -k: no kernel message of this boot (...): run the daemon with CAP_SYSLOG
  (the shipped unit does) or in group systemd-journal`. A journal that answers nothing at all for
  this boot is not read (every boot logs kernel messages): journald is not running, does not read
  the kernel log, or shows this user only its own journal.
- A replayed bundle has no kernel log (EOPNOTSUPP/ENODEV): no events, no error.

- Each poll reads the records logged since the last (at most `max_lines`; the rest next poll).
- Counts are exact: every matching line counts, however fast it repeats. Repeats are
  de-duplicated into one aggregate per (event, device), and logged at most once a minute each.
- A line that matches no pattern is counted (`lines`), never kept.
- Where the last record read and the aggregates live: `<paths.state_dir>/kernel_log.json`, with the
  boot id (kmsg's sequence numbers restart at boot). A restarted daemon resumes after its last
  record (no event read twice, none lost unless the ring buffer overwrote it meanwhile: counted as
  `lost`). A new boot starts afresh. Where the state dir cannot be written, the state is kept in
  memory and that is logged once.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import structlog

from fabricmon.fsutil import write_atomic
from fabricmon.host.io import HostIO
from fabricmon.host.kmsg import DEV_KMSG
from fabricmon.model.finding import FATAL
from fabricmon.model.kernel_log import BY_EVENT, REPORT_WINDOW, KernelEvent, KernelLogData
from fabricmon.parsers.kmsg import Match, match, parse_journal_json
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, command_error, register
from fabricmon.schema import Schema, from_class, integer, number, string

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

log = structlog.get_logger("fabricmon.kernel_log")

STATE_FILE = "kernel_log.json"
MAX_EVENTS = 512            # distinct (event, device) aggregates kept; the longest quiet is forgotten first
LOG_EVERY = 60.0            # seconds between log lines for one aggregate
CAP_SYSLOG = 34             # linux/capability.h
# the fix where the kernel log is denied (one line; docs/kernel-log.md#as-deployed)
FIX_DENIED = "run the daemon with CAP_SYSLOG (the shipped unit does) or in group systemd-journal"
FIX_SANDBOX = ("let the unit read /dev/kmsg (ProtectKernelLogs=no, DeviceAllow=/dev/kmsg r: the shipped unit does) "
               "or run it in group systemd-journal")


@dataclass(frozen=True, slots=True)
class KernelLogOptions:
    path: str = "/dev/kmsg"
    journalctl: str = "journalctl"
    max_lines: int = 20000
    hold: float = 3600.0
    state_dir: str = ""         # paths.state_dir: where the read position is kept ("": nowhere)


OPTIONS: Schema[KernelLogOptions] = Schema((
    string("path", "/dev/kmsg", "the kernel log device read (non-blocking; resumed after the last record read)"),
    string("journalctl", "journalctl", "the program read (`journalctl -k -o json`) where `path` cannot be opened"),
    integer("max_lines", 20000, "kernel log records read per poll at most (a burst is read over several polls)",
            lo=100, hi=1_000_000),
    number("hold", 3600.0, "seconds a degraded or watch event stays a finding after its last line (a fatal one "
           "stays until the node reboots)", lo=0.0),
), build=lambda v, key, ctx: KernelLogOptions(**v, state_dir=ctx.built.get("state_dir") or ""),  # paths.state_dir
    pure=False)


@register("kernel_log", enabled=True, interval=15.0, timeout=5.0, records=KernelLogData, options=OPTIONS)
class KernelLogSource(Source):

    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self.opts: KernelLogOptions = self.sc.settings(KernelLogOptions)
        self.state_path: str | None = os.path.join(self.opts.state_dir, STATE_FILE) if self.opts.state_dir else None
        self.data = KernelLogData(hold=self.opts.hold)
        self.seq: int | None = None         # the last kmsg record taken (this boot)
        self.cursor = ""                    # the last journal entry taken
        self._loaded = False
        self._logged: dict[tuple[str, str], float] = {}
        self._warned: set[str] = set()
        self._unavailable = False
        self._saved_once = False

    # --- state ---------------------------------------------------------------------------
    def _warn(self, what: str, **kw: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(what, **kw)

    def _load(self, boot: str) -> None:
        self._loaded = True
        self.data.boot_id = boot
        if self.state_path is None:
            return
        try:
            with open(self.state_path, "rb") as fh:
                raw = json.loads(fh.read(4 << 20))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self._warn("kernel log state unreadable: starting afresh", path=self.state_path, error=str(exc))
            return
        if not isinstance(raw, dict) or raw.get("boot_id") != boot or not boot:
            return                  # another boot: its sequence numbers and events are not this one's
        try:
            self.seq = int(raw["seq"]) if raw.get("seq") is not None else None
            self.cursor = str(raw.get("cursor", ""))
            for k in ("lines", "matched", "lost", "dropped_events"):
                setattr(self.data, k, int(raw.get(k, 0)))
            for e in raw.get("events", []):
                ev = KernelEvent(**{k: e[k] for k in KernelEvent.__dataclass_fields__ if k in e})
                self.data.events[ev.key] = ev
        except (KeyError, TypeError, ValueError) as exc:
            self._warn("kernel log state unreadable: starting afresh", path=self.state_path, error=str(exc))
            self.seq, self.cursor, self.data = None, "", KernelLogData(boot_id=boot, hold=self.opts.hold)

    def _save(self) -> None:
        if self.state_path is None:
            return
        if not os.access(os.path.dirname(self.state_path) or ".", os.W_OK):
            # not this user's (an ordinary user's `check`) or not there: kept in memory, quietly (the
            # learned inventory already says when the daemon's state dir is missing)
            if "nodir" not in self._warned:
                self._warned.add("nodir")
                log.debug("kernel log state kept in memory", path=self.state_path)
            return
        d = self.data
        doc = {"boot_id": d.boot_id, "seq": self.seq, "cursor": self.cursor, "lines": d.lines, "matched": d.matched,
               "lost": d.lost, "dropped_events": d.dropped_events, "events": [asdict(e) for e in d.events.values()]}
        try:
            write_atomic(self.state_path, json.dumps(doc).encode(), make_dirs=False)
        except OSError as exc:
            self._warn("kernel log state not kept (in memory only)", path=self.state_path, error=str(exc))

    # --- reading -------------------------------------------------------------------------
    def _take(self, text: str, usec: int, wall_now: float, mono_now: float) -> None:
        d = self.data
        d.lines += 1
        m = match(text)
        if m is None:
            return
        d.matched += 1
        when = wall_now - max(0.0, mono_now - usec / 1e6) if usec else wall_now
        ref = m.pci or m.netdev or m.ibdev
        opened = self._report_of(m, ref, when)
        if opened is not None:          # a line of that event's report: its reason, not a second event
            if m.detail and m.detail not in opened.detail:
                reason = m.detail.split(": ", 1)[-1]          # "synd 0x8: unrecoverable hardware error"
                opened.detail = m.detail if not opened.detail else \
                    opened.detail if reason in opened.detail else f"{opened.detail}; {m.detail}"
            return
        key = (m.event, ref)
        ev = d.events.get(key)
        if ev is None:
            if len(d.events) >= MAX_EVENTS:
                oldest = min(d.events.values(), key=lambda e: e.last)
                del d.events[oldest.key]
                d.dropped_events += 1
            ev = d.events[key] = KernelEvent(m.event, m.pci, m.netdev, m.ibdev, first=when)
        ev.count += 1
        ev.last = max(ev.last, when)
        ev.text = text
        ev.detail = m.detail or ev.detail
        if m.netdev and not ev.netdev:
            ev.netdev = m.netdev
        if mono_now - self._logged.get(key, -LOG_EVERY) >= LOG_EVERY:      # rate-limited: one line a minute
            self._logged[key] = mono_now
            log.debug("kernel log event", kind=m.event, device=key[1], count=ev.count, line=text[:300])

    def _report_of(self, m: Match, ref: str, when: float) -> KernelEvent | None:
        """The event whose report this line is a line of (model.kernel_log's `continues`): the latest of those
        events on the same device, within REPORT_WINDOW of it; None for a line that opens an event."""
        of = BY_EVENT[m.event].continues
        if not of:
            return None
        found = [e for e in (self.data.events.get((o, ref)) for o in of)
                 if e is not None and 0.0 <= when - e.last <= REPORT_WINDOW]
        return max(found, key=lambda e: e.last) if found else None

    def _read_kmsg(self, io: HostIO) -> int:
        got = io.kmsg(self.opts.path, self.seq, self.opts.max_lines)
        wall, mono = time.time(), time.monotonic()
        for rec in got.records:
            self._take(rec.text, rec.usec, wall, mono)
        self.data.lost += got.lost
        if got.last_seq is not None:
            self.seq = got.last_seq
        self.data.via = "kmsg"
        return len(got.records)

    def _denied(self, io: HostIO, exc: OSError) -> tuple[str, str]:
        """Why /dev/kmsg (`path`) could not be opened, and the fix: (reason, fix)."""
        what = exc.strerror or str(exc)
        if exc.errno == errno.ENOENT:
            if self.opts.path != DEV_KMSG:
                return (f"{what} (sources.kernel_log.path)", f"set sources.kernel_log.path to {DEV_KMSG}")
            return what, f"give the daemon {DEV_KMSG} (a container: the host's device) or the host's journal"
        if exc.errno not in (errno.EPERM, errno.EACCES):
            return what, FIX_DENIED
        restrict = _proc_int(io, "sys/kernel/dmesg_restrict")
        cap = _has_cap(io, CAP_SYSLOG)
        if restrict and cap is False:
            return f"{what} (kernel.dmesg_restrict={restrict} and no CAP_SYSLOG)", FIX_DENIED
        held = {True: "CAP_SYSLOG held", False: "no CAP_SYSLOG", None: "CAP_SYSLOG unknown"}[cap]
        if cap or restrict == 0:        # the kernel itself would let this process read: something else denies it
            return f"{what} (kernel.dmesg_restrict={restrict}, {held}: the sandbox or a security module denies it)", \
                FIX_SANDBOX
        return f"{what} (kernel.dmesg_restrict={'?' if restrict is None else restrict}, {held})", FIX_DENIED

    def _read_journal(self, io: HostIO, inputs: Inputs, out: SourceOutput, why: str, fix: str) -> int | None:
        """The records after the last cursor from the journal: how many, or None where it cannot be
        read (the error says why, with the fix)."""
        argv = [self.opts.journalctl, "-k", "-o", "json", "--no-pager", "-n", str(self.opts.max_lines)]
        if self.cursor:
            argv.append(f"--after-cursor={self.cursor}")
        else:
            argv.append("--boot")
        res = io.run(argv, inputs.remaining(self.sc.timeout))
        head = f"{self.opts.path}: {why}; journalctl -k: "
        if res.error == "not_found":
            out.error("read", f"{head}{self.opts.journalctl} is not installed: {fix}")
            return None
        err = command_error(res)
        if err is not None:
            out.error(err[0], f"{head}{err[1]}: {fix}")
            return None
        entries = out.parsed(res, parse_journal_json, what=head)
        if entries is None:
            return None
        if not entries and not self.cursor:
            said = res.stderr.strip().splitlines()[:1]
            out.error("read", f"{head}no kernel message of this boot{' (' + said[0][:160] + ')' if said else ''}: "
                              "journald is not running or not reading the kernel log, or this user may read only "
                              f"its own journal: {fix}")
            return None
        if self.data.via != "journal":      # once, and again after kmsg was read meanwhile
            (log.warning if self.opts.path != DEV_KMSG else log.info)(
                "kernel log read from the journal", path=self.opts.path, error=why)
        wall, mono = time.time(), time.monotonic()
        for e in entries:
            self._take(e.text, e.usec, wall, mono)
        if entries:
            self.cursor = entries[-1].cursor
        self.data.via = "journal"
        return len(entries)

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        if not self._loaded:
            try:
                boot = io.read("procfs", "sys/kernel/random/boot_id").strip()
            except OSError:
                boot = ""
            self._load(boot)
        try:
            n: int | None = self._read_kmsg(io)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENODEV):      # a replayed bundle: no kernel log
                if not self._unavailable:
                    self._unavailable = True
                    log.info("kernel log not available here", error=exc.strerror or str(exc))
                out.data = self.data
                return out
            n = self._read_journal(io, inputs, out, *self._denied(io, exc))
            if n is None:
                return out          # neither readable: no records, the error says why and the fix
        if n or not self._saved_once:
            self._save()
            self._saved_once = True
        self._expire()
        out.data = KernelLogData(dict(self.data.events), self.data.via, self.data.boot_id, self.data.lines,
                                 self.data.matched, self.data.lost, self.data.dropped_events, self.opts.hold)
        return out

    def _expire(self) -> None:
        """Aggregates quiet for longer than 7 holds are forgotten (their counts stay in the totals of
        the metrics already scraped); a fatal one is kept for the boot."""
        limit = time.time() - 7 * max(self.opts.hold, 60.0)
        for key in [k for k, e in self.data.events.items() if e.last < limit and BY_EVENT[e.event].klass != FATAL]:
            del self.data.events[key]


def _proc_int(io: HostIO, rel: str) -> int | None:
    try:
        return int(io.read("procfs", rel).strip())
    except (OSError, ValueError):
        return None


def _has_cap(io: HostIO, cap: int) -> bool | None:
    """Whether this process holds capability `cap` (effective; /proc/self/status), None where unknown."""
    try:
        status = io.read("procfs", "self/status")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split(":", 1)[1].strip(), 16) >> cap & 1)
            except ValueError:
                return None
    return None


__all__ = ["CAP_SYSLOG", "FIX_DENIED", "FIX_SANDBOX", "KernelLogOptions", "KernelLogSource", "OPTIONS", "STATE_FILE"]
