"""Tests for fabricmon.parsers.nccl_env."""
import pytest

from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_env import NcclHcaSpec, parse_env_file, parse_nccl_ib_hca

ENV_FILE = """\
# NCCL settings for the training job
NCCL_DEBUG=INFO

export NCCL_IB_HCA="=mlx5_0:1,mlx5_3:1"
NCCL_SOCKET_IFNAME='bond0'
  NCCL_IB_GID_INDEX = 3
NCCL_NET_GDR_LEVEL=PXB   # trailing comment
NCCL_TOPO_FILE="/etc/nccl/topo #1.xml"
EMPTY=
QUOTED_ESCAPE="a \\"b\\" c"
not an assignment
1BAD=x
NCCL_DEBUG=WARN
"""


def test_parse_env_file():
    env = parse_env_file(ENV_FILE)
    assert env == {
        "NCCL_DEBUG": "WARN",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_3:1",
        "NCCL_SOCKET_IFNAME": "bond0",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_NET_GDR_LEVEL": "PXB",
        "NCCL_TOPO_FILE": "/etc/nccl/topo #1.xml",
        "EMPTY": "",
        "QUOTED_ESCAPE": 'a "b" c',
    }


def test_parse_env_file_keeps_equals_in_value_and_empty_input():
    assert parse_env_file("A=b=c\n") == {"A": "b=c"}
    assert parse_env_file("") == {}
    assert parse_env_file("# only comments\n\n") == {}


def test_single_quotes_are_literal():
    assert parse_env_file(r"""A='x \" $y'""") == {"A": r'x \" $y'}


def test_hca_prefix_match_default():
    spec = parse_nccl_ib_hca("mlx5_1")
    assert spec == NcclHcaSpec(False, False, (("mlx5_1", None),))
    assert spec.matches("mlx5_1", 1)
    assert spec.matches("mlx5_10", 1)  # the classic prefix trap
    assert not spec.matches("mlx5_2", 1)


def test_hca_exact_match():
    spec = parse_nccl_ib_hca("=mlx5_1")
    assert spec.exact and not spec.exclude
    assert spec.matches("mlx5_1", 1)
    assert not spec.matches("mlx5_10", 1)
    assert not spec.matches("mlx5_", 1)


def test_hca_ports():
    spec = parse_nccl_ib_hca("mlx5_0:1,mlx5_1")
    assert spec.entries == (("mlx5_0", 1), ("mlx5_1", None))
    assert spec.matches("mlx5_0", 1)
    assert not spec.matches("mlx5_0", 2)
    assert spec.matches("mlx5_1", 2)


def test_hca_exclude_and_exclude_exact():
    spec = parse_nccl_ib_hca("^mlx5_8,mlx5_9")
    assert spec.exclude and not spec.exact
    assert not spec.matches("mlx5_8", 1)
    assert spec.matches("mlx5_0", 1)
    spec = parse_nccl_ib_hca("^=mlx5_1:1")
    assert spec.exclude and spec.exact
    assert not spec.matches("mlx5_1", 1)
    assert spec.matches("mlx5_1", 2)
    assert spec.matches("mlx5_10", 1)


def test_hca_connectx8_high_port_numbers():
    spec = parse_nccl_ib_hca("=mlx5_0:3,mlx5_0:6")
    assert spec.matches("mlx5_0", 6)
    assert not spec.matches("mlx5_0", 9)


def test_hca_empty_lists_follow_nccl():
    assert parse_nccl_ib_hca("").matches("mlx5_0", 1)
    assert parse_nccl_ib_hca("=").matches("mlx5_0", 1)
    assert not parse_nccl_ib_hca("^").matches("mlx5_0", 1)


def test_hca_skips_empty_entries_and_keeps_whitespace():
    spec = parse_nccl_ib_hca("mlx5_0,,:1, mlx5_1,")
    assert spec.entries == (("mlx5_0", None), (" mlx5_1", None))
    assert not spec.matches("mlx5_1", 1)  # NCCL does not strip the space


def test_hca_order_is_caret_then_equals():
    spec = parse_nccl_ib_hca("=^mlx5_0")
    assert spec.exact and not spec.exclude
    assert spec.entries == (("^mlx5_0", None),)


@pytest.mark.parametrize("bad", ["mlx5_0:x", "mlx5_0:", "mlx5_0:1:2", "mlx5_0:-1"])
def test_hca_bad_port_raises(bad):
    with pytest.raises(ParseError):
        parse_nccl_ib_hca(bad)
