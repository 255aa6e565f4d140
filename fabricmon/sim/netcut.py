"""A TCP forwarder that can be cut, for partition tests on one machine (no network namespace, no root):
a client talks to `127.0.0.1:<port>` and reaches `target` through it; `cut()` turns it into a black hole
(what a partition looks like to the client: no refusal, no reset, bytes sent and nothing answered),
`heal()` forwards again. A connection open at the cut stays open and silent, and carries on when healed
(as TCP would after a short partition); one accepted during the cut is never answered, and closed at the heal.

    with NetCut(("127.0.0.1", 2379)) as nc:     # nc.port: what the client is told
        ...; nc.cut(); ...; nc.heal()
"""

from __future__ import annotations

import socket
import threading


class NetCut:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0):
        self.target = target
        self._srv = socket.create_server((host, port))
        self.port: int = self._srv.getsockname()[1]
        self._open = threading.Event()          # set: forwarding; clear: a black hole
        self._open.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._held: list[socket.socket] = []    # accepted while cut: never answered
        self._thread = threading.Thread(target=self._accept, name="netcut", daemon=True)
        self._thread.start()

    def __enter__(self) -> "NetCut":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        """Forward again; what was held during the cut is closed (its client retries on a new connection)."""
        with self._lock:
            held, self._held = self._held, []
        for s in held:
            s.close()
        self._open.set()

    def close(self) -> None:
        self._stop.set()
        self._srv.close()
        with self._lock:
            for s in self._conns + self._held:
                try:
                    s.close()
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self._srv.accept()
            except OSError:
                return
            if not self._open.is_set():
                with self._lock:
                    self._held.append(c)
                continue
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._conns += [c, up]
            for a, b in ((c, up), (up, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.05)
        try:
            while not self._stop.is_set():
                if not self._open.is_set():     # cut: read nothing, send nothing (the peer's bytes wait unread)
                    self._open.wait(0.05)
                    continue
                try:
                    data = src.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                if not self._open.is_set():     # cut while this was in flight: it is lost
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass


__all__ = ["NetCut"]
