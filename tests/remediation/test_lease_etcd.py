"""The etcd lease (remediation/lease.py `EtcdLease`, issue 49): of the collectors sharing a key one holds it at
a time, and a holder stops acting before its lease can end, whatever happens to it.

In process, on an etcd modelled after its semantics (a lease ends TTL seconds after the last keep-alive it
answered, its keys with it; a key is created only where absent) and a clock of the test's: hand-over on
release, a holder killed outright, a holder cut off from etcd, a key deleted under its holder; the config's
refusals. Against the real etcd (Debian etcd-server) with the holders as processes of their own: the same
three hand-overs, one holder killed with SIGKILL and one cut off through a TCP forwarder that turns into a
black hole (fabricmon.sim.netcut), the lease's end read from etcd itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.host.etcd import EtcdError, KeyValue
from fabricmon.remediation.lease import EtcdLease, make_lease
from fabricmon.remediation.settings import LeaseSettings, lease_guard
from helpers import unavailable, wait_until

HERE = Path(__file__).resolve().parent


class FakeEtcd:
    """etcd's lease and key semantics on the test's clock."""

    def __init__(self, clock: list[float]):
        self.clock = clock
        self.leases: dict[int, tuple[float, int]] = {}      # id -> (expiry, ttl)
        self.keys: dict[str, tuple[str, int]] = {}          # key -> (value, lease)
        self.next_id = 100
        self.cut: set[str] = set()                          # clients that cannot reach it

    def expire(self) -> None:
        now = self.clock[0]
        for lid, (exp, _) in list(self.leases.items()):
            if exp <= now:
                self.drop(lid)

    def drop(self, lid: int) -> None:
        self.leases.pop(lid, None)
        for k, (_, lease) in list(self.keys.items()):
            if lease == lid:
                del self.keys[k]

    def alive(self, lid: int) -> bool:
        self.expire()
        return lid in self.leases


class FakeClient:
    timeout = 0.5
    endpoints = ["fake"]

    def __init__(self, etcd: FakeEtcd, name: str):
        self.etcd, self.name = etcd, name

    def _reach(self) -> FakeEtcd:
        if self.name in self.etcd.cut:
            raise EtcdError("no etcd endpoint answered: fake: timed out")
        self.etcd.expire()
        return self.etcd

    def grant(self, ttl: int) -> tuple[int, int]:
        e = self._reach()
        e.next_id += 1
        e.leases[e.next_id] = (e.clock[0] + ttl, ttl)
        return e.next_id, ttl

    def keepalive(self, lease: int) -> int:
        e = self._reach()
        if lease not in e.leases:
            return 0
        ttl = e.leases[lease][1]
        e.leases[lease] = (e.clock[0] + ttl, ttl)
        return ttl

    def revoke(self, lease: int) -> None:
        self._reach().drop(lease)

    def create(self, key: str, value: str, lease: int) -> tuple[bool, KeyValue | None]:
        e = self._reach()
        if key in e.keys:
            v, lid = e.keys[key]
            return False, KeyValue(key, v, lid, 1)
        e.keys[key] = (value, lease)
        return True, None

    def get(self, key: str) -> KeyValue | None:
        e = self._reach()
        return KeyValue(key, *e.keys[key], 1) if key in e.keys else None


TTL, GUARD = 12, 4.0


def pair(clock: list[float]) -> tuple[FakeEtcd, EtcdLease, EtcdLease]:
    etcd = FakeEtcd(clock)
    mk = lambda n: EtcdLease(FakeClient(etcd, n), "/fabricmon/rail0/remediation", TTL, GUARD, n,     # noqa: E731
                             clock=lambda: clock[0], background=False)
    return etcd, mk("A"), mk("B")


def run(clock, etcd, leases, until: float, alive=None, dt: float = 0.25) -> list[tuple[float, set[str]]]:
    """Step each lease on its own period until `until` (those in `alive`, default all); the holders at every
    step, each checked: never two at once, and a holder's etcd lease alive while it holds."""
    alive = set(alive if alive is not None else leases)
    due = {n: clock[0] for n in leases}
    seen = []
    while clock[0] < until:
        for n, le in leases.items():
            if n in alive and clock[0] >= due[n]:
                le.step()
                due[n] = clock[0] + (le.period if le._holding else le.wait_every)
        holders = {n for n, le in leases.items() if le.hold()[0]}
        assert len(holders) <= 1, f"two holders at {clock[0]}: {holders}"
        for n in holders:
            assert etcd.alive(leases[n]._lease), f"{n} holds at {clock[0]} on a lease etcd ended"
        seen.append((clock[0], holders))
        clock[0] += dt
    return seen


