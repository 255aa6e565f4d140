"""SNMPv3's User-based Security Model for the in-process client (host.snmp): engine discovery,
keys localised once per switch, HMAC authentication and DES/AES privacy.

What it implements: RFC 3414 (USM: password to key, key localisation, HMAC-MD5-96 and
HMAC-SHA-96, CBC-DES, the timeliness window), RFC 7860 (HMAC-SHA-2: 224/128, 256/192, 384/256,
512/384 bits) and RFC 3826 (CFB128-AES-128). AES-192 and AES-256 are not in an RFC: their keys
are extended as in draft-blumenthal-aes-usm-04 (Kul || H(Kul) ...), which is what net-snmp's
`-x AES-192/AES-256` does (and snmpsim's `AES192BLMT`/`AES256BLMT`); `AES192C`/`AES256C` extend them
as the Reeder 3DES draft does (Cisco's, net-snmp's `AES-192-C`/`AES-256-C`, snmpsim's plain
`AES192`/`AES256`).
The protocol names are the config's (sources.ethernet.settings: SNMP_AUTH_PROTOCOLS, SNMP_PRIV_PROTOCOLS).

HMAC and the hashes are the standard library's; AES and DES come from the `cryptography`
package (the one runtime dependency added for SNMPv3: the standard library has no block cipher).
Without it, or without DES in it, `supported()` says why and the collector falls back to
net-snmp's tools (sources.ethernet.snmp).

Secrets: the pass phrases are turned into keys (Ku) once when a Usm is made and are not kept;
the keys live only in this object (repr shows none), never in an error message, a log line or a
recorded argv. Localised keys (Kul) are cached per engine ID; an agent's engine ID, boots and
time are cached per address, so a sweep costs no discovery after the first.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fabricmon.host.snmp import (
    OCTET_STRING, SEQUENCE, BerError, Response, ber_header, ber_int_at, decode_pdu, encode_integer, tlv,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers import CipherContext

# auth protocol -> (hash name, MAC length in octets)
AUTH = {"MD5": ("md5", 12), "SHA": ("sha1", 12), "SHA224": ("sha224", 16), "SHA256": ("sha256", 24),
        "SHA384": ("sha384", 32), "SHA512": ("sha512", 48)}
# priv protocol -> key length in octets (DES: 8 key + 8 pre-IV). AES192/AES256 extend the key as
# Blumenthal's draft says (net-snmp's AES-192/AES-256); AES192C/AES256C as Reeder's 3DES draft says
# (Cisco's, net-snmp's AES-192-C/AES-256-C, snmpsim's AES192/AES256)
PRIV = {"DES": 16, "AES": 16, "AES192": 24, "AES256": 32, "AES192C": 24, "AES256C": 32}
_REEDER = frozenset(("AES192C", "AES256C"))
VERSION_3 = 3
USM = 3
FLAG_AUTH, FLAG_PRIV, FLAG_REPORTABLE = 0x01, 0x02, 0x04
REPORT = 0xA8
MAX_SIZE = 65507
_KEY_CACHE_MAX = 4096

try:                                           # the one optional import (pyproject lists it)
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    try:                                       # where cryptography 43 and later keep them
        from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    except ImportError:
        # before cryptography 43 (the checker reads the newer one, which has the import above)
        TripleDES = getattr(algorithms, "TripleDES", None)  # type: ignore[misc,assignment]
    _CRYPTO_ERROR = ""
except ImportError as exc:                     # pragma: no cover - exercised by the fallback test's monkeypatch
    # the optional import's absence: supported() refuses SNMPv3 before any of these is used
    Cipher = algorithms = modes = TripleDES = None  # type: ignore[assignment,misc]
    _CRYPTO_ERROR = f"the cryptography package is not installed ({exc})"


def supported(priv_protocol: str) -> tuple[bool, str]:
    """Whether this process can speak SNMPv3 with that privacy protocol: (yes, "") or (no, why)."""
    if _CRYPTO_ERROR:
        return False, _CRYPTO_ERROR
    if priv_protocol == "DES" and TripleDES is None:
        return False, "this cryptography package has no DES"
    return True, ""


def password_to_key(password: bytes, hash_name: str) -> bytes:
    """Ku (RFC 3414 A.2): the hash of the pass phrase repeated to 1 MiB."""
    if not password:
        raise ValueError("empty pass phrase")
    return hashlib.new(hash_name, (password * ((1 << 20) // len(password) + 1))[:1 << 20]).digest()


def localize(ku: bytes, engine_id: bytes, hash_name: str) -> bytes:
    """Kul (RFC 3414 A.2.2): H(Ku || engineID || Ku)."""
    return hashlib.new(hash_name, ku + engine_id + ku).digest()


def priv_key(ku: bytes, engine_id: bytes, hash_name: str, length: int, reeder: bool = False) -> bytes:
    """The localised privacy key, extended when the hash is shorter than the cipher needs:
    draft-blumenthal-aes-usm-04 3.1.2.1, Kul || H(Kul) || H(Kul || H(Kul)) ...; or (reeder)
    draft-reeder-snmpv3-usm-3desede 2.1, Kul || localize(password_to_key(Kul)) ..."""
    key = localize(ku, engine_id, hash_name)
    while len(key) < length:
        if reeder:
            key += localize(password_to_key(key, hash_name), engine_id, hash_name)
        else:
            key += hashlib.new(hash_name, key).digest()
    return key[:length]


class UsmError(BerError):
    """A v3 message that is well-formed but cannot be accepted (wrong digest, unknown engine...)."""


@dataclass(slots=True)
class Engine:
    """What we know of one agent's SNMP engine (RFC 3414 2.3: the non-authoritative side's cache)."""
    engine_id: bytes
    boots: int
    time: int
    learned: float                  # time.monotonic() when `time` was current
    auth_key: bytes = field(default=b"", repr=False)
    priv_key: bytes = field(default=b"", repr=False)
    # the cipher in ECB, made once per engine (making a CFB/CBC context per message costs more
    # than the crypto): CFB and CBC are done on it below. One walk_many thread uses it at a time.
    ecb_enc: CipherContext | None = field(default=None, repr=False, compare=False)
    ecb_dec: CipherContext | None = field(default=None, repr=False, compare=False)
    engine_tlv: bytes = b""         # the engine ID as an OCTET STRING, made once (every request has it twice)

    def now(self, at: float) -> int:
        return max(0, min(0x7FFFFFFF, self.time + int(at - self.learned)))


@dataclass(slots=True)
class V3Message:
    msg_id: int
    flags: int
    engine_id: bytes
    boots: int
    time: int
    authenticated: bool
    pdu: Response | None            # None: encrypted and not ours to read


class Usm:
    """One user's credentials as keys, and the engines it has met (by address). Thread-safe for
    the caches; one walk_many call drives one address at a time."""

    def __init__(self, user: str, auth_protocol: str, auth_password: str, priv_protocol: str,
                 priv_password: str, context: str = ""):
        if auth_protocol not in AUTH:
            raise ValueError(f"unknown SNMPv3 auth protocol {auth_protocol!r}")
        if priv_protocol not in PRIV:
            raise ValueError(f"unknown SNMPv3 privacy protocol {priv_protocol!r}")
        ok, why = supported(priv_protocol)
        if not ok:
            raise RuntimeError(why)
        self.user = user.encode()
        self.context = context.encode()
        self.auth_protocol, self.priv_protocol = auth_protocol, priv_protocol
        self.hash_name, self.mac_len = AUTH[auth_protocol]
        # what every request has, made once: the user and the zeroed MAC; the header's tail
        self._user_mac = tlv(OCTET_STRING, self.user) + bytes((OCTET_STRING, self.mac_len))
        self._context_tlv = tlv(OCTET_STRING, self.context)
        flags = bytes((FLAG_AUTH | FLAG_PRIV | FLAG_REPORTABLE,))
        self._head_tail = encode_integer(MAX_SIZE) + tlv(OCTET_STRING, flags) + encode_integer(USM)
        self._auth_ku = password_to_key(auth_password.encode(), self.hash_name)
        self._priv_ku = password_to_key(priv_password.encode(), self.hash_name)
        self._keys: dict[bytes, tuple[bytes, bytes]] = {}
        self.engines: dict[str, Engine] = {}
        self._lock = threading.Lock()
        # salts (the IV's per-message part) never repeat under one key: a counter from a random
        # start, shared by the threads that walk with this Usm (next() on a count is atomic)
        self._salts = itertools.count(int.from_bytes(os.urandom(8), "big") >> 1)
        self.localisations = 0      # how many engine IDs keys were localised for (tests, bench)

    def __repr__(self) -> str:
        return f"Usm(user={self.user.decode()!r}, auth={self.auth_protocol}, priv={self.priv_protocol})"

    def argv(self) -> tuple[str, ...]:
        """How a recorded walk names the security (no user, no secret)."""
        out = ("-v3", "-l", "authPriv", "-a", self.auth_protocol, "-x", self.priv_protocol)
        return out + ("-n", self.context.decode()) if self.context else out

    # --- engines and keys -------------------------------------------------------------------

    def engine(self, address: str) -> Engine | None:
        return self.engines.get(address)

    def learn(self, address: str, engine_id: bytes, boots: int, engine_time: int, now: float) -> Engine:
        """An engine ID from a discovery (or an unknownEngineID report): keys for it, localised
        once per engine ID and cached."""
        with self._lock:
            keys = self._keys.get(engine_id)
            if keys is None:
                if len(self._keys) >= _KEY_CACHE_MAX:
                    self._keys.clear()
                keys = (localize(self._auth_ku, engine_id, self.hash_name),
                        priv_key(self._priv_ku, engine_id, self.hash_name, PRIV[self.priv_protocol],
                                 self.priv_protocol in _REEDER))
                self._keys[engine_id] = keys
                self.localisations += 1
            e = Engine(engine_id, boots, engine_time, now, *keys)
            e.engine_tlv = tlv(OCTET_STRING, engine_id)
            algo = TripleDES(keys[1][:8] * 3) if self.priv_protocol == "DES" else algorithms.AES(keys[1])
            e.ecb_enc = Cipher(algo, modes.ECB()).encryptor()
            if self.priv_protocol == "DES":
                e.ecb_dec = Cipher(algo, modes.ECB()).decryptor()
            self.engines[address] = e
            return e

    def forget(self, address: str) -> None:
        self.engines.pop(address, None)

    # --- requests ---------------------------------------------------------------------------

    def discovery(self, msg_id: int) -> bytes:
        """RFC 3414 4: a reportable noAuthNoPriv request with an empty engine ID and no user; the
        agent answers with a report carrying its engine ID, boots and time."""
        sec = tlv(SEQUENCE, tlv(OCTET_STRING, b"") + encode_integer(0) + encode_integer(0)
                  + tlv(OCTET_STRING, b"") + tlv(OCTET_STRING, b"") + tlv(OCTET_STRING, b""))
        pdu = tlv(0xA0, encode_integer(msg_id) + encode_integer(0) + encode_integer(0) + tlv(SEQUENCE, b""))
        scoped = tlv(SEQUENCE, tlv(OCTET_STRING, b"") + tlv(OCTET_STRING, b"") + pdu)
        return self._message(msg_id, FLAG_REPORTABLE, tlv(OCTET_STRING, sec), scoped)

    def request(self, e: Engine, msg_id: int, pdu: bytes, now: float) -> bytes:
        """An authPriv message carrying `pdu` (an encoded PDU) to engine `e`."""
        boots, etime = e.boots, e.now(now)
        assert e.ecb_enc is not None                # made with the engine's keys (learn)
        scoped = tlv(SEQUENCE, e.engine_tlv + self._context_tlv + pdu)
        n = next(self._salts) & 0xFFFFFFFFFFFFFFFF
        if self.priv_protocol == "DES":
            salt = boots.to_bytes(4, "big") + (n & 0xFFFFFFFF).to_bytes(4, "big")
            data = _cbc_encrypt(e.ecb_enc, _xor(e.priv_key[8:16], salt), scoped + bytes(-len(scoped) % 8))
        else:
            salt = n.to_bytes(8, "big")
            data = _cfb_encrypt(e.ecb_enc, boots.to_bytes(4, "big") + etime.to_bytes(4, "big") + salt, scoped)
        before = e.engine_tlv + encode_integer(boots) + encode_integer(etime) + self._user_mac
        body = before + bytes(self.mac_len) + b"\x04\x08" + salt
        sec = tlv(OCTET_STRING, tlv(SEQUENCE, body))
        head = encode_integer(VERSION_3) + tlv(SEQUENCE, encode_integer(msg_id) + self._head_tail)
        encrypted = tlv(OCTET_STRING, data)
        msg = tlv(SEQUENCE, head + sec + encrypted)
        # where the MAC goes: the message ends with `sec` then `encrypted`, and `body` ends `sec`
        at = len(msg) - len(encrypted) - len(body) + len(before)
        mac = hmac.digest(e.auth_key, msg, self.hash_name)[:self.mac_len]
        return msg[:at] + mac + msg[at + self.mac_len:]

    @staticmethod
    def _message(msg_id: int, flags: int, sec: bytes, data: bytes) -> bytes:
        head = encode_integer(VERSION_3) + tlv(SEQUENCE, encode_integer(msg_id) + encode_integer(MAX_SIZE)
                                               + tlv(OCTET_STRING, bytes((flags,))) + encode_integer(USM))
        body = head + sec + data
        return tlv(SEQUENCE, body)

    # --- answers ----------------------------------------------------------------------------

    def decode(self, data: bytes, e: Engine | None, expect: int | None = None) -> V3Message | None:
        """An SNMPv3 message from the agent whose engine we know as `e` (None: not yet). Raises
        BerError on anything malformed, UsmError on a message that fails authentication. An
        unauthenticated message is returned with authenticated False (only reports are)."""
        end = len(data)
        tag, pos, mend = ber_header(data, 0, end)
        if tag != SEQUENCE or mend != end:
            raise BerError("not an SNMP message" if tag != SEQUENCE else "trailing bytes after the message")
        version, pos = ber_int_at(data, pos, mend)
        if version != VERSION_3:
            raise BerError(f"not SNMPv3 (version {version})")
        tag, pos, hend = ber_header(data, pos, mend)
        if tag != SEQUENCE:
            raise BerError("expected the header")
        msg_id, pos = ber_int_at(data, pos, hend)
        if expect is not None and msg_id != expect:
            return None                 # for an earlier request (a retry's second answer): no MAC, no AES
        _max, pos = ber_int_at(data, pos, hend)
        tag, s, pos = ber_header(data, pos, hend)
        if tag != OCTET_STRING or pos - s != 1:
            raise BerError("bad msgFlags")
        flags = data[s]
        model, pos = ber_int_at(data, pos, hend)
        if model != USM or pos != hend:
            raise BerError("not the user-based security model")
        tag, spos, send_ = ber_header(data, pos, mend)
        if tag != OCTET_STRING:
            raise BerError("expected the security parameters")
        tag, p, psend = ber_header(data, spos, send_)
        if tag != SEQUENCE or psend != send_:
            raise BerError("bad security parameters")
        tag, s, p = ber_header(data, p, psend)
        if tag != OCTET_STRING:
            raise BerError("expected the engine ID")
        engine_id = data[s:p]
        boots, p = ber_int_at(data, p, psend)
        etime, p = ber_int_at(data, p, psend)
        tag, s, p = ber_header(data, p, psend)          # user name
        if tag != OCTET_STRING:
            raise BerError("expected the user name")
        tag, mac_at, p = ber_header(data, p, psend)
        if tag != OCTET_STRING:
            raise BerError("expected the authentication parameters")
        mac = data[mac_at:p]
        tag, s, p = ber_header(data, p, psend)
        if tag != OCTET_STRING or p != psend:
            raise BerError("bad privacy parameters")
        salt = data[s:p]
        pos = send_
        authenticated = False
        if flags & FLAG_AUTH and (e is None or engine_id != e.engine_id) and not flags & FLAG_PRIV:
            pass                                     # a report signed by an engine we do not know: unauthenticated
        elif flags & FLAG_AUTH:
            if e is None or engine_id != e.engine_id:
                raise UsmError("an authenticated message from an engine we have not discovered")
            if len(mac) != self.mac_len:
                raise UsmError("authentication parameters of the wrong length")
            want = hmac.digest(e.auth_key, data[:mac_at] + bytes(self.mac_len) + data[mac_at + self.mac_len:],
                               self.hash_name)
            # a digest that does not match: not from that agent, or its key differs from ours (a
            # wrong pass phrase: the agent's report of it is signed with its key). Plaintext is
            # still returned, unauthenticated: the client believes only reports of errors from it
            authenticated = hmac.compare_digest(want[:self.mac_len], mac)
            if not authenticated and flags & FLAG_PRIV:
                raise UsmError("wrong digest (not from that agent, or its key differs)")
        elif flags & FLAG_PRIV:
            raise BerError("privacy without authentication")
        if flags & FLAG_PRIV:
            tag, s, pos = ber_header(data, pos, mend)
            if tag != OCTET_STRING or pos != mend:
                raise BerError("expected the encrypted scoped PDU")
            plain = self._decrypt(e, boots, etime, salt, data[s:pos])
            if plain is None:
                return V3Message(msg_id, flags, engine_id, boots, etime, authenticated, None)
            # a cipher block of padding may follow (DES pads by RFC 3414 8.1.1.2; pysnmp, snmpsim's
            # engine, pads AES too, with 1 to 16 zeros): nothing more
            sdata, spos, pend_limit, padding = plain, 0, len(plain), 8 if self.priv_protocol == "DES" else 16
        else:
            sdata, spos, pend_limit, padding = data, pos, mend, 0
        tag, q, qend = ber_header(sdata, spos, pend_limit)
        if tag != SEQUENCE:
            raise BerError("expected the scoped PDU")
        if pend_limit - qend > padding:
            raise BerError("trailing bytes after the scoped PDU")
        tag, s, q = ber_header(sdata, q, qend)           # contextEngineID
        if tag != OCTET_STRING:
            raise BerError("expected the context engine ID")
        tag, s, q = ber_header(sdata, q, qend)           # contextName
        if tag != OCTET_STRING:
            raise BerError("expected the context name")
        pdu = decode_pdu(sdata, q, qend, (0xA2, REPORT))
        return V3Message(msg_id, flags, engine_id, boots, etime, authenticated, pdu)

    def _decrypt(self, e: Engine | None, boots: int, etime: int, salt: bytes, data: bytes) -> bytes | None:
        if e is None:
            return None
        if len(salt) != 8:
            raise UsmError("privacy parameters are not 8 octets")
        if self.priv_protocol == "DES":
            if len(data) % 8:
                raise UsmError("DES data is not a multiple of 8 octets")
            assert e.ecb_dec is not None            # made with the engine's keys (learn) for DES
            return _cbc_decrypt(e.ecb_dec, _xor(e.priv_key[8:16], salt), data)
        if not (0 <= boots < 1 << 32 and 0 <= etime < 1 << 32):
            raise UsmError("engine boots or time out of range")
        assert e.ecb_enc is not None                # made with the engine's keys (learn)
        return _cfb_decrypt(e.ecb_enc, boots.to_bytes(4, "big") + etime.to_bytes(4, "big") + salt, data)

    def synchronise(self, e: Engine, boots: int, etime: int, now: float) -> None:
        """RFC 3414 3.2 step 7b: an authentic message with a later boots/time moves our notion on."""
        if boots > e.boots or (boots == e.boots and etime > e.now(now)):
            e.boots, e.time, e.learned = boots, etime, now


# --- CFB128 and CBC on a block cipher in ECB -----------------------------------------------------
# (single DES is triple DES with its one key thrice: E_k D_k E_k = E_k)

def _xor(a: bytes, b: bytes) -> bytes:
    """a XOR the first len(a) octets of b."""
    n = len(a)
    return (int.from_bytes(a, "big") ^ int.from_bytes(b[:n], "big")).to_bytes(n, "big")


def _cfb_encrypt(ecb: CipherContext, iv: bytes, plain: bytes) -> bytes:
    """CFB128 (RFC 3826): C_i = P_i XOR E(C_i-1), C_0 the IV; the last block may be short."""
    out, prev = [], iv
    for i in range(0, len(plain), 16):
        prev = _xor(plain[i:i + 16], ecb.update(prev))
        out.append(prev)
    return b"".join(out)


def _cfb_decrypt(ecb: CipherContext, iv: bytes, data: bytes) -> bytes:
    """Every keystream block is E(the ciphertext block before): one ECB call for the message."""
    if not data:
        return b""
    full = (len(data) - 1) // 16 * 16
    return _xor(data, ecb.update(iv + data[:full]))


def _cbc_encrypt(ecb: CipherContext, iv: bytes, plain: bytes) -> bytes:
    out, prev = [], iv
    for i in range(0, len(plain), 8):
        prev = ecb.update(_xor(plain[i:i + 8], prev))
        out.append(prev)
    return b"".join(out)


def _cbc_decrypt(ecb_dec: CipherContext, iv: bytes, data: bytes) -> bytes:
    return _xor(ecb_dec.update(data), iv + data[:-8]) if data else b""


__all__ = ["AUTH", "PRIV", "Engine", "Usm", "UsmError", "V3Message", "localize", "password_to_key", "priv_key",
           "supported"]
