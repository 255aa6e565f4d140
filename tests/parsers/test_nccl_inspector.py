"""The NCCL Inspector reader on the verbatim examples of NCCL's README (tests/fixtures/nccl_inspector,
PROVENANCE.md there) and on hostile input."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES

from fabricmon.model.nccl import COLLECTIVE, P2P, nvml_uuid
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_inspector import bucket_bytes, file_uuid, parse_json_log, parse_prom, size_bucket

DIR = FIXTURES / "nccl_inspector"
GIB = 1 << 30


def test_readme_v51_example_lines() -> None:
    got = parse_prom((DIR / "readme_v5.1_example.prom").read_text())
    assert got.skipped == 0
    by_kind = {m.kind: m for m in got.measures}
    assert len(got.measures) == 2
    coll = by_kind[COLLECTIVE]
    assert (coll.version, coll.job, coll.node, coll.gpu, coll.comm) == ("v5.1", "unknown", "nvl72004-T01", "GPU0",
                                                                        "DP Group 0")
    assert (coll.n_nodes, coll.nranks, coll.operation, coll.message_size, coll.algo_proto) == (
        1, 4, "AllReduce", "4-5GB", "Ring_ll")
    assert coll.message_bytes == 4 * GIB
    assert coll.busbw_gbs == pytest.approx(678.263) and coll.exec_time_us == pytest.approx(9498.47)
    assert not coll.network                                  # n_nodes 1: NVLink only, no NIC
    p2p = by_kind[P2P]
    assert (p2p.operation, p2p.message_size, p2p.message_bytes, p2p.algo_proto) == ("Send", "512-513MB",
                                                                                    512 << 20, "")
    assert p2p.busbw_gbs == pytest.approx(464.9) and p2p.exec_time_us == pytest.approx(1154.87)


def test_first_format_labels() -> None:
    """NCCL 2.29.7's labels (the README gives the label set only): metric lines made of it parse, with
    comm_id, hostname and gpu_device_id standing in, and coll_sn/timestamp not part of the key."""
    labels = (DIR / "readme_2.29.7_labels.txt").read_text().strip()
    later = labels.replace('coll_sn="228924"', 'coll_sn="228925"')
    text = (f"nccl_algorithm_bandwidth_gbs{{{labels}}} 12.5\nnccl_bus_bandwidth_gbs{{{labels}}} 21.875\n"
            f"nccl_collective_exec_time_microseconds{{{later}}} 91553\n")
    got = parse_prom(text)
    assert got.skipped == 0
    assert len(got.measures) == 1         # one (comm, collective, size) whatever the coll_sn of its last line
    m = got.measures[0]
    assert (m.comm, m.node, m.gpu, m.job, m.n_nodes, m.nranks, m.message_size) == (
        "0xd152c00f111816", "pool0-0002", "GPU4", "unknown", 1, 8, "2.00GB")
    assert m.message_bytes == 2 * GIB and m.busbw_gbs == 21.875 and m.exec_time_us == 91553


def test_buckets_as_nccl_forms_them() -> None:
    assert size_bucket(0) == ("0B", 0)
    assert size_bucket(1) == ("1-2B", 1)
    assert size_bucket(1023) == ("1023-1024B", 1023)
    assert size_bucket(1024) == ("1-2KB", 1024)
    assert size_bucket(int(4.5 * GIB)) == ("4-5GB", 4 * GIB)
    assert size_bucket(17179869184) == ("16-17GB", 16 * GIB)        # the README's JSON example
    assert size_bucket(3 << 40) == ("3-4TB", 3 << 40)
    assert size_bucket(5000 << 40) == ("5000-5001TB", 5000 << 40)   # TB is the largest unit
    for label in ("4-5GB", "512-513MB", "0B", "2.00GB"):
        bucket_bytes(label)
    with pytest.raises(ParseError):
        bucket_bytes("big")


def test_file_name() -> None:
    uuid = "5a3e1f9c-0b2d-4e6f-8a1b-2c3d4e5f6a7b"
    assert file_uuid(f"nccl_inspector_metrics_{uuid}.prom") == uuid
    assert file_uuid(f"nccl_inspector_metrics_{uuid.upper()}.prom") == uuid
    assert nvml_uuid(uuid) == "GPU-" + uuid
    for bad in (f"nccl_inspector_metrics_{uuid}.prom.tmp", "nccl_inspector_metrics_GPU0.prom", "other.prom"):
        assert file_uuid(bad) is None


def test_json_examples() -> None:
    """The README's two JSON objects (indented, as printed) and the same objects one per line, as
    NCCL's writer emits them."""
    plain = (DIR / "readme_json_example.json").read_text()
    verbose = (DIR / "readme_json_verbose_example.json").read_text()
    for text in (plain + verbose, json.dumps(json.loads(plain)) + "\n" + json.dumps(json.loads(verbose)) + "\n"):
        got = parse_json_log(text)
        by_op = {m.operation: m for m in got.measures}
        ar = by_op["AllReduce"]
        assert (ar.comm, ar.node, ar.n_nodes, ar.nranks, ar.message_size) == ("0x7f8c496ae9f661", "example-hostname",
                                                                             1, 8, "16-17GB")
        assert ar.busbw_gbs == pytest.approx(485.119099) and ar.exec_time_us == 61974
        rs = by_op["ReduceScatter"]
        assert rs.message_size == "2-3GB" and rs.busbw_gbs == pytest.approx(366.134533)


