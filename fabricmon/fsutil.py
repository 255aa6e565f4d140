"""Small filesystem helpers."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write a file so that readers see the old or the new content, never a partial one
    (a temp file in the same directory, then rename)."""
    d = os.path.dirname(os.path.abspath(path))
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
