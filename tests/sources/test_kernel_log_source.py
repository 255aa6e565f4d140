"""The kernel_log source without a machine's ring buffer: the journal where /dev/kmsg cannot be opened,
neither readable (no records, one error with the reason and the fix), the state kept across restarts of
the same boot and dropped on a new boot, and a replayed bundle. The same as the service user with a real
/dev/kmsg and a real journalctl: tests/deployed/."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from fabricmon.config import from_dict
from fabricmon.host.kmsg import KmsgRead, KmsgRecord
from fabricmon.sources.kernel_log import KernelLogSource
from helpers import FakeIO, run_inputs

CMD = "mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource"


NO_SYSLOG = "Name:\tpython3\nCapInh:\t0000000000000000\nCapEff:\t0000000000000000\n"
SYSLOG = "Name:\tpython3\nCapEff:\t0000000400000000\n"      # bit 34: CAP_SYSLOG only


class KmsgIO(FakeIO):
    """FakeIO with a kernel log: `records` as /dev/kmsg would give them, or `denied` (an errno: EACCES for
    True) raised when it is opened; `restrict` and `status` are /proc/sys/kernel/dmesg_restrict and
    /proc/self/status (absent: unknown)."""

    def __init__(self, records: list[KmsgRecord] | None = None, denied: bool | int = False, boot: str = "boot-1",
                 restrict: int | None = None, status: str | None = None, **kw):
        files = {("procfs", "sys/kernel/random/boot_id"): boot + "\n"}
        if restrict is not None:
            files[("procfs", "sys/kernel/dmesg_restrict")] = f"{restrict}\n"
        if status is not None:
            files[("procfs", "self/status")] = status
        super().__init__(files=files, **kw)
        self.records = records or []
        self.denied = errno.EACCES if denied is True else int(denied)

    def kmsg(self, path: str, after: int | None, limit: int) -> KmsgRead:
        if self.denied:
            raise OSError(self.denied, os.strerror(self.denied), path)
        recs = [r for r in self.records if after is None or r.seq > after][:limit]
        return KmsgRead(recs, 0, False, recs[-1].seq if recs else after)


def source(tmp_path: Path, **opts) -> KernelLogSource:
    cfg = from_dict({"paths": {"state_dir": str(tmp_path)}, "sources": {"kernel_log": opts}}, check_paths=False)
    return KernelLogSource(cfg.sources["kernel_log"])


JOURNAL = ("journalctl", "-k", "-o", "json", "--no-pager", "-n", "20000", "--boot")


def test_the_journal_where_kmsg_is_denied(tmp_path: Path) -> None:
    lines = [json.dumps({"__CURSOR": f"c{i}", "__MONOTONIC_TIMESTAMP": "1000000", "MESSAGE": m})
             for i, m in enumerate([CMD, "an unrelated line"])]
    argv = JOURNAL
    io = KmsgIO(denied=True, commands={argv: (0, "\n".join(lines) + "\n", "")})
    out = source(tmp_path).collect(io, run_inputs())
    assert not out.errors and out.data.via == "journal" and out.data.lines == 2
    [ev] = out.data.events.values()
    assert (ev.event, ev.pci, ev.count) == ("cmd_timeout", "0000:03:00.0", 1)
    # the next poll resumes after the last cursor
    io.commands = {(*argv[:-1], "--after-cursor=c1"): (0, "", "")}
    out = KernelLogSource.collect(src := source(tmp_path), io, run_inputs())      # a restart: state from the file
    assert io.ran[-1][-1] == "--after-cursor=c1" and out.data.events[("cmd_timeout", "0000:03:00.0")].count == 1
    assert src.cursor == "c1"


def test_neither_kmsg_nor_journalctl_is_a_source_error(tmp_path: Path) -> None:
    """Denied under kernel.dmesg_restrict=1 without CAP_SYSLOG, no journalctl: no records (the source is
    down) and one error with both reasons and the fix."""
    out = source(tmp_path).collect(KmsgIO(denied=errno.EPERM, restrict=1, status=NO_SYSLOG), run_inputs())
    assert out.data is None
    assert out.errors == [("read", "/dev/kmsg: Operation not permitted (kernel.dmesg_restrict=1 and no CAP_SYSLOG); "
                                   "journalctl -k: journalctl is not installed: run the daemon with CAP_SYSLOG (the "
                                   "shipped unit does) or in group systemd-journal")]


def test_a_journal_with_nothing_of_this_boot_is_not_read(tmp_path: Path) -> None:
    """journalctl exits 0 and prints nothing where journald does not run or the user may read only its own
    journal (seen as an unprivileged user on this machine): every boot logs kernel messages, so that is a
    failure, never "no events"."""
    io = KmsgIO(denied=errno.EPERM, restrict=1, status=NO_SYSLOG, commands={JOURNAL: (0, "", "")})
    src = source(tmp_path)
    out = src.collect(io, run_inputs())
    assert out.data is None and len(out.errors) == 1
    kind, msg = out.errors[0]
    assert kind == "read" and msg.startswith("/dev/kmsg: Operation not permitted (kernel.dmesg_restrict=1 and no "
                                             "CAP_SYSLOG); journalctl -k: no kernel message of this boot: ")
    assert msg.endswith(": run the daemon with CAP_SYSLOG (the shipped unit does) or in group systemd-journal")
    assert not (tmp_path / "kernel_log.json").exists()          # nothing read, nothing saved
    # journalctl's own words are kept; a failing journalctl is the same failure with its exit
    io.commands = {JOURNAL: (0, "", "No journal files were found.\n")}
    assert "no kernel message of this boot (No journal files were found.)" in src.collect(io, run_inputs()).errors[0][1]
    io.commands = {JOURNAL: (1, "", "No journal files were opened due to insufficient permissions.\n")}
    out = src.collect(io, run_inputs())
    assert out.data is None and out.errors == [(
        "exit_code", "/dev/kmsg: Operation not permitted (kernel.dmesg_restrict=1 and no CAP_SYSLOG); journalctl -k: "
        "journalctl -k -o json --no-pager -n 20000 --boot: exit 1: No journal files were opened due to insufficient "
        "permissions.: run the daemon with CAP_SYSLOG (the shipped unit does) or in group systemd-journal")]


def test_denied_with_cap_syslog_is_the_sandbox(tmp_path: Path) -> None:
    """CAP_SYSLOG held (or dmesg_restrict off) and still denied: the kernel would allow it, the unit's
    sandbox (ProtectKernelLogs=yes, a device policy without /dev/kmsg) or a security module does not."""
    for restrict, status in ((1, SYSLOG), (0, NO_SYSLOG)):
        out = source(tmp_path).collect(KmsgIO(denied=errno.EPERM, restrict=restrict, status=status), run_inputs())
        [(_, msg)] = out.errors
        assert out.data is None and msg.startswith(f"/dev/kmsg: Operation not permitted (kernel.dmesg_restrict="
                                                   f"{restrict}, ") and "the sandbox or a security module denies" in msg
        assert msg.endswith(": let the unit read /dev/kmsg (ProtectKernelLogs=no, DeviceAllow=/dev/kmsg r: the shipped "
                            "unit does) or run it in group systemd-journal")


def test_a_missing_path_names_the_key(tmp_path: Path) -> None:
    """`path` pointed at nothing, no journal to fall back to: no data, and the error names the key (issue 46.5)."""
    io = KmsgIO(denied=errno.ENOENT, commands={JOURNAL: (0, "", "")})
    out = source(tmp_path, path="/dev/kmsg-typo").collect(io, run_inputs())
    assert out.data is None
    [(_, msg)] = out.errors
    assert msg.startswith("/dev/kmsg-typo: No such file or directory (sources.kernel_log.path); journalctl -k: ")
    assert msg.endswith(": set sources.kernel_log.path to /dev/kmsg")
    # the default path missing (a container without the device): the fix says what to give it
    [(_, msg)] = source(tmp_path).collect(KmsgIO(denied=errno.ENOENT), run_inputs()).errors
    assert msg == ("/dev/kmsg: No such file or directory; journalctl -k: journalctl is not installed: give the daemon "
                   "/dev/kmsg (a container: the host's device) or the host's journal")


def test_the_journal_resumed_with_nothing_new_is_up(tmp_path: Path) -> None:
    """After a first answer, an empty read after the cursor is "nothing new", not a failure."""
    first = json.dumps({"__CURSOR": "c0", "__MONOTONIC_TIMESTAMP": "1000000", "MESSAGE": "a boot line"})
    io = KmsgIO(denied=True, commands={JOURNAL: (0, first + "\n", ""),
                                       (*JOURNAL[:-1], "--after-cursor=c0"): (0, "", "")})
    src = source(tmp_path)
    assert src.collect(io, run_inputs()).data.lines == 1
    out = src.collect(io, run_inputs())
    assert not out.errors and out.data.via == "journal" and out.data.lines == 1


def test_a_restart_resumes_and_a_new_boot_starts_afresh(tmp_path: Path) -> None:
    recs = [KmsgRecord(10, 5_000_000, 4, CMD), KmsgRecord(11, 5_000_001, 6, "noise")]
    out = source(tmp_path).collect(KmsgIO(recs), run_inputs())
    assert out.data.events[("cmd_timeout", "0000:03:00.0")].count == 1
    saved = json.loads((tmp_path / "kernel_log.json").read_text())
    assert (saved["boot_id"], saved["seq"]) == ("boot-1", 11)
    recs.append(KmsgRecord(12, 6_000_000, 4, CMD))
    out = source(tmp_path).collect(KmsgIO(recs), run_inputs())         # restarted: only seq 12 is new
    assert out.data.events[("cmd_timeout", "0000:03:00.0")].count == 2 and out.data.lines == 3
    out = source(tmp_path).collect(KmsgIO(recs[:1], boot="boot-2"), run_inputs())    # rebooted
    assert out.data.events[("cmd_timeout", "0000:03:00.0")].count == 1 and out.data.lines == 1


def test_a_replayed_bundle_has_no_kernel_log(tmp_path: Path) -> None:
    class Replayed(KmsgIO):
        def kmsg(self, path: str, after: int | None, limit: int) -> KmsgRead:
            raise OSError(errno.EOPNOTSUPP, "the kernel log is not recorded in a bundle", path)
    io = Replayed()
    out = source(tmp_path).collect(io, run_inputs())
    assert not out.errors and out.data.via == "" and not out.data.events
    assert io.ran == []             # journalctl is never run for a bundle