def first(seen, who: str) -> float:
    return next(t for t, h in seen if who in h)


def last(seen, who: str) -> float:
    return max(t for t, h in seen if who in h)


def test_one_holder_and_the_other_takes_over_at_once_when_it_releases() -> None:
    clock = [1000.0]
    etcd, a, b = pair(clock)
    seen = run(clock, etcd, {"A": a, "B": b}, 1030.0)
    assert all(h == {"A"} for _, h in seen)
    assert b.hold() == (False, "another collector holds the etcd lease /fabricmon/rail0/remediation (A)")
    assert a.hold()[1].startswith("holds the etcd lease /fabricmon/rail0/remediation (")
    t = clock[0]
    a.release()                                  # its key goes with its lease
    seen = run(clock, etcd, {"A": a, "B": b}, t + 10, alive={"B"})
    assert first(seen, "B") - t <= b.wait_every + 0.25


def test_a_holder_killed_outright_is_replaced_once_etcd_ended_its_lease() -> None:
    clock = [1000.0]
    etcd, a, b = pair(clock)
    run(clock, etcd, {"A": a, "B": b}, 1010.0)
    expiry = etcd.leases[a._lease][0]           # TTL after A's last keep-alive: etcd ends it then
    a._valid_until = float("-inf")               # the process is gone: nothing of it holds anything
    seen = run(clock, etcd, {"B": b}, clock[0] + 30)
    assert first(seen, "B") >= expiry            # only after etcd ended A's lease
    assert first(seen, "B") - expiry <= b.wait_every + 0.25


def test_a_holder_cut_off_from_etcd_stops_acting_before_its_lease_can_end() -> None:
    clock = [1000.0]
    etcd, a, b = pair(clock)
    run(clock, etcd, {"A": a, "B": b}, 1010.0)
    lease_a = a._lease
    expiry = etcd.leases[lease_a][0]             # A's last keep-alive: the lease ends at this time unless renewed
    etcd.cut.add("A")
    cut_at = clock[0]
    seen = run(clock, etcd, {"A": a, "B": b}, cut_at + 40)
    assert last(seen, "A") < expiry - GUARD + 0.5      # stopped a guard before the earliest end
    assert first(seen, "B") >= expiry                    # B after the end, never before
    assert "stopped acting" in a.hold()[1] or "another collector" in a.hold()[1]
    etcd.cut.clear()                             # healed: A finds its lease gone and waits behind B
    seen = run(clock, etcd, {"A": a, "B": b}, clock[0] + 20)
    assert all(h == {"B"} for _, h in seen)
    assert a.hold() == (False, "another collector holds the etcd lease /fabricmon/rail0/remediation (B)")


def test_one_lost_keepalive_is_ridden_out() -> None:
    clock = [1000.0]
    etcd, a, b = pair(clock)
    run(clock, etcd, {"A": a, "B": b}, 1010.0)
    etcd.cut.add("A")
    t = clock[0]
    seen = run(clock, etcd, {"A": a, "B": b}, t + a.period + 0.3)    # one keep-alive fails
    etcd.cut.clear()
    seen += run(clock, etcd, {"A": a, "B": b}, clock[0] + 20)
    assert all(h == {"A"} for _, h in seen)


def test_a_key_deleted_under_its_holder_is_noticed_on_the_next_keepalive() -> None:
    clock = [1000.0]
    etcd, a, b = pair(clock)
    run(clock, etcd, {"A": a}, 1010.0)
    del etcd.keys["/fabricmon/rail0/remediation"]       # by hand (never do: stop the holder, or revoke its lease)
    a.step()
    assert a.hold() == (False, "its etcd key /fabricmon/rail0/remediation was deleted: asking again")


