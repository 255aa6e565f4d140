"""Small filesystem helpers."""

from __future__ import annotations

import os
import stat
import tempfile


def dir_owner(d: str) -> tuple[int, int] | None:
    """The (uid, gid) a file made in directory `d` is given: its owner and group when we run as root and
    another user owns it (root's `fabricmon check` in the service user's state directory must leave files
    that user can read); None otherwise (the file is ours, as the kernel makes it)."""
    if os.geteuid() != 0:
        return None
    st = os.stat(d)
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else None


def write_atomic(path: str, data: bytes, mode: int = 0o644, make_dirs: bool = True) -> None:
    """Write a file so that readers see the old or the new content, never a partial one
    (a temp file in the same directory, then rename). With make_dirs=False a missing directory
    is an error (FileNotFoundError), never silently created. The file keeps the owner of its
    directory (dir_owner), with `mode`."""
    d = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(d, exist_ok=True)
    owner = dir_owner(d)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".fabricmon-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if owner is not None:
                os.fchown(fh.fileno(), *owner)
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def commit_file(tmp: str, final: str) -> None:
    """Move a file a tool wrote (`tmp`, beside `final`) into place atomically, given the owner of its
    directory as write_atomic's files are. The file is opened without following a link and must be a
    plain file with one name, so a link put in its place is never what is chowned."""
    owner = dir_owner(os.path.dirname(os.path.abspath(final)))
    if owner is not None:
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise OSError(f"{tmp} is not a plain file of its own")
            os.fchown(fd, *owner)
        finally:
            os.close(fd)
    os.replace(tmp, final)
