"""NCCL's RAS client port (HostIO.ras_status): one conversation, as NCCL's own `ncclras` has it
(src/ras/client.cc; docs/nccl.md#ras): connect, `CLIENT PROTOCOL 2` -> `SERVER PROTOCOL N`, then
- in JSON: `SET FORMAT json` -> `OK` (NCCL 2.28.7 and later; an older NCCL answers `ERROR: Unknown
  command` and its report comes in text, its only format), then `STATUS`;
- in text (what `ncclras` asks by default): `STATUS`;
and read until NCCL closes the connection.

Never `VERBOSE STATUS` (NCCL issue #1762: it corrupted memory in running jobs): the command is a
constant here. Bounded: one deadline for the whole conversation, at most max_bytes of answer.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

CLIENT_PROTOCOL = 2
STATUS = b"STATUS\n"            # never "VERBOSE STATUS"
FORMATS = ("json", "text")


@dataclass(frozen=True, slots=True)
class RasExchange:
    server_protocol: str        # what followed "SERVER PROTOCOL " ("" when the greeting was something else:
                                # then nothing more was sent)
    json: bool                  # the answer is JSON (SET FORMAT json was answered OK); else text
    answer: str                 # the answer to SET FORMAT json, its first line ("" where it was not sent)
    text: str = ""              # the STATUS answer, at most max_bytes
    cut: bool = False           # the answer was longer than max_bytes


def _line(sock: socket.socket, deadline: float, limit: int = 4096) -> str:
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < limit:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(limit - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf.decode("utf-8", "replace").strip()


def _answer(sock: socket.socket, deadline: float, max_bytes: int, where: str,
            timeout: float) -> tuple[str, bool]:
    chunks, got, cut = [], 0, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"RAS at {where} did not finish its answer within {timeout:g} s")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            break
        if got + len(chunk) > max_bytes:
            chunks.append(chunk[:max_bytes - got])
            cut = True
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace"), cut


def ras_status(address: str, port: int, timeout: float, max_bytes: int, fmt: str = "json") -> RasExchange:
    """The RAS STATUS of the NCCL processes listening at address:port, in `fmt` (FORMATS) where that NCCL
    writes it, else in text. Raises OSError (connection refused: no NCCL job with RAS here; a timeout)."""
    if fmt not in FORMATS:
        raise ValueError(f"RAS format {fmt!r} is not one of {FORMATS}")
    deadline = time.monotonic() + timeout
    where = f"{address}:{port}"
    with socket.create_connection((address, port), timeout=timeout) as sock:
        sock.sendall(f"CLIENT PROTOCOL {CLIENT_PROTOCOL}\n".encode())
        greeting = _line(sock, deadline)
        proto = greeting[len("SERVER PROTOCOL "):].strip() if greeting.upper().startswith("SERVER PROTOCOL ") else ""
        if not proto:
            return RasExchange("", False, greeting[:200])
        answer, is_json = "", False
        if fmt == "json":
            sock.sendall(b"SET FORMAT json\n")
            answer = _line(sock, deadline)
            is_json = answer.upper() == "OK"
        sock.sendall(STATUS)
        text, cut = _answer(sock, deadline, max_bytes, where, timeout)
        return RasExchange(proto, is_json, answer[:200], text, cut)


__all__ = ["CLIENT_PROTOCOL", "FORMATS", "RasExchange", "STATUS", "ras_status"]
