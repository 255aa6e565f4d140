"""The HTTP request reader: fabricmon's own (serve.server's buffering + parse_head) against h11 0.16 (a
maintained, fuzzed HTTP/1.1 state machine), issue 47's evaluation. Prints a table: microseconds per
request head, both ways, on the same heads, in one run.

What is compared is what the event loop does with a connection's bytes until the request is known:
fabricmon's loop appends what recv gives to the connection's buffer, looks for the blank line from
where the last search stopped, and parses the head once (serve/server.py `_read_first`/`_advance`,
`parse_head`); h11 is fed the same chunks with `receive_data` and asked `next_event` after each. Cases:
a Prometheus scrape, a browser's head (15 headers), 100 headers, and hostile clients: the scrape one
byte per recv (slowloris), and 64 KiB of header that never ends (both must refuse it: fabricmon at its
MAX_HEAD, 16 KiB, h11 at max_incomplete_event_size, set alike).

    python bench/http_parse.py [--repeat 2000]

Needs h11 (`pip install h11`); not a dependency of fabricmon (docs/benchmarks.md says why)."""

from __future__ import annotations

import argparse
import statistics
import time

from fabricmon.serve import server

SCRAPE = (b"GET /metrics HTTP/1.1\r\nHost: node017:9879\r\nUser-Agent: Prometheus/2.53.0\r\n"
          b"Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
          b"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n")
BROWSER = (b"GET /?job=4242 HTTP/1.1\r\nHost: fab01:9881\r\n" + b"".join(
    f"X-Header-{i}: {'v' * 40}\r\n".encode() for i in range(13)) + b"Connection: keep-alive\r\n\r\n")
MANY = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(f"X-{i}: y\r\n".encode() for i in range(99)) + b"\r\n"
ENDLESS = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * (64 << 10)
LIMIT = server.MAX_HEAD


def ours(chunks: list[bytes]) -> object:
    """The loop's buffering as serve.server's `_advance` does it (the buffer searched for the blank line
    after each recv), then parse_head once; None when the head outgrew MAX_HEAD (the loop answers 431)."""
    buf = bytearray()
    for c in chunks:
        buf += c
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            return server.parse_head(bytes(buf[:end])) if end <= LIMIT else None
        if len(buf) > LIMIT:
            return None
    return None


def theirs(chunks: list[bytes]) -> object:
    import h11
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=LIMIT)
    try:
        for c in chunks:
            conn.receive_data(c)
            ev = conn.next_event()
            if ev is not h11.NEED_DATA:
                return ev
    except h11.RemoteProtocolError:
        return None
    return None


def per_call(fn, arg, repeat: int) -> float:
    """Microseconds per fn(arg): the median of 5 runs of `repeat` calls."""
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn(arg)
        runs.append((time.perf_counter() - t0) / repeat * 1e6)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2000)
    a = ap.parse_args()
    cases = [("Prometheus scrape, one recv", [SCRAPE], a.repeat),
             ("browser head (15 headers)", [BROWSER], a.repeat),
             ("100 headers", [MANY], a.repeat // 4),
             ("scrape, one byte per recv", [SCRAPE[i:i + 1] for i in range(len(SCRAPE))], max(1, a.repeat // 40)),
             ("64 KiB header, 1 KiB recvs", [ENDLESS[i:i + 1024] for i in range(0, len(ENDLESS), 1024)],
              max(1, a.repeat // 40))]
    print(f"{'case':34} {'fabricmon us':>13} {'h11 us':>10} {'h11/fabricmon':>14}")
    for name, chunks, n in cases:
        assert (ours(chunks) is None) == (theirs(chunks) is None), name
        o, t = per_call(ours, chunks, n), per_call(theirs, chunks, n)
        print(f"{name:34} {o:13.1f} {t:10.1f} {t / o:14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
