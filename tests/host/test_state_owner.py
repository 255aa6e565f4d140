"""A state file keeps the owner of its directory (issue 53): root's `fabricmon check` or `fabric once` in the
service user's state or cache directory leaves files that user can read and replace, with the mode each had.
The end-to-end case (root's check, then the service user's, reading its history) is
tests/deployed/test_as_deployed.py; here the two writers, fsutil.write_atomic and LiveIO.commit_file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fabricmon.fsutil import write_atomic
from fabricmon.host.io import LiveIO
from helpers import unavailable

NOBODY = 65534


@pytest.fixture
def users_dir(tmp_path: Path) -> Path:
    """A directory of another user (nobody), as systemd's StateDirectory= is the service user's."""
    if os.geteuid() != 0:
        unavailable("giving a file another user's ownership needs root (as CI runs)")
    d = tmp_path / "state"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    return d


def owner_mode(p: Path) -> tuple[int, int, int]:
    st = p.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_root_writes_in_another_users_directory_as_that_user(users_dir: Path) -> None:
    write_atomic(str(users_dir / "check-state.json"), b"{}", 0o600)
    write_atomic(str(users_dir / "inventory.json"), b"{}", 0o644, make_dirs=False)
    assert owner_mode(users_dir / "check-state.json") == (NOBODY, NOBODY, 0o600)
    assert owner_mode(users_dir / "inventory.json") == (NOBODY, NOBODY, 0o644)
    # a file root made before (the old behaviour) is replaced by the user's
    os.chown(users_dir / "check-state.json", 0, 0)
    write_atomic(str(users_dir / "check-state.json"), b"{}", 0o600)
    assert owner_mode(users_dir / "check-state.json") == (NOBODY, NOBODY, 0o600)
    assert [p.name for p in users_dir.iterdir() if p.name.startswith(".")] == []     # no temp file left


def test_root_in_its_own_directory_keeps_its_files(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        unavailable("the tests run as root here (as CI runs)")
    write_atomic(str(tmp_path / "a" / "f.json"), b"{}", 0o600)
    assert owner_mode(tmp_path / "a" / "f.json") == (0, 0, 0o600)


def test_a_tools_file_moved_into_place_is_the_directorys_owners(users_dir: Path) -> None:
    tmp, final = users_dir / "ibnetdiscover.cache.new", users_dir / "ibnetdiscover.cache"
    tmp.write_text("cache\n")       # root's ibnetdiscover wrote it
    tmp.chmod(0o644)
    LiveIO().commit_file(str(tmp), str(final))
    assert owner_mode(final) == (NOBODY, NOBODY, 0o644) and not tmp.exists()


def test_a_link_in_the_tools_files_place_is_never_chowned(users_dir: Path, tmp_path: Path) -> None:
    """The directory is the user's: a link put where the tool's file was must not give them its target."""
    target = tmp_path / "roots-secret"
    target.write_text("secret\n")
    tmp, final = users_dir / "ibnetdiscover.cache.new", users_dir / "ibnetdiscover.cache"
    tmp.symlink_to(target)
    with pytest.raises(OSError):
        LiveIO().commit_file(str(tmp), str(final))
    os.unlink(tmp)
    os.link(target, tmp)
    with pytest.raises(OSError, match="not a plain file of its own"):
        LiveIO().commit_file(str(tmp), str(final))
    assert owner_mode(target)[:2] == (0, 0) and not final.exists()
