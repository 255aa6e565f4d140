"""infiniband-diags' node name map (ibnetdiscover(8) "NODE NAME MAP FILE FORMAT")."""

from __future__ import annotations

import pytest

from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.node_name_map import parse_node_name_map


def test_the_man_pages_example_and_its_variants() -> None:
    text = ("# IB1\n# Line cards\n"
            '0x0008f104003f125c "IB1 (Rack 11 slot 1   ) ISR9288/ISR9096 Voltaire sLB-24D"\n'
            "\n   # GUID   Node Name\n"
            '0x0008F10400411A08 "SW1  (Rack  3) ISR9024 Voltaire 9024D"\n'
            '\t0xe09d730300858d88\t"gpu-a01 mlx5_0"   # rack A\n'
            "0x2c5eab0300b87b50 unquoted name # comment\n"
            '2 "decimal"\n'
            '0x0000000000000003 ""\n')
    assert parse_node_name_map(text) == {
        "0008f104003f125c": "IB1 (Rack 11 slot 1   ) ISR9288/ISR9096 Voltaire sLB-24D",
        "0008f10400411a08": "SW1  (Rack  3) ISR9024 Voltaire 9024D",
        "e09d730300858d88": "gpu-a01 mlx5_0",
        "2c5eab0300b87b50": "unquoted name",
        "0000000000000002": "decimal",
    }
    assert parse_node_name_map("") == {} and parse_node_name_map("# only comments\n\n") == {}


@pytest.mark.parametrize("line", ['node01 "x"', '0xZZ "x"', '0x1ffffffffffffffff "x"', "\x00\x01garbage"])
def test_a_line_without_a_guid_refuses_the_map_naming_the_line(line: str) -> None:
    with pytest.raises(ParseError, match=r"^line 2: .* starts with no GUID"):
        parse_node_name_map('0x1 "ok"\n' + line + "\n")
