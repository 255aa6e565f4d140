"""Decoding an SNMP GETBULK answer: fabricmon's BER codec (host/snmp.py) against pysnmp (the maintained
library: its pyasn1 BER decoder with the SNMPv2c message spec), issue 47's re-measure. Prints a
table: microseconds per answer and per value, both ways, on the same datagrams, in one run.

The answers are what a switch sends for ifXTable's counters: 25 varbinds of Counter64 (and one of
OCTET STRING names) per answer, encoded by host/snmp.py's own encoder (so both decode the same
bytes). fabricmon's side is what its walk does with an answer: decode_message, then each value
(decode_value); pysnmp's is `decoder.decode(data, asn1Spec=api.v2c.Message())` and each value's
`prettyPrint()`-free int()/bytes().

    python bench/snmp_decode.py [--repeat 2000]      # needs pysnmp (pip install pysnmp); not a dependency
"""

from __future__ import annotations

import argparse

from http_parse import per_call     # the same timing: the median of 5 runs, microseconds a call

from fabricmon.host import snmp


def answer(values: int, names: bool) -> bytes:
    base = "1.3.6.1.2.1.31.1.1.1.1" if names else "1.3.6.1.2.1.31.1.1.1.6"
    vbs = [(f"{base}.{i + 1}", snmp.OCTET_STRING if names else snmp.COUNTER64,
            f"Ethernet{i + 1}" if names else 123456789012 + i * 7919) for i in range(values)]
    return snmp.encode_message(b"public", snmp.RESPONSE, 4242, 0, 0, vbs)


def ours(data: bytes) -> int:
    resp = snmp.decode_message(data)
    n = 0
    for _oid, tag, body in resp.varbinds:
        snmp.decode_value(tag, body)
        n += 1
    return n


def theirs(data: bytes) -> int:
    from pyasn1.codec.ber import decoder
    from pysnmp.proto import api
    msg, _ = decoder.decode(data, asn1Spec=api.v2c.Message())
    pdu = api.v2c.apiMessage.get_pdu(msg)
    n = 0
    for _oid, val in api.v2c.apiPDU.get_varbinds(pdu):
        val = val.getComponent() if hasattr(val, "getComponent") else val
        bytes(val) if val.__class__.__name__ == "OctetString" else int(val)
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2000)
    a = ap.parse_args()
    import pysnmp
    print(f"pysnmp {pysnmp.__version__}")
    print(f"{'answer':32} {'fabricmon us':>13} {'pysnmp us':>10} {'per value (f/p)':>18} {'pysnmp/fabricmon':>17}")
    for name, data in (("25 Counter64 (ifHCInOctets)", answer(25, False)), ("25 OCTET STRING (ifName)", answer(25, True))):
        assert ours(data) == theirs(data) == 25
        o, t = per_call(ours, data, a.repeat), per_call(theirs, data, max(1, a.repeat // 10))
        print(f"{name:32} {o:13.1f} {t:10.1f} {o / 25:8.2f}/{t / 25:<9.1f} {t / o:17.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
