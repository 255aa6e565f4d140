"""The fuzz targets (issue 47, docs/development.md "Fuzzing"): every decoder of input from outside, as a
function of bytes that returns, or raises the one error its decoder promises (ParseError, ConfigError,
BerError, MadError, BadRequest); any other exception, a hang or unbounded memory is a finding.

A target names the modules it exercises by import path and resolves its function only when first
called, so that `tests/fuzz/run.py` can import them under atheris' instrumentation; the fast tier
(tests/fuzz/test_fuzz_regressions.py) runs every target on its seed corpus and on every input a fuzz
run found (tests/fixtures/fuzz/<target>/), uninstrumented.

Seeds: the suite's own fixtures (tests/fixtures), the real captures kept beside the repository
(../shared/captures, when present: never copied in) and the goldens."""

from __future__ import annotations

import base64
import glob
import importlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CAPTURES = ROOT.parent / "shared" / "captures"
FOUND = FIXTURES / "fuzz"           # inputs a fuzz run found, one directory per target: regression tests
MAX_SEED = 1 << 20                  # seeds larger than this are cut (a 40 MB dump_fts is no better a seed)


def text(data: bytes) -> str:
    """Bytes as the sources read tool output and files: UTF-8, undecodable bytes replaced."""
    return data.decode("utf-8", "replace")


def split(data: bytes, n: int = 2) -> list[bytes]:
    """`data` cut at NUL bytes into n parts (the last holds the rest; missing parts empty)."""
    parts = data.split(b"\0", n - 1)
    return parts + [b""] * (n - len(parts))


def attr(path: str) -> Any:
    mod, _, name = path.rpartition(".")
    return getattr(importlib.import_module(mod), name)


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]                        # what atheris instruments (imported under it)
    body: Callable[[bytes], None]                   # the call; raises only what `allowed` names
    allowed: tuple[str, ...]                        # the error classes its decoders promise, by import path
    seeds: tuple[str, ...] = ()                     # globs under ROOT, or "captures:<glob>" under CAPTURES
    extra: Callable[[], Iterator[bytes]] | None = field(default=None, compare=False)   # seeds built in code

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        return _errors(self.allowed)

    def __call__(self, data: bytes) -> None:
        try:
            self.body(data)
        except self.errors:
            pass

    def seed_inputs(self) -> Iterator[tuple[str, bytes]]:
        for pattern in self.seeds:
            base, pat = (CAPTURES, pattern[len("captures:"):]) if pattern.startswith("captures:") else (ROOT, pattern)
            for path in sorted(glob.glob(str(base / pat), recursive=True)):
                p = Path(path)
                if p.is_file():
                    data = p.read_bytes()
                    if p.suffix == ".xz":
                        import lzma
                        data = lzma.decompress(data)
                    yield str(p.relative_to(base)), data[:MAX_SEED]
        if self.extra is not None:
            for i, data in enumerate(self.extra()):
                yield f"built-{i}", data

    def found_inputs(self) -> Iterator[tuple[str, bytes]]:
        for p in sorted((FOUND / self.name).glob("*")):
            if p.is_file() and p.name != "README.md":
                yield p.name, p.read_bytes()