def test_json_averages_and_tolerates_the_object_being_written() -> None:
    obj = json.loads((DIR / "readme_json_example.json").read_text())
    lines = []
    for bw in (400.0, 500.0):
        obj["coll_perf"]["coll_busbw_gbs"] = bw
        lines.append(json.dumps(obj))
    nan = json.loads(lines[0])
    nan["coll_perf"]["coll_busbw_gbs"] = "nan"               # NCCL's writer prints a NaN as "nan"
    text = "\n".join(lines + [json.dumps(nan)]) + "\n" + lines[0][:50]      # the last one half-appended
    got = parse_json_log(text)
    assert len(got.measures) == 1 and got.measures[0].busbw_gbs == pytest.approx(450.0)
    # a bounded read of a log's tail starts mid-object: that part is dropped
    got = parse_json_log(lines[0][20:] + "\n" + lines[1] + "\n", tail=True)
    assert got.measures[0].busbw_gbs == pytest.approx(500.0)
    with pytest.raises(ParseError, match="not JSON"):
        parse_json_log("{\"header\": 1}\n]]]\n{}\n")


@pytest.mark.parametrize("text, why", [
    ("nccl_bus_bandwidth_gbs{version=\"v5.1\",slurm_job_id=\"7\",node=\"n\",gpu=\"GPU0\",comm_name=\"c\","
     "n_nodes=\"2\",nranks=\"16\",collective=\"AllRe", "half-written"),
    ("\x7fELF\x02\x01\x01\x00\x00\x00garbage\n", "binary"),
    ("caf\ufffd\n", "binary"),
    ("hello world\nthis is not prometheus\n", "no Inspector metric"),
    ("nccl_bus_bandwidth_gbs{node=\"n\"} 12\n", "no Inspector metric"),
])
def test_hostile_prom(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_prom(text)


def test_bad_lines_skipped_good_ones_kept() -> None:
    good = (DIR / "readme_v5.1_example.prom").read_text()
    text = good + "garbage line\nnccl_bus_bandwidth_gbs{collective=\"x\" 1\nnode_load1 3\n" + \
        good.splitlines()[0].replace("678.263", "banana") + "\n"
    got = parse_prom(text)
    assert len(got.measures) == 2 and got.skipped == 4 and got.first_skipped.startswith("line 5")


def test_empty_file_is_no_measure() -> None:
    """NCCL has just truncated the file (fopen "w"): nothing yet, not an error."""
    assert parse_prom("").measures == []


def test_escaped_label_values_and_nan() -> None:
    line = ('nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="42",node="n1",gpu="GPU3",comm_name="a \\"b\\", c",'
            'n_nodes="4",nranks="32",collective="AllGather",message_size="1-2MB",algo_proto="RING_LL128"} nan\n')
    m = parse_prom(line).measures[0]
    assert m.comm == 'a "b", c' and m.busbw_gbs is None and m.network and m.job == "42"


def test_large_file_is_linear() -> None:
    """A 5 MB file (thousands of communicators) parses in one pass (a bounded read caps it before)."""
    base = (DIR / "readme_v5.1_example.prom").read_text().splitlines()[:2]
    text = "".join(line.replace("DP Group 0", f"comm {i}") + "\n" for i in range(15000) for line in base)
    assert len(text) > 5_000_000
    got = parse_prom(text)
    assert len(got.measures) == 15000
