"""Small filesystem helpers."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, data: bytes, mode: int = 0o644, make_dirs: bool = True) -> None:
    """Write a file so that readers see the old or the new content, never a partial one
    (a temp file in the same directory, then rename). With make_dirs=False a missing directory
    is an error (FileNotFoundError), never silently created."""
    d = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".fabricmon-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
