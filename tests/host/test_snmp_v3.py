"""host.usm and SNMPv3 in the in-process client: key localisation against RFC 3414's test
vectors (pure), and walks against a real agent, snmpsim in SNMPv3 mode (GUIDE section 9: one
process, here with one user per auth/priv combination it serves; the context name `public`
selects the data file): every combination the config names, a wrong pass phrase, a changed engine
ID, a clock outside the time window, keys localised once per switch, no secret anywhere a walk
leaves text."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from fabricmon.host import snmp as S
from fabricmon.host import usm as U
from fabricmon.sim.ethernet import free_udp_ports, leaf_spine, snmprec
from fabricmon.sources.ethernet.snmp import failure
from tests.helpers import unavailable, wait_until

# --- key localisation: RFC 3414 A.3 -----------------------------------------------------------------

ENGINE_A3 = bytes.fromhex("000000000000000000000002")


def test_rfc3414_a3_1_md5_password_to_key_and_localisation() -> None:
    ku = U.password_to_key(b"maplesyrup", "md5")
    assert ku.hex() == "9faf3283884e92834ebc9847d8edd963"
    assert U.localize(ku, ENGINE_A3, "md5").hex() == "526f5eed9fcce26f8964c2930787d82b"


def test_rfc3414_a3_2_sha_password_to_key_and_localisation() -> None:
    ku = U.password_to_key(b"maplesyrup", "sha1")
    assert ku.hex() == "9fb5cc0381497b3793528939ff788d5d79145211"
    assert U.localize(ku, ENGINE_A3, "sha1").hex() == "6695febc9288e36282235fc7151f128497b38f3f"


def test_password_to_key_is_the_hash_of_one_mebibyte_of_the_pass_phrase() -> None:
    # a pass phrase that does not divide 64: the repetition runs across block boundaries
    pw = b"abcdefghijk"
    want = hashlib.sha256((pw * 100000)[:1 << 20]).digest()
    assert U.password_to_key(pw, "sha256") == want
    with pytest.raises(ValueError):
        U.password_to_key(b"", "sha1")


def test_aes256_keys_are_extended_as_blumenthals_draft_says() -> None:
    ku = U.password_to_key(b"maplesyrup", "md5")
    kul = U.localize(ku, ENGINE_A3, "md5")
    k = U.priv_key(ku, ENGINE_A3, "md5", 32)
    assert k == kul + hashlib.md5(kul).digest()           # Kul || H(Kul)
    assert U.priv_key(ku, ENGINE_A3, "md5", 16) == kul
    k24 = U.priv_key(U.password_to_key(b"maplesyrup", "sha1"), ENGINE_A3, "sha1", 24)
    assert k24[:20] == bytes.fromhex("6695febc9288e36282235fc7151f128497b38f3f") and len(k24) == 24
    # Reeder's (Cisco's): the second part is the first run through password-to-key and localised
    reeder = U.priv_key(ku, ENGINE_A3, "md5", 32, reeder=True)
    assert reeder == kul + U.localize(U.password_to_key(kul, "md5"), ENGINE_A3, "md5")


def test_a_usm_shows_no_secret() -> None:
    u = U.Usm("fabmon", "SHA256", "auth-Secret-1", "AES", "priv-Secret-2", "public")
    text = repr(u) + " ".join(u.argv()) + repr(S.WalkSpec("10.0.0.1", "1.3.6.1", usm=u))
    assert "Secret" not in text and "fabmon" not in " ".join(u.argv())
    assert u.argv() == ("-v3", "-l", "authPriv", "-a", "SHA256", "-x", "AES", "-n", "public")
    assert not any(b"Secret" in v if isinstance(v, bytes) else "Secret" in str(v) for v in vars(u).values())


def test_a_request_authenticates_and_encrypts() -> None:
    """A request's MAC is the HMAC over the whole message with the MAC zeroed; its scoped PDU is
    not in clear."""
    u = U.Usm("fabmon", "SHA", "auth-Pass-1234", "AES", "priv-Pass-5678")
    e = u.learn("x", b"\x80\x00\x1f\x88\x04test", 3, 1000, time.monotonic())
    pdu = S.encode_pdu(S.GET_BULK_REQUEST, 77, 0, 10, [("1.3.6.1.2.1.31.1.1.1.6", S.NULL, None)])
    msg = u.request(e, 77, pdu, time.monotonic())
    assert pdu not in msg and S.oid_body("1.3.6.1.2.1.31.1.1.1.6") not in msg
    mac_at = msg.index(b"\x04\x0c") + 2                   # the 12-octet authentication parameters
    mac = msg[mac_at:mac_at + 12]
    zeroed = msg[:mac_at] + bytes(12) + msg[mac_at + 12:]
    import hmac
    assert hmac.new(e.auth_key, zeroed, hashlib.sha1).digest()[:12] == mac


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 100, 703])
def test_cfb_and_cbc_on_ecb_are_cryptographys_own(n) -> None:
    """The client runs CFB128 and CBC on one ECB context per engine (cheaper than a context per
    message): the same bytes as cryptography's own modes, for short and ragged messages."""
    import warnings

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    warnings.simplefilter("ignore")          # CFB and TripleDES are deprecated where they live
    k, iv, plain = os.urandom(16), os.urandom(16), os.urandom(n)
    ref = Cipher(algorithms.AES(k), modes.CFB(iv)).encryptor()
    ref = ref.update(plain) + ref.finalize()
    ecb = Cipher(algorithms.AES(k), modes.ECB()).encryptor()
    assert U._cfb_encrypt(ecb, iv, plain) == ref and U._cfb_decrypt(ecb, iv, ref) == plain
    if n % 8 == 0 and U.TripleDES is not None:
        k8, iv8 = os.urandom(8), os.urandom(8)
        ref = Cipher(U.TripleDES(k8 * 3), modes.CBC(iv8)).encryptor()
        ref = ref.update(plain) + ref.finalize()
        des = Cipher(U.TripleDES(k8 * 3), modes.ECB())
        assert U._cbc_encrypt(des.encryptor(), iv8, plain) == ref
        assert U._cbc_decrypt(des.decryptor(), iv8, ref) == plain