@cache
def _errors(paths: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    return tuple(attr(p) for p in paths)


PARSE = ("fabricmon.parsers.errors.ParseError",)
CONFIG = ("fabricmon.schema.ConfigError",)


def _call(path: str, *adapt: Callable[[bytes], Any]) -> Callable[[bytes], None]:
    """A body calling the function at `path` with `data` turned into its arguments (text by default)."""
    def body(data: bytes) -> None:
        fn = attr(path)
        fn(*(a(data) for a in adapt)) if adapt else fn(text(data))
    return body


def _lines(path: str) -> Callable[[bytes], None]:
    """A body calling a one-line decoder on each line (the kernel log matcher)."""
    def body(data: bytes) -> None:
        fn = attr(path)
        for line in text(data).splitlines()[:200]:
            fn(line)
    return body


def _each(*paths: str) -> Callable[[bytes], None]:
    """A body calling several text decoders of one format on the same input, each on its own."""
    def body(data: bytes) -> None:
        t = text(data)
        errors = _errors(PARSE)
        for p in paths[:-1]:
            try:
                attr(p)(t)
            except errors:
                pass
        attr(paths[-1])(t)
    return body


# --- bodies that need more than one call -------------------------------------------------------

def _ibqueryerrors(data: bytes) -> None:
    out, err = split(data)
    attr("fabricmon.parsers.ibqueryerrors.parse_ibqueryerrors")(text(out), text(err))


def _walk_name(raw: bytes) -> str:
    """One of fabricmon's own walk names (the caller's constant, never input): the one `raw` names, else
    the one its length picks."""
    walks = attr("fabricmon.parsers.snmp.WALK_BY_NAME")
    name = text(raw)
    return name if name in walks else list(walks)[len(raw) % len(walks)]


def _snmp_walks(data: bytes) -> None:
    """The three SNMP table decoders on walks: `<walk name>\\0<walk text>\\0...`."""
    parts = data.split(b"\0")
    texts = {_walk_name(parts[i]): text(parts[i + 1]) for i in range(0, len(parts) - 1, 2)}
    errors = _errors(PARSE)
    for fn in ("fabricmon.parsers.snmp.identity_from_walks", "fabricmon.parsers.snmp.counters_from_walks"):
        try:
            attr(fn)(texts)
        except errors:
            pass
    attr("fabricmon.parsers.entity_sensor.join")(texts)


def _snmp_walk(data: bytes) -> None:
    walk, body = split(data)
    attr("fabricmon.parsers.snmp.parse_walk")(_walk_name(walk), text(body))


def _config(data: bytes) -> None:
    attr("fabricmon.config.loads")(text(data), "fuzz.yml", False)


def _webconfig(data: bytes) -> None:
    attr("fabricmon.serve.webconfig.loads")(text(data), "web.yml", False)


def _http_head(data: bytes) -> None:
    head, _, _ = data.partition(b"\r\n\r\n")
    req = attr("fabricmon.serve.server.parse_head")(head)
    try:                        # an unknown counter set is a ValueError the server answers 400
        attr("fabricmon.serve.server.collect_sets")(req.target.partition("?")[2])
    except ValueError as exc:
        if type(exc) is not ValueError:
            raise


@cache
def _auth() -> Any:
    import bcrypt
    auth = attr("fabricmon.serve.webconfig.BasicAuth")({"prometheus": bcrypt.hashpw(b"secret", bcrypt.gensalt(4))})
    auth._dummy = bcrypt.hashpw(b"fabricmon-no-such-user", bcrypt.gensalt(4))   # bcrypt's least cost: fast runs
    return auth


def _basic_auth(data: bytes) -> None:
    _auth().check(data.decode("latin-1"))


def _ber(data: bytes) -> None:
    snmp = importlib.import_module("fabricmon.host.snmp")
    resp = snmp.decode_message(data)
    for _oid, tag, body in resp.varbinds:
        snmp.decode_oid(_oid)
        snmp.decode_value(tag, body)
        snmp.value_text(tag, body)


@cache
def _usm() -> tuple[Any, Any]:
    usm = importlib.import_module("fabricmon.host.usm")
    u = usm.Usm("fabricmon", "SHA", "authpass1234", "AES", "privpass1234")
    e = u.learn("127.0.0.1:161", b"\x80\x00\x1f\x88\x80fuzz", 1, 100, 0.0)
    return u, e


def _usm_decode(data: bytes) -> None:
    u, e = _usm()
    msg = u.decode(data, e)
    if msg is None:
        return
    u.decode(data, None)


def _mad(data: bytes) -> None:
    codec = importlib.import_module("fabricmon.sources.infiniband.mad.codec")
    errors = _errors(("fabricmon.sources.infiniband.mad.codec.MadError",))
    for fn in (codec.decode_header, codec.decode_class_port_info, codec.decode_port_counters,
               codec.decode_port_counters_ext, codec.port_counters_ext_values, codec.decode_port_info,
               codec.decode_port_link, codec.decode_node_info, codec.decode_node_desc):
        try:
            fn(data)
        except errors:
            pass


# --- seeds built in code -------------------------------------------------------------------------

def _mad_seeds() -> Iterator[bytes]:
    """A GetResp of every attribute decoded, from the codec's own request encoders."""
    codec = importlib.import_module("fabricmon.sources.infiniband.mad.codec")
    for req in (codec.encode_class_port_info(1), codec.encode_port_counters(1, 2), codec.encode_port_counters_ext(1, 3),
                codec.encode_port_info(1, 4), codec.encode_get(codec.CLASS_SMP_LID, codec.ATTR_NODE_INFO, 0, 5),
                codec.encode_get(codec.CLASS_SMP_LID, codec.ATTR_NODE_DESC, 0, 6)):
        mad = bytearray(req)
        mad[3] = codec.METHOD_GET_RESP
        mad[64:72] = b"\x04\x03\x02\x01\xff\xfe\x80\x7f"
        yield bytes(mad)


def _ber_seeds() -> Iterator[bytes]:
    snmp = importlib.import_module("fabricmon.host.snmp")
    oid = snmp.oid_body("1.3.6.1.2.1.31.1.1.1.6.1")
    yield snmp.encode_getbulk(b"public", 7, 10, [oid])
    for tag, value in ((snmp.INTEGER, 5), (snmp.OCTET_STRING, b"Ethernet1/1"), (snmp.COUNTER64, 2**63),
                       (snmp.IPADDRESS, "10.0.0.1"), (snmp.OID, "1.3.6.1.4.1.9"), (snmp.END_OF_MIB_VIEW, None)):
        yield snmp.encode_message(b"public", snmp.RESPONSE, 7, 0, 0, [(oid, tag, value)])


def _usm_seeds() -> Iterator[bytes]:
    u, e = _usm()
    yield u.discovery(1)
    snmp = importlib.import_module("fabricmon.host.snmp")
    pdu = snmp.encode_pdu(snmp.GET_BULK_REQUEST, 9, 0, 10, [("1.3.6.1.2.1.2.2.1.2", snmp.NULL, None)])
    yield u.request(e, 2, pdu, 0.0)


def _http_seeds() -> Iterator[bytes]:
    yield b"GET /metrics HTTP/1.1\r\nHost: node01:9879\r\nAccept-Encoding: gzip\r\n\r\n"
    yield b"GET /metrics?collect[]=default&collect[]=phy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    yield b"POST /api/v1/actions/undo HTTP/1.0\r\nContent-Length: 12\r\n\r\n{\"id\": 7}"
    yield b"GET /api/verdict HTTP/1.1\r\nAuthorization: Basic cHJvbWV0aGV1czpzZWNyZXQ=\r\n\r\n"


def _auth_seeds() -> Iterator[bytes]:
    yield b"Basic " + base64.b64encode(b"prometheus:secret")
    yield b"Basic " + base64.b64encode(b"prometheus:wrong")
    yield b"basic bm8tY29sb24="


_SNMPREC_TYPES = {"2": "INTEGER", "4": "STRING", "4x": "Hex-STRING", "6": "OID", "64": "IpAddress",
                  "65": "Counter32", "66": "Gauge32", "67": "Timeticks", "70": "Counter64"}


def _net_snmp(snmprec: str) -> str:
    """An snmpsim recording (`oid|type|value`) as net-snmp prints a walk of it (`.oid = TYPE: value`)."""
    out = []
    for line in snmprec.splitlines():
        oid, _, rest = line.partition("|")
        typ, _, val = rest.partition("|")
        name = _SNMPREC_TYPES.get(typ)
        if name is None:
            continue
        if name == "Hex-STRING":
            val = " ".join(val[i:i + 2].upper() for i in range(0, len(val), 2))
        elif name == "STRING":
            val = f'"{val}"'
        out.append(f".{oid} = {name}: {val}")
    return "\n".join(out) + "\n"


def _walks() -> Iterator[str]:
    for path in sorted(glob.glob(str(FIXTURES / "snmprec" / "**" / "*.snmprec"), recursive=True))[:6]:
        yield _net_snmp(Path(path).read_text(errors="replace"))[:MAX_SEED]


def _walk_seeds() -> Iterator[bytes]:
    walks = [w.name for w in attr("fabricmon.parsers.snmp.WALKS")]
    for t in _walks():
        for w in walks[:4]:
            yield w.encode() + b"\0" + t.encode()


def _table_seeds() -> Iterator[bytes]:
    walks = [w.name for w in attr("fabricmon.parsers.snmp.WALKS")]
    for t in _walks():
        yield b"\0".join(x for w in walks for x in (w.encode(), t.encode()))


def _kmsg_seeds() -> Iterator[bytes]:
    rows = (FIXTURES / "kmsg" / "lines.tsv").read_text().splitlines()
    yield "\n".join(r.split("\t", 2)[-1] for r in rows if not r.startswith("#")).encode()


def _journal_seeds() -> Iterator[bytes]:
    for i, (event, line) in enumerate((("a", "mlx5_core 0000:5c:00.0: Port module event: module 0, Cable unplugged"),
                                       ("b", "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."))):
        yield (json.dumps({"__CURSOR": f"s=1;i={i}", "__MONOTONIC_TIMESTAMP": "123456", "MESSAGE": line}) + "\n"
               + json.dumps({"__CURSOR": "s=1;i=9", "MESSAGE": list(line.encode()[:20]) + [255]}) + "\n").encode()


def _text_seeds(*samples: str) -> Callable[[], Iterator[bytes]]:
    return lambda: (x.encode() for x in samples)


_SQUEUE = ("4242|alice|RUNNING|node[001-004,007]|train\n4243|bob|PENDING|(null)|eval\n"
           "4244|carol|RUNNING|gpu-a[01-02],gpu-b03|llm|with|bars\n")
_TOPOLOGY = ("SwitchName=s0 Nodes=node[001-008]\nSwitchName=s1 Nodes=node[009-016] LinkSpeed=200\n"
             "SwitchName=spine Switches=s[0-1]\n", "- topology: t1\n  cluster_default: true\n  tree:\n    switches:\n"
             "      - switch: s0\n        children: s[1-2]\n      - switch: s1\n        nodes: node[01-04]\n")
_DESIGN = ("start device,start port,end device,end port,link type\nleaf01,1,node01 mlx5_0,1,4xHDR\n"
           "leaf01,5,spine01,1,4xHDR\n",)
_NAME_MAP = ('# site map\n0x0002c90300000001 "leaf01"\n0x0002c90300000002 "node01 HCA-1"\n',)
_WEBCONFIG = ("basic_auth_users:\n  prometheus: $2b$04$abcdefghijklmnopqrstuu5D8KBtN1Z8Y6jb3rF0pQv3jK5X9zvAi\n"
              "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",)
_MODULES = ("mlx5_ib 466944 0 - Live 0x0000000000000000\nnvidia_peermem 16384 0 - Live 0x0\n"
            "Linux version 5.15.0-105-generic (buildd@lcy02) #115-Ubuntu SMP\n"
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n",)


def _json_seeds() -> Iterator[bytes]:
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    import nccl_ras_answers as a
    for fn in (a.issue1911, a.issue1762, a.issue1730):
        yield fn().encode()
    yield a.issue1762("2.28.9").replace('"nvml_dev": 0,\n          "status"', '"nvml_dev": 0\n          "status"').encode()


TARGETS: dict[str, Target] = {t.name: t for t in (
    # tool output
    Target("ibnetdiscover", ("fabricmon.parsers.ibnetdiscover",),
           _call("fabricmon.parsers.ibnetdiscover.parse_ibnetdiscover"), PARSE,
           ("tests/fixtures/ibnetdiscover/**/*", "captures:ibnetdiscover/*")),
    Target("iblinkinfo", ("fabricmon.parsers.iblinkinfo",), _call("fabricmon.parsers.iblinkinfo.parse_iblinkinfo"),
           PARSE, ("tests/fixtures/iblinkinfo/**/*", "captures:iblinkinfo/*")),
    Target("ibstat", ("fabricmon.parsers.ibstat",), _call("fabricmon.parsers.ibstat.parse_ibstat"), PARSE,
           ("tests/fixtures/ibstat/**/*", "captures:ibstat/*")),
    Target("perfquery", ("fabricmon.parsers.perfquery",), _call("fabricmon.parsers.perfquery.parse_perfquery"), PARSE,
           ("tests/fixtures/perfquery/**/*", "captures:perfquery/*")),
    Target("ibqueryerrors", ("fabricmon.parsers.ibqueryerrors",), _ibqueryerrors, PARSE,
           ("captures:ibqueryerrors/*",), _text_seeds(
               "Errors for 0x0002c90300000001 \"leaf01\"\n   GUID 0x0002c90300000001 port 7: [SymbolErrorCounter == 12]"
               " [LinkDownedCounter == 1]\n\n## Summary: 12 nodes checked, 1 bad nodes found\n\0ibwarn: [3] query failed\n")),
    Target("portinfo", ("fabricmon.parsers.portinfo",),
           _each("fabricmon.parsers.portinfo.parse_saquery_pir", "fabricmon.parsers.portinfo.parse_portinfo"), PARSE,
           ("tests/fixtures/portinfo/**/*",)),
    Target("sminfo", ("fabricmon.parsers.sminfo",),
           _each("fabricmon.parsers.sminfo.parse_saquery_sm_lids", "fabricmon.parsers.sminfo.parse_sminfo"), PARSE,
           ("tests/fixtures/fabric/tools/**/*sminfo*", "tests/fixtures/fabric/tools/**/*saquery*")),
    Target("lft", ("fabricmon.parsers.lft",), _call("fabricmon.parsers.lft.parse_lft"), PARSE,
           ("tests/fixtures/fabric/tools/**/*dump_fts*",)),
    Target("mlnx_qos", ("fabricmon.parsers.mlnx_qos",), _call("fabricmon.parsers.mlnx_qos.parse_mlnx_qos"), PARSE,
           ("tests/fixtures/mlnx_qos/**/*", "captures:mlnx_qos/*")),
    Target("ethtool", ("fabricmon.parsers.ethtool",), _call("fabricmon.parsers.ethtool.parse_ethtool_stats"), PARSE,
           ("tests/fixtures/ethtool/**/*", "captures:ethtool/*")),
    Target("ethtool_module", ("fabricmon.parsers.ethtool_module",),
           _call("fabricmon.parsers.ethtool_module.parse_module"), PARSE, ("tests/fixtures/ethtool_module/**/*",)),
    Target("proc", ("fabricmon.parsers.proc_modules",),
           _each("fabricmon.parsers.proc_modules.parse_kernel_release",
                 "fabricmon.parsers.proc_modules.parse_nvidia_driver_version",
                 "fabricmon.parsers.proc_modules.parse_proc_modules"), PARSE,
           ("tests/fixtures/bundles/*/files/procfs/modules", "tests/fixtures/bundles/*/files/procfs/version"),
           _text_seeds(*_MODULES)),
    Target("sysfs_values", ("fabricmon.parsers.sysfs_ib", "fabricmon.parsers.pci_topology"),
           _each("fabricmon.parsers.sysfs_ib.parse_enum", "fabricmon.parsers.sysfs_ib.parse_rate",
                 "fabricmon.parsers.pci_topology.parse_numa_node", "fabricmon.parsers.pci_topology.pci_chain",
                 "fabricmon.parsers.sysfs_ib.parse_counter"), PARSE,
           ("tests/fixtures/sysfs/**/state", "tests/fixtures/sysfs/**/rate", "tests/fixtures/sysfs/**/numa_node")),
    Target("node_name_map", ("fabricmon.parsers.node_name_map",),
           _call("fabricmon.parsers.node_name_map.parse_node_name_map"), PARSE, (), _text_seeds(*_NAME_MAP)),
    Target("nccl_env", ("fabricmon.parsers.nccl_env",),
           _each("fabricmon.parsers.nccl_env.parse_nccl_ib_hca", "fabricmon.parsers.nccl_env.parse_env_file"), PARSE,
           ("tests/fixtures/**/nccl*.conf",)),
    # files and protocols of other programs
    Target("nccl_inspector", ("fabricmon.parsers.nccl_inspector",),
           _each("fabricmon.parsers.nccl_inspector.parse_json_log", "fabricmon.parsers.nccl_inspector.parse_prom"),
           PARSE, ("tests/fixtures/nccl_inspector/*",)),
    Target("nccl_ras", ("fabricmon.parsers.nccl_ras", "fabricmon.parsers.nccl_ras_text", "fabricmon.model.nccl"),
           _each("fabricmon.parsers.nccl_ras.version_of", "fabricmon.parsers.nccl_ras.parse_ras_status",
                 "fabricmon.parsers.nccl_ras_text.parse_ras_text"), PARSE,
           ("tests/fixtures/nccl_ras/*.txt",), _json_seeds),
    Target("kmsg", ("fabricmon.parsers.kmsg", "fabricmon.model.kernel_log"),
           _lines("fabricmon.parsers.kmsg.match"), PARSE, ("captures:dmesg/*",), _kmsg_seeds),
    Target("journal", ("fabricmon.parsers.kmsg",), _call("fabricmon.parsers.kmsg.parse_journal_json"), PARSE, (),
           _journal_seeds),
    Target("squeue", ("fabricmon.parsers.slurm",),
           _each("fabricmon.parsers.slurm.expand_hostlist", "fabricmon.parsers.slurm.parse_squeue"), PARSE,
           (), _text_seeds(_SQUEUE)),
    Target("topology_conf", ("fabricmon.parsers.slurm",),
           _each("fabricmon.parsers.slurm.parse_topology_yaml", "fabricmon.parsers.slurm.parse_topology_conf"),
           PARSE + CONFIG, (), _text_seeds(*_TOPOLOGY)),
    Target("design", ("fabricmon.parsers.design",), _call("fabricmon.parsers.design.parse_design"), PARSE,
           ("tests/fixtures/ibnetdiscover/real/*.xz", "captures:ibnetdiscover/*"), _text_seeds(*_DESIGN)),
    Target("snmp_walk", ("fabricmon.parsers.snmp",), _snmp_walk, PARSE, (), _walk_seeds),
    Target("snmp_tables", ("fabricmon.parsers.snmp", "fabricmon.parsers.entity_sensor"), _snmp_walks, PARSE, (),
           _table_seeds),
    # fabricmon's own files
    Target("config", ("fabricmon.config", "fabricmon.schema"), _config, CONFIG,
           ("fabricmon/deploy/fabricmon.yml", "tests/fixtures/**/config.yml", "fabricmon/deploy/*.yml")),
    Target("webconfig", ("fabricmon.serve.webconfig",), _webconfig, CONFIG, (), _text_seeds(*_WEBCONFIG)),
    # the network
    Target("http_request", ("fabricmon.serve.server",), _http_head, ("fabricmon.serve.server.BadRequest",), (),
           _http_seeds),
    Target("basic_auth", ("fabricmon.serve.webconfig",), _basic_auth, (), (), _auth_seeds),
    Target("snmp_ber", ("fabricmon.host.snmp",), _ber, ("fabricmon.host.snmp.BerError",), (), _ber_seeds),
    Target("snmp_usm", ("fabricmon.host.usm", "fabricmon.host.snmp"), _usm_decode, ("fabricmon.host.snmp.BerError",),
           (), _usm_seeds),
    Target("mad", ("fabricmon.sources.infiniband.mad.codec",), _mad,
           ("fabricmon.sources.infiniband.mad.codec.MadError",), (), _mad_seeds),
)}

__all__ = ["CAPTURES", "FOUND", "TARGETS", "Target"]
