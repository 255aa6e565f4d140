"""`fabricmon fabric design save` and the design source on the recorded fat tree (tests/fixtures/fabric/
fat-tree, replayed): the design saved in both forms, read back by `fabric once`, matches (loaded, no
finding); a bad design file is one error of the design source naming the file and the line, and
nothing else is lost (docs/design.md)."""

from __future__ import annotations

import shutil

import pytest
import yaml
from helpers import FIXTURES, exposition_samples, sample_value

from fabricmon.cli import main

BUNDLE = FIXTURES / "fabric" / "fat-tree"


def bundle_with(tmp_path, path: str, text: str):
    """A copy of the bundle whose host holds `text` at `path`, configured as the design."""
    dst = tmp_path / "bundle"
    shutil.copytree(BUNDLE, dst)
    (dst / "files" / "host" / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (dst / "files" / "host" / path.lstrip("/")).write_text(text)
    cfg = yaml.safe_load((dst / "config.yml").read_text())
    cfg["fabric"]["sources"] = {"design": {"path": path}}
    (dst / "config.yml").write_text(yaml.safe_dump(cfg))
    return dst


@pytest.mark.parametrize("name", ["design.net", "design.csv"])
def test_saved_design_matches_the_fabric_it_was_saved_from(capsys, tmp_path, name: str) -> None:
    out = tmp_path / name
    assert main(["fabric", "design", "save", str(out), "--replay", str(BUNDLE)]) == 0
    err = capsys.readouterr().err
    fmt = "csv" if name.endswith(".csv") else "ibnetdiscover"
    assert f"wrote the design of 6 switches, 8 host CAs and 24 cables to {out} ({fmt})" in err
    bundle = bundle_with(tmp_path, f"/etc/fabricmon/{name}", out.read_text())
    rc = main(["fabric", "once", "--replay", str(bundle)])
    got = capsys.readouterr()
    samples = exposition_samples(got.out)
    assert rc == sample_value(samples, "fabricmon_health_status") == 2     # the fixture's 1X link: its verdict
    assert sample_value(samples, "fabricmon_fabric_design_loaded") == 1
    assert sample_value(samples, "fabricmon_fabric_design_cables") == 24
    assert sample_value(samples, "fabricmon_fabric_design_discrepancies", kind="miswired") == 0
    assert " design:" not in got.err


def test_a_bad_design_is_one_error_naming_file_and_line(capsys, tmp_path) -> None:
    bad = "start_device,start_port,end_device,end_port\nleaf01,1,node01 mlx5_0,1\nleaf01,one,node02 mlx5_0,1\n"
    bundle = bundle_with(tmp_path, "/etc/fabricmon/design.csv", bad)
    rc = main(["fabric", "once", "--replay", str(bundle), "--log-level", "warning"])
    got = capsys.readouterr()
    samples = exposition_samples(got.out)
    assert rc == sample_value(samples, "fabricmon_health_status") == 2
    assert sample_value(samples, "fabricmon_source_up", source="design") == 0
    assert sample_value(samples, "fabricmon_source_errors_total", source="design", kind="parse") == 1
    assert sample_value(samples, "fabricmon_fabric_design_loaded") == 0
    assert sample_value(samples, "fabricmon_source_up", source="discovery") == 1      # nothing else is lost
    assert sample_value(samples, "fabricmon_source_up", source="sweep") == 1
    assert "/etc/fabricmon/design.csv: line 3: start_port 'one' is not a port number" in got.err + got.out


def test_a_design_larger_than_a_mebibyte_is_read_whole(tmp_path) -> None:
    """A configured host file is read whole (HostIO.read_host_file, up to 64 MiB): a SuperPOD's
    ibnetdiscover design is several MiB."""
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.model.design import DesignData
    from fabricmon.model.snapshot import source_data
    from fabricmon.pipeline.fabric import fabric_pipeline
    rows = [f"switch-{i // 40:05d}-with-a-long-name,{i % 40 + 1},host-{i:06d} mlx5_0 with a long description,1,HDR,4X"
            for i in range(20000)]
    path = tmp_path / "big.csv"
    path.write_text("start_device,start_port,end_device,end_port,speed,width\n" + "\n".join(rows) + "\n")
    assert path.stat().st_size > 1 << 20
    cfg = from_dict({"paths": {"state_dir": str(tmp_path)},
                     "fabric": {"cache_dir": str(tmp_path), "sources": {"design": {"path": str(path)}}}})
    pipe = fabric_pipeline(cfg, LiveIO())
    try:
        pipe.collect(["design"])
        got = source_data(pipe.states, DesignData)
    finally:
        pipe.close()
    assert got is not None and len(got.design.cables) == 20000


def test_a_host_file_over_the_bound_is_an_error_naming_it_not_a_cut_file(tmp_path, monkeypatch) -> None:
    """Over LiveIO.MAX_HOST_FILE (64 MiB; 100 bytes here) the design is not read at all: one read error of the
    design source naming the file and why, never a design cut short (which would read as missing cables)."""
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.model.design import DesignData
    from fabricmon.model.snapshot import source_data
    from fabricmon.pipeline.fabric import fabric_pipeline
    monkeypatch.setattr(LiveIO, "MAX_HOST_FILE", 100)
    path = tmp_path / "big.csv"
    path.write_text("start_device,start_port,end_device,end_port\n" + "leaf01,1,node01 mlx5_0,1\n" * 10)
    cfg = from_dict({"paths": {"state_dir": str(tmp_path)},
                     "fabric": {"cache_dir": str(tmp_path), "sources": {"design": {"path": str(path)}}}})
    pipe = fabric_pipeline(cfg, LiveIO())
    try:
        pipe.collect(["design"])
        errors = sorted(pipe.states["design"].active_errors)
        got = source_data(pipe.states, DesignData)
    finally:
        pipe.close()
    assert got is None
    assert len(errors) == 1 and str(path) in errors[0] and "larger than 0 MiB" in errors[0], errors