def test_the_lease_settings_refuse_what_cannot_work() -> None:
    def rem(lease: dict, **more) -> dict:
        return {"remediation": {"lease": lease, **more}}
    with pytest.raises(ConfigError, match=r"remediation\.lease\.endpoints: kind etcd needs"):
        from_dict(rem({"kind": "etcd", "key": "/k"}), check_paths=False)
    with pytest.raises(ConfigError, match=r"remediation\.lease\.key: kind etcd needs a key, one per fabric"):
        from_dict(rem({"kind": "etcd", "endpoints": ["http://10.0.0.1:2379"]}), check_paths=False)
    with pytest.raises(ConfigError, match=r"remediation\.lease\.endpoints\[0\]: expected an etcd client URL"):
        from_dict(rem({"kind": "etcd", "endpoints": ["10.0.0.1:2379"], "key": "/k"}), check_paths=False)
    with pytest.raises(ConfigError, match=r"remediation\.lease\.key: expected a key starting with /"):
        from_dict(rem({"kind": "etcd", "endpoints": ["http://e:2379"], "key": "/k/{rail}"}), check_paths=False)
    with pytest.raises(ConfigError, match=r"remediation\.lease\.ttl: 15 s is too short: .* at least 21 s"):
        from_dict(rem({"kind": "etcd", "endpoints": ["http://e:2379"], "key": "/k", "ttl": 15}), check_paths=False)
    cfg = from_dict(rem({"kind": "etcd", "endpoints": ["http://e:2379"], "key": "/fm/rail0/{shard}-of-{shards}",
                         "ttl": 9, "timeout": 0.5}, isolate_port={"timeout": 1}, drain_node={"timeout": 1}), check_paths=False)
    assert cfg.remediation.lease == LeaseSettings("etcd", None, ("http://e:2379",), "/fm/rail0/{shard}-of-{shards}", 9, 0.5)
    assert lease_guard(cfg.remediation) == 3.0
    lease = make_lease(cfg.remediation.lease, "/nonexistent", "fabric", lease_guard(cfg.remediation), (1, 2))
    assert isinstance(lease, EtcdLease) and lease.key == "/fm/rail0/1-of-2" and lease.period == 2.0
    assert make_lease(cfg.remediation.lease, "/x", "node").hold() == (True, "a node daemon acts on its own node only")


# ---- the real etcd, the holders as processes --------------------------------------------------------

HOLDER = """
import json, signal, sys, time
from fabricmon.host.etcd import EtcdClient
from fabricmon.remediation.lease import EtcdLease
url, name, ttl, guard = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
lease = EtcdLease(EtcdClient([url], timeout=0.5), "/fabricmon/test/remediation", ttl, guard, name)
def bye(*_):                # what the daemon's stop does (Remediator.stop): release the lease, then exit
    lease.release()
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
was = None
while True:                 # what a remediation round asks, every 20 ms; a line per answer while it holds,
    held, how = lease.hold()    # and one whenever why not changes
    if held or (held, how) != was:
        print(json.dumps({"t": time.time(), "held": held, "lease": lease._lease, "how": how}), flush=True)
    was = (held, how)
    time.sleep(0.02)
"""


@pytest.fixture()
def etcd_server(tmp_path):
    from fabricmon.sim.etcd import Etcd
    import shutil
    if shutil.which("etcd") is None:
        unavailable("etcd not found: install the Debian package etcd-server (make test does)")
    with Etcd(tmp_path / "etcd") as e:
        yield e


class Holder:
    def __init__(self, tmp_path: Path, name: str, url: str, ttl: int, guard: float):
        self.name, self.out = name, tmp_path / f"{name}.jsonl"
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, url, name, str(ttl), str(guard)],
                                     stdout=open(self.out, "w"), stderr=subprocess.STDOUT, start_new_session=True)

    def lines(self) -> list[dict]:
        out = []
        for ln in self.out.read_text().splitlines():
            if ln.startswith("{"):
                out.append(json.loads(ln))
        return out

    def held(self) -> list[float]:
        return [d["t"] for d in self.lines() if d["held"]]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(10)


def watch_end(client, lease: int, timeout: float) -> tuple[float, float]:
    """(the last time etcd said the lease was alive, the first it said it was gone), polled every 20 ms."""
    last_alive = time.time()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        t = time.time()
        if client.time_to_live(lease) < 0:
            return last_alive, t
        last_alive = t
        time.sleep(0.02)
    raise AssertionError(f"lease {lease} did not end within {timeout} s")


