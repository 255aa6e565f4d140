"""LiveIO.read_host_file_bounded: at most max_bytes (head or tail), nothing read from a file older
than min_mtime, a directory or FIFO refused, and a write during the read noticed."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from fabricmon.host.io import LiveIO


def test_head_tail_and_age(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"0123456789" * 10)
    io = LiveIO()
    got = io.read_host_file_bounded(str(f), 15)
    assert (got.data, got.size, got.changed) == (b"012345678901234", 100, False)
    assert io.read_host_file_bounded(str(f), 15, tail=True).data == b"567890123456789"
    assert io.read_host_file_bounded(str(f), 1000).data == f.read_bytes()
    old = time.time() - 600
    os.utime(f, (old, old))
    got = io.read_host_file_bounded(str(f), 15, min_mtime=time.time() - 60)
    assert got.data == b"" and got.size == 100 and got.mtime == pytest.approx(old)


def test_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (tmp_path, fifo):
        with pytest.raises(OSError) as exc:
            LiveIO().read_host_file_bounded(str(p), 100)
        assert exc.value.errno in (errno.EINVAL, errno.EISDIR)
    with pytest.raises(FileNotFoundError):
        LiveIO().read_host_file_bounded(str(tmp_path / "none"), 100)
