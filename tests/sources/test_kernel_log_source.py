"""The kernel_log source without a machine's ring buffer: the journal where /dev/kmsg cannot be opened,
the state kept across restarts of the same boot and dropped on a new boot, and a replayed bundle."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from fabricmon.config import from_dict
from fabricmon.host.kmsg import KmsgRead, KmsgRecord
from fabricmon.sources.kernel_log import KernelLogSource
from helpers import FakeIO, run_inputs

CMD = "mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource"


class KmsgIO(FakeIO):
    """FakeIO with a kernel log: `records` as /dev/kmsg would give them, or `denied` (EACCES)."""

    def __init__(self, records: list[KmsgRecord] | None = None, denied: bool = False, boot: str = "boot-1", **kw):
        super().__init__(files={("procfs", "sys/kernel/random/boot_id"): boot + "\n"}, **kw)
        self.records, self.denied = records or [], denied

    def kmsg(self, path: str, after: int | None, limit: int) -> KmsgRead:
        if self.denied:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        recs = [r for r in self.records if after is None or r.seq > after][:limit]
        return KmsgRead(recs, 0, False, recs[-1].seq if recs else after)


def source(tmp_path: Path) -> KernelLogSource:
    cfg = from_dict({"paths": {"state_dir": str(tmp_path)}}, check_paths=False)
    return KernelLogSource(cfg)


def test_the_journal_where_kmsg_is_denied(tmp_path: Path) -> None:
    lines = [json.dumps({"__CURSOR": f"c{i}", "__MONOTONIC_TIMESTAMP": "1000000", "MESSAGE": m})
             for i, m in enumerate([CMD, "an unrelated line"])]
    argv = ("journalctl", "-k", "-o", "json", "--no-pager", "-n", "20000", "--boot")
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
    out = source(tmp_path).collect(KmsgIO(denied=True), run_inputs())
    assert out.errors == [("read", "/dev/kmsg: Permission denied, and journalctl is not installed")]


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