def holders(tmp_path, etcd, urls: dict[str, str], ttl: int = 6, guard: float = 1.5) -> dict[str, Holder]:
    hs = {}
    for n, u in urls.items():
        hs[n] = Holder(tmp_path, n, u, ttl, guard)
        wait_until(lambda: hs[n].lines(), 15, f"holder {n} answering")
    return hs


def never_both(hs: dict[str, Holder], slack: float = 0.0) -> None:
    """No instant where both held: every held report of one lies outside the other's held span(s)."""
    a, b = (sorted(h.held()) for h in hs.values())
    if a and b:
        assert a[-1] < b[0] - slack or b[-1] < a[0] - slack, (a[0], a[-1], b[0], b[-1])


def test_real_etcd_the_holder_killed_is_replaced_only_after_its_lease_expired(tmp_path, etcd_server) -> None:
    from fabricmon.host.etcd import EtcdClient
    hs = holders(tmp_path, etcd_server, {"A": etcd_server.url})
    wait_until(lambda: hs["A"].held(), 15, "A holding")
    hs.update(holders(tmp_path, etcd_server, {"B": etcd_server.url}))
    time.sleep(1.0)                     # both running: only A holds (what is tested: no hand-over meanwhile)
    lease_a = next(d["lease"] for d in hs["A"].lines() if d["held"])
    hs["A"].stop(signal.SIGKILL)        # no release: etcd ends the lease TTL seconds after its last keep-alive
    alive, gone = watch_end(EtcdClient([etcd_server.url]), lease_a, 20)
    wait_until(lambda: hs["B"].held(), 15, "B holding")
    try:
        assert min(hs["B"].held()) > alive, "B acted while A's lease was alive"
        never_both(hs)
    finally:
        for h in hs.values():
            h.stop()


def test_real_etcd_a_holder_partitioned_stops_before_its_lease_ends_and_the_other_only_after(tmp_path, etcd_server) -> None:
    from fabricmon.host.etcd import EtcdClient
    from fabricmon.sim.netcut import NetCut
    port = int(etcd_server.url.rsplit(":", 1)[1])
    with NetCut(("127.0.0.1", port)) as cut:
        hs = holders(tmp_path, etcd_server, {"A": f"http://127.0.0.1:{cut.port}"})
        wait_until(lambda: hs["A"].held(), 15, "A holding")
        hs.update(holders(tmp_path, etcd_server, {"B": etcd_server.url}))
        time.sleep(1.0)
        lease_a = next(d["lease"] for d in hs["A"].lines() if d["held"])
        cut.cut()                       # A's keep-alives go nowhere; A itself runs on
        cut_at = time.time()
        alive, gone = watch_end(EtcdClient([etcd_server.url]), lease_a, 20)
        wait_until(lambda: hs["B"].held(), 15, "B holding")
        try:
            a_last, b_first = max(hs["A"].held()), min(hs["B"].held())
            assert a_last < alive, f"A acted {a_last - alive:.2f} s after etcd last said its lease was alive"
            assert b_first > alive, "B acted while A's lease was alive"
            assert a_last - cut_at < 6, "A acted on for longer than its TTL after the cut"
            cut.heal()                  # A finds its lease ended and waits behind B
            healed = time.time()
            # any report of A's since the heal (not only its last three: a loaded machine interleaves its
            # client's retries), and 30 s for its backoff to end
            wait_until(lambda: any("another collector holds" in d["how"] for d in hs["A"].lines()
                                   if d["t"] >= healed), 30,
                       lambda: f"A behind B after the heal (its last reports: {hs['A'].lines()[-3:]})")
            never_both(hs)
            assert hs["B"].proc.poll() is None and max(hs["B"].held()) > a_last
        finally:
            for h in hs.values():
                h.stop()


def test_real_etcd_a_holder_exiting_hands_over_at_once(tmp_path, etcd_server) -> None:
    hs = holders(tmp_path, etcd_server, {"A": etcd_server.url})
    wait_until(lambda: hs["A"].held(), 15, "A holding")
    hs.update(holders(tmp_path, etcd_server, {"B": etcd_server.url}))
    time.sleep(0.5)
    t = time.time()
    hs["A"].stop(signal.SIGTERM)        # release: its lease revoked, its key with it
    wait_until(lambda: hs["B"].held(), 10, "B holding")
    try:
        assert min(hs["B"].held()) - t < 3.0         # B's next try (every 2 s at most), not a TTL later
        never_both(hs)
    finally:
        hs["B"].stop()
