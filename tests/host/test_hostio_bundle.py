"""Tests for fabricmon.host (io.py, bundle.py): LiveIO on a tree, RecordingIO bundles, ReplayIO answers."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from fabricmon.config import from_dict
from fabricmon.host import BUNDLE_VERSION, BundleError, LiveIO, RecordingIO, ReplayIO
from fabricmon.sources.sysfs_ib import SysfsSource
from helpers import FIXTURES, roce_inputs, run_inputs

FIXTURE = FIXTURES / "sysfs" / "two_hca"
IB = "class/infiniband"
EINVAL_FILE = f"{IB}/mlx5_0/ports/1/counters/port_rcv_switch_relay_errors"
EISDIR_FILE = f"{IB}/mlx5_0/ports/1/counters/port_rcv_errors"


class EinvalLiveIO(LiveIO):
    """A LiveIO whose kernel answers EINVAL for one file (as gid_attrs/ndevs/<empty slot> does)."""

    def read(self, root: str, rel: str) -> str:
        if root == "sysfs" and rel == EINVAL_FILE:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), self.path(root, rel))
        return super().read(root, rel)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of our two-HCA sysfs fixture, with one counter turned into a directory (EISDIR)."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    (root / EISDIR_FILE).unlink()
    (root / EISDIR_FILE).mkdir()
    return root


@pytest.fixture
def tool(tmp_path: Path) -> Path:
    """A fake diagnostic tool: prints its argv, writes to stderr, exits 0 unless told."""
    f = tmp_path / "fake-ibtool"
    f.write_text(
        "#!" + sys.executable + "\n"
        "import sys\n"
        "print('args:', ' '.join(sys.argv[1:]))\n"
        "print('note: fake', file=sys.stderr)\n"
        "sys.exit(3 if 'fail' in sys.argv else 0)\n")
    f.chmod(0o755)
    return f


def _config(sysfs: Path):
    return from_dict({"paths": {"sysfs": str(sysfs)}}, check_paths=False)


def test_liveio_reads_strips_nothing_and_caches(tree: Path) -> None:
    io = LiveIO(str(tree), "/proc")
    try:
        assert io.read("sysfs", f"{IB}/mlx5_0/fw_ver") == "28.40.1202"         # no newline in the file
        assert io.read("sysfs", f"{IB}/mlx5_0/hca_type") == "MT4129\n"
        assert io.open_files() == 2
        (tree / IB / "mlx5_0/hca_type").write_text("MT4130\n")                  # same inode
        assert io.read("sysfs", f"{IB}/mlx5_0/hca_type") == "MT4130\n"         # pread from 0 again
        assert io.open_files() == 2
        assert io.listdir("sysfs", IB) == ["mlx5_0", "mlx5_1"]
        assert io.realpath("sysfs", f"{IB}/mlx5_0/device") == \
            "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0"
        with pytest.raises(IsADirectoryError):
            io.read("sysfs", EISDIR_FILE)
        with pytest.raises(FileNotFoundError):
            io.read("sysfs", f"{IB}/mlx5_9/hca_type")
        assert io.read("procfs", "self/stat").split()[0] == str(os.getpid())
    finally:
        io.close()
    assert io.open_files() == 0


def test_record_then_replay_gives_identical_answers(tree: Path, tool: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    rec = RecordingIO(EinvalLiveIO(str(tree), "/proc"), bundle, meta={"hostname": "node-a"})
    cfg = _config(tree)
    live = SysfsSource(cfg.sources["sysfs"]).collect(rec, run_inputs())
    ok = rec.run([str(tool), "-C", "mlx5_0"], 10)
    bad = rec.run([str(tool), "fail"], 10)
    missing = rec.run(["/nonexistent/perfquery", "-x"], 10)
    rec.save()
    rec.close()

    # the live answers themselves
    assert ok.ok and ok.stdout == "args: -C mlx5_0\n" and ok.stderr == "note: fake\n"
    assert bad.returncode == 3 and bad.stdout == "args: fail\n"
    assert missing.error == "not_found"
    kinds = sorted(k for k, _ in live.errors)
    assert kinds == ["read", "read"], live.errors               # EINVAL and EISDIR, nothing else
    assert any("Invalid argument" in m for _, m in live.errors)
    assert any("Is a directory" in m for _, m in live.errors)

    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["bundle_version"] == BUNDLE_VERSION
    assert manifest["hostname"] == "node-a"
    # optional files that do not exist (ENOENT) are recorded too, so the replay sees them missing
    real_errors = {k: v for k, v in manifest["read_errors"].items() if v != errno.ENOENT}
    assert real_errors == {f"sysfs/{EINVAL_FILE}": errno.EINVAL, f"sysfs/{EISDIR_FILE}": errno.EISDIR}
    assert [c["argv"][1:] for c in manifest["commands"]] == [["-C", "mlx5_0"], ["fail"], ["-x"]]
    assert (bundle / "files" / "sysfs" / IB / "mlx5_0/ports/1/rate").read_text() == "400 Gb/sec (4X NDR)\n"

    # the replay, on a machine where the tree and the tool are gone
    shutil.rmtree(tree)
    tool.unlink()
    rep = ReplayIO(bundle)
    replayed = SysfsSource(cfg.sources["sysfs"]).collect(rep, run_inputs())
    assert replayed.errors == live.errors
    assert replayed.data == live.data
    r = rep.run([str(tool), "-C", "mlx5_0"], 10)
    assert (r.returncode, r.stdout, r.stderr, r.error) == (0, ok.stdout, ok.stderr, None)
    r = rep.run([str(tool), "fail"], 10)
    assert (r.returncode, r.stdout, r.error) == (3, bad.stdout, None)
    r = rep.run(["/nonexistent/perfquery", "-x"], 10)
    assert r.error == "not_found"
    r = rep.run([str(tool), "-C", "mlx5_1"], 10)             # never run during the capture
    assert r.error == "not_recorded" and r.returncode is None and not r.ok


def test_replay_raises_the_recorded_errno(tree: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    rec = RecordingIO(EinvalLiveIO(str(tree), "/proc"), bundle)
    with pytest.raises(OSError) as live_exc:
        rec.read("sysfs", EINVAL_FILE)
    with pytest.raises(OSError):
        rec.read("sysfs", EISDIR_FILE)
    with pytest.raises(FileNotFoundError):
        rec.listdir("sysfs", f"{IB}/mlx5_0/ports/1/no_such_dir")
    assert rec.read("sysfs", f"{IB}/mlx5_1/ports/1/link_layer") == "Ethernet"
    rec.save()
    rep = ReplayIO(bundle)
    for rel, code in ((EINVAL_FILE, errno.EINVAL), (EISDIR_FILE, errno.EISDIR)):
        with pytest.raises(OSError) as exc:
            rep.read("sysfs", rel)
        assert exc.value.errno == code
    assert live_exc.value.errno == errno.EINVAL
    with pytest.raises(OSError) as exc:
        rep.listdir("sysfs", f"{IB}/mlx5_0/ports/1/no_such_dir")
    assert exc.value.errno == errno.ENOENT
    assert rep.read("sysfs", f"{IB}/mlx5_1/ports/1/link_layer") == "Ethernet"
    # what the capture never read is absent (ENOENT), not invented
    with pytest.raises(FileNotFoundError):
        rep.read("sysfs", f"{IB}/mlx5_1/ports/1/rate")
    with pytest.raises(OSError) as exc:
        rep.realpath("sysfs", f"{IB}/mlx5_1/device")
    assert exc.value.errno == errno.ENOENT


def test_listings_and_realpaths_are_recorded(tree: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    rec = RecordingIO(LiveIO(str(tree), "/proc"), bundle)
    names = rec.listdir("sysfs", IB)
    real = rec.realpath("sysfs", f"{IB}/mlx5_1/device")
    rec.save()
    rep = ReplayIO(bundle)
    assert rep.listdir("sysfs", IB) == names == ["mlx5_0", "mlx5_1"]
    assert rep.realpath("sysfs", f"{IB}/mlx5_1/device") == real == \
        "/sys/devices/pci0000:a0/0000:a0:03.1/0000:a3:00.0"


def test_last_answer_for_a_path_wins(tree: Path, tmp_path: Path) -> None:
    """A file that failed once and then read fine is replayed as read fine (and the reverse)."""
    flaky = {"fail": True}

    class FlakyIO(LiveIO):
        def read(self, root: str, rel: str) -> str:
            if rel.endswith("/state") and flaky["fail"]:
                raise OSError(errno.EAGAIN, "try again", rel)
            return super().read(root, rel)

    bundle = tmp_path / "b"
    rec = RecordingIO(FlakyIO(str(tree), "/proc"), bundle)
    rel = f"{IB}/mlx5_0/ports/1/state"
    with pytest.raises(OSError):
        rec.read("sysfs", rel)
    flaky["fail"] = False
    assert rec.read("sysfs", rel) == "4: ACTIVE\n"
    rec.save()
    assert ReplayIO(bundle).read("sysfs", rel) == "4: ACTIVE\n"


def test_replay_commands_last_recording_wins(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "bundle.json").write_text(json.dumps({"bundle_version": BUNDLE_VERSION, "commands": [
        {"argv": ["ibstat"], "returncode": 255, "stdout": "old", "stderr": "", "error": None},
        {"argv": ["ibstat"], "returncode": 0, "stdout": "new", "stderr": "", "error": None},
    ]}))
    r = ReplayIO(bundle).run(["ibstat"], 5)
    assert (r.returncode, r.stdout) == (0, "new")
    assert r.duration == 0.0


@pytest.mark.parametrize("content,match", [
    (None, "no bundle.json"),
    ("{not json", "unreadable"),
    (json.dumps({"bundle_version": 99}), "unsupported bundle version"),
])
def test_bad_bundles_are_a_clear_error(tmp_path: Path, content: str | None, match: str) -> None:
    if content is not None:
        (tmp_path / "bundle.json").write_text(content)
    with pytest.raises(BundleError, match=match):
        ReplayIO(tmp_path)


def test_read_many_answers_each_file_or_its_error_alike_live_recorded_and_replayed(tree: Path, tmp_path: Path) -> None:
    rels = [f"{IB}/mlx5_0/ports/1/state", EISDIR_FILE, f"{IB}/mlx5_0/ports/1/counters/symbol_error",
            f"{IB}/mlx5_0/ports/1/counters/nope"]
    live = LiveIO(str(tree), "/proc")
    for _ in range(2):                                    # first read opens, the second preads the cached fd
        got = live.read_many("sysfs", rels)
        assert got[0] == (tree / rels[0]).read_text() and got[2] == (tree / rels[2]).read_text()
        assert isinstance(got[1], OSError) and got[1].errno == errno.EISDIR
        assert isinstance(got[3], OSError) and got[3].errno == errno.ENOENT
    bundle = tmp_path / "b"
    rec = RecordingIO(LiveIO(str(tree), "/proc"), bundle)
    recorded = rec.read_many("sysfs", rels)
    rec.save()
    replayed = ReplayIO(bundle).read_many("sysfs", rels)
    for a, b in zip(recorded, replayed):
        if isinstance(a, OSError):
            assert isinstance(b, OSError) and b.errno == a.errno
        else:
            assert b == a


def test_read_many_reads_long_and_non_utf8_files_whole_and_sees_each_change(tmp_path: Path) -> None:
    """The open-file path: a file longer than the first small read comes back whole, bytes that are
    not UTF-8 as replacement characters (as `read` gives them), a file rewritten between two calls
    as its new text, and a file removed between them as its error, the others unaffected."""
    d = tmp_path / "class" / "x"
    d.mkdir(parents=True)
    files = {"short": b"12\n", "long": b"7" * 5000 + b"\n", "latin": b"caf\xe9\n", "gone": b"1\n"}
    for name, data in files.items():
        (d / name).write_bytes(data)
    rels = [f"class/x/{n}" for n in files]
    live = LiveIO(str(tmp_path), "/proc")
    for _ in range(2):                      # the first call opens every file, the second preads them
        assert live.read_many("sysfs", rels) == [b.decode("utf-8", "replace") for b in files.values()]
    (d / "short").write_bytes(b"345\n")
    assert live.read_many("sysfs", rels)[0] == "345\n"
    os.unlink(d / "gone")
    (d / "gone").mkdir()                    # replaced: the kept descriptor still reads the old file ...
    got = live.read_many("sysfs", rels)
    assert got[:3] == ["345\n", files["long"].decode(), "caf\ufffd\n"]
    live.close()
    got = LiveIO(str(tmp_path), "/proc").read_many("sysfs", rels)      # ... a fresh one sees the directory
    assert got[:3] == ["345\n", files["long"].decode(), "caf\ufffd\n"]
    assert isinstance(got[3], OSError) and got[3].errno == errno.EISDIR


class MadHost(LiveIO):
    """A live host whose umad port answers in Python: each Get() with a GetResp carrying its TID,
    the LID and a counter (so answers differ by request); LID 99 never answers."""

    def __init__(self, refuse: str = "") -> None:
        super().__init__()
        self.refuse, self.runs = refuse, 0

    def mad_open(self, settings) -> None:
        from fabricmon.host.umad import UmadUnavailable
        if self.refuse:
            raise UmadUnavailable(errno.ENODEV, self.refuse)

    def mad_run(self, requests, deadline, times=None):
        self.runs += 1
        out = []
        for r in requests:
            mad = bytearray(r.mad)
            mad[3] = 0x81                                      # GetResp
            mad[8:16] = (0xABCD0000_00000000 + self.runs).to_bytes(8, "big")    # the kernel's and the engine's TID
            mad[64:66] = r.lid.to_bytes(2, "big")
            mad[66] = self.runs
            out.append(None if r.lid == 99 else bytes(mad))
        return out


def test_mads_are_recorded_per_request_and_replayed_whatever_the_order(tmp_path: Path) -> None:
    """A bundle holds one answer per request (LID and the request itself; the last answer wins), with
    its transaction ID zeroed; replay answers each request with it, in any order, and a request the
    bundle does not hold, or one that went unanswered, is unanswered."""
    from fabricmon.host.mad import MadSettings, Request, exchange_key
    from fabricmon.sources.infiniband.mad import codec
    reqs = [Request("sw", lid, bytes(codec.encode_port_counters(p, 0))) for lid in (5, 7, 99) for p in (1, 2)]
    rec = RecordingIO(MadHost(), tmp_path / "b")
    rec.mad_open(MadSettings())
    rec.mad_run(reqs, 0.0)
    live = rec.mad_run(reqs, 0.0)                              # the second run's answers are kept
    rec.save()
    doc = json.loads((tmp_path / "b" / "bundle.json").read_text())
    assert len(doc["mad"]) == len(reqs) and "mad_error" not in doc
    # PortCounters' PortSelect is in the data: two ports of one LID are two keys
    assert exchange_key(reqs[0]) == "5/04.01/0012/0/65:01ffff" and exchange_key(reqs[1]) == "5/04.01/0012/0/65:02ffff"
    assert exchange_key(Request("sw", 5, bytes(codec.encode_port_info(3, 0)))) == "5/01.01/0015/3/"
    rep = ReplayIO(tmp_path / "b")
    rep.mad_open(MadSettings())
    back = rep.mad_run(list(reversed(reqs)), 0.0)[::-1]
    for got, want in zip(back, live):
        if want is None:
            assert got is None
        else:
            assert len(got) == 256 and got[8:16] == bytes(8) and got[:8] + got[16:] == want[:8] + want[16:]
            assert got[66] == 2
    other = Request("sw", 5, bytes(codec.encode_port_counters(3, 0)))
    assert rep.mad_run([other], 0.0) == [None]


def test_a_host_without_a_umad_port_is_recorded_so_and_its_replay_has_none(tmp_path: Path, tree: Path) -> None:
    from fabricmon.host.mad import MadSettings
    from fabricmon.host.umad import UmadUnavailable
    rec = RecordingIO(MadHost(refuse="umad_open_port(default, 0) failed: No such device"), tmp_path / "b")
    with pytest.raises(UmadUnavailable):
        rec.mad_open(MadSettings())
    rec.save()
    with pytest.raises(UmadUnavailable, match="No such device"):
        ReplayIO(tmp_path / "b").mad_open(MadSettings())
    # a bundle that never opened one (a node's, or recorded with the tools) has none either
    rec = RecordingIO(LiveIO(str(tree)), tmp_path / "c")
    rec.save()
    with pytest.raises(UmadUnavailable, match="no MAD exchanges"):
        ReplayIO(tmp_path / "c").mad_open(MadSettings())
