"""True sharding on the simulated fabric: each shard's collector queries only its own switches.

`fabricmon fabric capture --shard i/2` records every command it runs (argv and output) against ibsim; the
recorded sweep commands say which switches each shard asked for, so the split is asserted from what was
run, not only from what was exported."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from fabricmon.model.fabric import in_shard
from fabricmon.sim.fabric import fat_tree_netfile

pytestmark = pytest.mark.sim


def sweep_queries(bundle) -> tuple[Counter, list[list[str]]]:
    """Per-switch ibqueryerrors invocations of the bundle's sweep, and any sweep command without -G."""
    per_switch, whole = Counter(), []
    for c in json.loads((bundle / "bundle.json").read_text())["commands"]:
        argv = c["argv"]
        if argv[0] != "ibqueryerrors":
            continue
        if "-G" in argv:
            per_switch[argv[argv.index("-G") + 1].removeprefix("0x")] += 1
        else:
            whole.append(argv)
    return per_switch, whole


def test_two_shards_query_disjoint_switch_sets_whose_union_is_the_fabric(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2))
    fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 7)
    (tmp_path / "state").mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")}}))
    switches: set[str] = set()
    queried: dict[int, Counter] = {}
    for i in range(2):
        bundle = tmp_path / f"shard{i}"
        r = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "capture", "--config", str(cfg),
                            "--shard", f"{i}/2", str(bundle)], env=fab.env(fab.hosts[0]),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        metrics = (bundle / "metrics.prom").read_text()
        switches |= set(re.findall(r'^fabricmon_fabric_switch_info\{[^}]*switch_guid="(\w+)"', metrics, re.M))
        per_switch, whole = sweep_queries(bundle)
        assert not whole, f"shard {i} swept the whole fabric: {whole}"
        # both passes (counters, errors) for each of its own switches, nothing for any other
        assert set(per_switch.values()) == {2}, per_switch
        assert all(in_shard(g, i, 2) for g in per_switch), per_switch
        queried[i] = per_switch
        # and what it exports are its own switches' counters, read this sweep
        exported = set(re.findall(r'^fabricmon_fabric_port_transmit_bytes_total\{[^}]*switch_guid="(\w+)"',
                                  metrics, re.M))
        assert exported == set(per_switch), (exported, set(per_switch))
        if "0000000000200002" in per_switch:        # leaf01's injected symbol errors reach its shard
            assert re.search(r'fabricmon_fabric_port_symbol_errors_total\{port="3",'
                             r'switch_guid="0000000000200002"\} 7', metrics)
    assert len(switches) == 6
    assert not set(queried[0]) & set(queried[1])
    assert set(queried[0]) | set(queried[1]) == switches
    assert queried[0] and queried[1]