# --- against snmpsim in SNMPv3 mode ---------------------------------------------------------------

AUTH_PASS, PRIV_PASS = "auth-Pass-1234", "priv-Pass-5678"
# the config's names -> snmpsim's (its AES192/AES256 are the Reeder scheme, our AES192C/AES256C;
# net-snmp's AES-192/AES-256 and ours are Blumenthal's, snmpsim's *BLMT)
SIM_PRIV = {"DES": "DES", "AES": "AES", "AES192": "AES192BLMT", "AES256": "AES256BLMT", "AES192C": "AES192",
            "AES256C": "AES256"}
COMBOS = [(a, p) for a in U.AUTH for p in U.PRIV]          # 6 x 6
ENGINE_ID = "8000000001020304"
SYSNAME = "1.3.6.1.2.1.1"
IFX = "1.3.6.1.2.1.31.1.1.1"


def _user(auth: str, priv: str) -> str:
    return f"u{auth.lower()}{priv.lower()}"


@pytest.fixture(scope="module")
def agent():
    """One snmpsimd serving one generated switch to a user per combination (plus the default
    snmpsim user), at a fixed engine ID."""
    if shutil.which("snmpsimd") is None:
        unavailable("snmpsimd is not installed (apt-get install snmpsim)")
    sw = leaf_spine(spines=1, leaves=1, hosts_per_leaf=2, uplink_rate=1e9)
    work = Path(tempfile.mkdtemp(prefix="fabricmon-v3sim-"))
    data, cache = work / "data", work / "cache"
    data.mkdir()
    cache.mkdir()
    (data / "public.snmprec").write_text(snmprec(sw[1], sw))
    os.chmod(work, 0o755)
    os.chmod(data, 0o755)
    os.chmod(cache, 0o777)
    os.chmod(data / "public.snmprec", 0o644)
    port = free_udp_ports(1)[0]
    users = []
    for a, p in COMBOS:
        users += [f"--v3-user={_user(a, p)}", f"--v3-auth-key={AUTH_PASS}", f"--v3-auth-proto={a}",
                  f"--v3-priv-key={PRIV_PASS}", f"--v3-priv-proto={SIM_PRIV[p]}"]
    extra = ["--process-user=nobody", "--process-group=nogroup"] if os.geteuid() == 0 else []
    log = open(work / "log", "wb")
    # snmpsimd's options after --v3-engine-id are that engine's: its users, data and endpoint
    proc = subprocess.Popen(["snmpsimd", f"--cache-dir={cache}", "--v3-only", *extra, "--logging-method=stderr",
                             f"--v3-engine-id={ENGINE_ID}", f"--data-dir={data}", *users,
                             f"--agent-udpv4-endpoint=127.0.0.1:{port}"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        probe = U.Usm(_user("SHA", "AES"), "SHA", AUTH_PASS, "AES", PRIV_PASS, "public")
        def serves() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"snmpsimd did not serve v3: {(work / 'log').read_text()[-2000:]}")
            res, = S.walk_many([S.WalkSpec(address, SYSNAME, timeout=1, retries=0, usm=probe)],
                               time.monotonic() + 5)
            return bool(res.ok and res.stdout)
        wait_until(serves, 120, lambda: f"snmpsimd serving v3: {(work / 'log').read_text()[-2000:]}", interval=0.5)
        yield address, sw[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(5)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def _spec(address: str, usm: U.Usm, root: str = IFX, **kw) -> S.WalkSpec:
    return S.WalkSpec(address, root, usm=usm, **{"timeout": 2, "retries": 1, **kw})


def test_every_auth_and_priv_combination_reads_the_switch(agent) -> None:
    address, sw = agent
    usms = {(a, p): U.Usm(_user(a, p), a, AUTH_PASS, p, PRIV_PASS, "public") for a, p in COMBOS}
    specs = [_spec(address, u, columns=(f"{IFX}.1", f"{IFX}.6")) for u in usms.values()]
    results = S.walk_many(specs, time.monotonic() + 120)
    ports = len(sw.ports)
    for (a, p), res in zip(usms, results):
        assert res.ok and failure(res) is None, (a, p, res.stderr)
        lines = res.stdout.splitlines()
        assert len(lines) >= 2 * ports, (a, p)
        assert any(f'STRING: "{sw.ports[0].name}"' in x for x in lines), (a, p)
        assert res.argv[:8] == (S.INPROCESS_PROGRAM, "-v3", "-l", "authPriv", "-a", a, "-x", p)
    assert all(u.localisations == 1 for u in usms.values())


def test_the_system_table_reads_alike_in_v3_and_its_text_is_net_snmps(agent) -> None:
    address, sw = agent
    u = U.Usm(_user("SHA512", "AES256"), "SHA512", AUTH_PASS, "AES256", PRIV_PASS, "public")
    res, = S.walk_many([_spec(address, u, root=SYSNAME)], time.monotonic() + 30)
    assert res.ok and f'.1.3.6.1.2.1.1.5.0 = STRING: "{sw.name}"' in res.stdout.splitlines()


def _oids(res) -> list[str]:
    return [line.split(" = ")[0] for line in res.stdout.splitlines()]


def test_keys_are_localised_once_and_the_engine_is_cached_across_sweeps(agent) -> None:
    address, _ = agent
    u = U.Usm(_user("SHA256", "AES"), "SHA256", AUTH_PASS, "AES", PRIV_PASS, "public")
    first, = S.walk_many([_spec(address, u)], time.monotonic() + 30)
    engine = u.engine(address)
    assert first.ok and engine is not None and engine.engine_id == bytes.fromhex(ENGINE_ID)
    second = S.walk_many([_spec(address, u), _spec(address, u, root=SYSNAME)], time.monotonic() + 30)
    assert all(r.ok for r in second) and _oids(second[0]) == _oids(first)      # (the counters grow)
    assert u.engine(address) is engine and u.localisations == 1


def test_a_clock_outside_the_time_window_resynchronises(agent) -> None:
    """Our notion of the agent's clock off by far more than 150 s, or of its boots (as after a
    reboot): the agent reports notInTimeWindows (authenticated), the client takes its boots and
    time and the walk goes on."""
    address, _ = agent
    u = U.Usm(_user("MD5", "DES"), "MD5", AUTH_PASS, "DES", PRIV_PASS, "public")
    assert S.walk_many([_spec(address, u, root=SYSNAME)], time.monotonic() + 30)[0].ok
    e = u.engine(address)
    real_boots, real_time = e.boots, e.now(time.monotonic())
    for skew in (("time", 100000), ("boots", 7)):
        setattr(e, skew[0], getattr(e, skew[0]) + skew[1])
        res, = S.walk_many([_spec(address, u, root=SYSNAME)], time.monotonic() + 30)
        assert res.ok and res.stdout, (skew, res.stderr)
        assert u.engine(address) is e and e.boots == real_boots
        assert abs(e.now(time.monotonic()) - real_time) < 60
    assert u.localisations == 1


def test_an_engine_that_no_longer_answers_is_discovered_again(agent) -> None:
    """A cached engine ID the agent does not know (an agent replaced at the same address):
    snmpsim drops such requests, so that sweep times out; the client forgets the engine and
    the next sweep discovers the real one."""
    address, _ = agent
    u = U.Usm(_user("SHA", "AES192"), "SHA", AUTH_PASS, "AES192", PRIV_PASS, "public")
    assert S.walk_many([_spec(address, u, root=SYSNAME)], time.monotonic() + 30)[0].ok
    u.learn(address, b"\x80\x00\x00\x00\x01stale", 1, 1, time.monotonic())
    first, = S.walk_many([_spec(address, u, root=SYSNAME, timeout=0.5, retries=0)], time.monotonic() + 30)
    if not first.ok:
        assert failure(first)[0] == "timeout" and u.engine(address) is None
        first, = S.walk_many([_spec(address, u, root=SYSNAME)], time.monotonic() + 30)
    assert first.ok and u.engine(address).engine_id == bytes.fromhex(ENGINE_ID)


@pytest.mark.parametrize("which", ["auth", "priv", "user"])
def test_a_wrong_credential_is_a_clear_error_naming_no_secret(agent, which) -> None:
    address, _ = agent
    wrong = "wrong-Pass-0000"
    auth, priv, user = AUTH_PASS, PRIV_PASS, _user("SHA", "AES")
    if which == "auth":
        auth = wrong
    elif which == "priv":
        priv = wrong
    else:
        user = "nobody-here"
    u = U.Usm(user, "SHA", auth, "AES", priv, "public")
    t0 = time.monotonic()
    res, = S.walk_many([_spec(address, u, root=SYSNAME, timeout=1, retries=1)], time.monotonic() + 30)
    assert not res.ok and time.monotonic() - t0 < 10
    kind, message = failure(res)
    if which == "auth":      # snmpsim answers, signed with the right key: the client refuses it
        assert (kind, message) == ("exit_code", "SNMPv3 authentication failed (wrong user, protocol or pass phrase)")
        assert "fail authentication" in res.stderr
    else:                    # snmpsim stays silent (GUIDE section 9)
        assert kind == "timeout" and res.stderr.startswith("Timeout")
    text = " ".join(res.argv) + res.stdout + res.stderr + message
    assert wrong not in text and AUTH_PASS not in text and PRIV_PASS not in text
