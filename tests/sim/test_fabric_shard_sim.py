"""True sharding on the simulated fabric: each shard's collector queries only its own switches.

`fabricmon fabric capture --shard i/2` (the tools' sweep) records every command it runs (argv and output) against ibsim; the
recorded sweep commands (perfquery by LID; the LIDs are mapped to switch GUIDs with the recorded discovery)
say which switches each shard asked for, so the split is asserted from what was run, not only from what was
exported."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from fabricmon.model.fabric import in_shard
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.sim.fabric import fat_tree_netfile

pytestmark = pytest.mark.sim


def sweep_queries(bundle) -> tuple[Counter, list[list[str]], Counter]:
    """Per-switch counter reads of the bundle's sweep (`perfquery -x -l <lid> 255` and the `perfquery -a <lid>`
    aggregate, by switch GUID), any whole-fabric sweep command (ibqueryerrors), and the per-port error
    drill-downs (`perfquery -l <lid> 255`) by switch GUID."""
    commands = json.loads((bundle / "bundle.json").read_text())["commands"]
    disc = next(c for c in commands if c["argv"][0] == "ibnetdiscover")
    by_lid = {sw.lid: g for g, sw in parse_ibnetdiscover(disc["stdout"]).switches.items()}
    per_switch, whole, drill = Counter(), [], Counter()
    for c in commands:
        argv = c["argv"]
        if argv[0] == "ibqueryerrors":
            whole.append(argv)
        elif argv[0] == "perfquery":
            lid = int(argv[argv.index("255") - 1] if argv[-1] == "255" else argv[-1])
            if "-x" in argv or "-a" in argv:
                per_switch[by_lid[lid]] += 1
            else:
                drill[by_lid[lid]] += 1
    return per_switch, whole, drill


def port_series(metrics: str) -> set:
    """(metric, switch_guid, port) of every per-port counter series, with the value for error counters
    (traffic counters move between two captures)."""
    keys = set()
    for m in re.finditer(r'^(fabricmon_fabric_port_\w+_total)\{port="(\d+)",switch_guid="(\w+)"\} (\S+)$',
                         metrics, re.M):
        traffic = any(w in m[1] for w in ("_bytes_", "_packets_"))
        keys.add((m[1], m[3], int(m[2]), None if traffic else m[4]))
    return keys


def test_two_shards_query_disjoint_switch_sets_whose_union_is_the_fabric(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2))
    fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 7)
    fab.set_counter("spine01", 2, "PortCounters.PortXmitWait", 1000)
    (tmp_path / "state").mkdir()
    cfg = tmp_path / "fabricmon.yml"
    # the tools' path (the MAD engine's exchanges are recorded per request: test_mad_sweep_sim.py)
    cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")}, "fabric": {"sweep_method": "tools"}}))
    switches: set[str] = set()
    queried: dict[int, Counter] = {}
    series: dict[str, set] = {"whole": set(), "shards": set()}
    for i in (0, 1, None):
        if i is None:           # the unsharded sweep (two whole-fabric ibqueryerrors passes), to compare with
            r = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "capture", "--config", str(cfg),
                                str(tmp_path / "whole")], env=fab.env(fab.hosts[0]),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            series["whole"] = port_series((tmp_path / "whole" / "metrics.prom").read_text())
            break
        bundle = tmp_path / f"shard{i}"
        r = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "capture", "--config", str(cfg),
                            "--shard", f"{i}/2", str(bundle)], env=fab.env(fab.hosts[0]),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        metrics = (bundle / "metrics.prom").read_text()
        series["shards"] |= port_series(metrics)
        switches |= set(re.findall(r'^fabricmon_fabric_switch_info\{[^}]*switch_guid="(\w+)"', metrics, re.M))
        per_switch, whole, drill = sweep_queries(bundle)
        assert not whole, f"shard {i} swept the whole fabric: {whole}"
        # both reads (counters, error aggregate) for each of its own switches, nothing for any other
        assert set(per_switch.values()) == {2}, per_switch
        assert all(in_shard(g, i, 2) for g in per_switch), per_switch
        # per-port error counters only where the aggregate is non-zero (leaf01's injected errors)
        assert set(drill) <= {"0000000000200002", "0000000000200000"} and set(drill) <= set(per_switch), drill
        queried[i] = per_switch
        # and what it exports are its own switches' counters, read this sweep
        exported = set(re.findall(r'^fabricmon_fabric_port_transmit_bytes_total\{[^}]*switch_guid="(\w+)"',
                                  metrics, re.M))
        assert exported == set(per_switch), (exported, set(per_switch))
        if "0000000000200002" in per_switch:        # leaf01's injected symbol errors reach its shard
            assert drill["0000000000200002"] == 1, drill
            assert re.search(r'fabricmon_fabric_port_symbol_errors_total\{port="3",'
                             r'switch_guid="0000000000200002"\} 7', metrics)
    assert len(switches) == 6
    # the same counters per (switch, port) as the unsharded sweep, and the same error values
    assert ("fabricmon_fabric_port_transmit_wait_total", "0000000000200000", 2, "1000.0") in series["whole"]
    assert series["shards"] == series["whole"], series["shards"] ^ series["whole"]
    assert not set(queried[0]) & set(queried[1])
    assert set(queried[0]) | set(queried[1]) == switches
    assert queried[0] and queried[1]
