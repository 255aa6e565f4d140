"""The learned inventory's file, `<paths.state_dir>/inventory.json`, shared by the daemon, every
`fabricmon check` and `fabricmon inventory accept`.

Several writers may share it (the daemon as user fabricmon, Slurm's root `check`, an operator's
`accept`), so every change is read-modify-write under an exclusive lock on the state directory
(flock on the directory itself: no lock file whose owner or mode could lock another user out), and
written atomically (temp file + rename), readable by all (0644: it holds device names, GUIDs and
links, nothing secret). A writer adds only the ports it sees healthy now to what the file holds
at that moment, so an `accept` is never undone by a writer that loaded the file before it. Every
reader notices a changed file (inode, size, mtime) at its next build.

When the file cannot be read or written (an ordinary user's `check`, a state dir that does not
exist for the daemon) the inventory is learned in memory only, and that is logged once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator

import structlog

from fabricmon.fsutil import write_atomic
from fabricmon.model.learned import LearnedInventory, LearnedPort
from fabricmon.model.ports import Inventory

FILE_NAME = "inventory.json"
log = structlog.get_logger("fabricmon.inventory")


def inventory_path(state_dir: str) -> str:
    return os.path.join(state_dir, FILE_NAME)


class LearnedStore:
    """The learned inventory in memory, kept in `path` (None: in memory only). `create_dir`: make
    the state directory when missing (`check`, `accept`); the daemon's exists (systemd's
    StateDirectory) or it keeps the inventory in memory."""

    def __init__(self, path: str | None = None, create_dir: bool = False):
        self.path = path
        self.create_dir = create_dir
        self.inventory = LearnedInventory()
        self._stat: tuple[int, int, int] | None = None
        self._warned: set[str] = set()

    def _warn(self, what: str, error: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(what, path=self.path, error=error)

    def _file_stat(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _read(self) -> LearnedInventory:
        """The file's content (empty when there is none). Raises OSError/ValueError."""
        assert self.path is not None
        try:
            with open(self.path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            return LearnedInventory()
        try:
            return LearnedInventory.from_dict(doc)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed: {exc!r}") from exc

    def refresh(self) -> None:
        """Reload the file when another process changed it (or removed it: forget everything)."""
        if self.path is None:
            return
        try:
            st = self._file_stat()
        except OSError as exc:
            self._warn("cannot read the learned inventory; keeping it in memory", exc.strerror or str(exc))
            return
        if st == self._stat:
            return
        try:
            self.inventory = self._read()
        except (OSError, ValueError) as exc:
            self._warn("cannot read the learned inventory; keeping it in memory",
                       getattr(exc, "strerror", None) or str(exc))
            return
        self._stat = st

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self.path is not None
        d = os.path.dirname(os.path.abspath(self.path))
        if self.create_dir:
            os.makedirs(d, exist_ok=True)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)            # releases the lock

    def _write(self, inv: LearnedInventory) -> None:
        assert self.path is not None
        write_atomic(self.path, (json.dumps(inv.to_dict(), indent=1) + "\n").encode(), 0o644, make_dirs=False)
        self._stat = self._file_stat()

    def learn(self, inv: Inventory, now: float) -> list[LearnedPort]:
        """Learn the healthy ports of `inv`; returns those added or changed (logged once each)."""
        if not self.inventory.would_learn(inv):
            return []
        changed: list[LearnedPort] = []
        saved = False
        if self.path is not None:
            try:
                with self._locked():
                    try:
                        fresh = self._read()        # what the file holds now, not what we loaded
                    except ValueError as exc:       # unreadable content: nothing to keep, replace it
                        self._warn("replacing an unreadable learned inventory", str(exc))
                        fresh = LearnedInventory()
                    changed = fresh.learn(inv, now)
                    if changed:
                        self._write(fresh)
                    self.inventory = fresh
                saved = True
            except (OSError, ValueError) as exc:
                self._warn("cannot save the learned inventory; keeping it in memory",
                           getattr(exc, "strerror", None) or str(exc))
        if not saved:
            changed = self.inventory.learn(inv, now)
        for rec in changed:
            log.info("port learned", device=rec.device, port=rec.port, node_guid=rec.node_guid or None,
                     port_guid=rec.port_guid or None, link_layer=rec.link_layer, link=rec.link or None)
        return changed

    def accept(self, inv: Inventory, now: float) -> tuple[LearnedInventory, LearnedInventory]:
        """Replace the learned inventory with the healthy ports of `inv`: (before, after).
        Raises OSError/ValueError when the file cannot be written (an accept must not be silent)."""
        assert self.path is not None
        with self._locked():
            try:
                before = self._read()
            except ValueError:
                before = LearnedInventory()     # an unreadable file is replaced
            after = LearnedInventory(accepted_at=now)
            after.learn(inv, now)
            self._write(after)
        self.inventory = after
        log.info("inventory accepted", path=self.path, ports=len(after.ports), forgotten=len(before.gone(inv)))
        return before, after


__all__ = ["FILE_NAME", "LearnedStore", "inventory_path"]
