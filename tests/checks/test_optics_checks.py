"""checks.optics on real `ethtool -m` recordings (tests/fixtures/ethtool_module) and faults planted
in them: a low lane, a receiver under the module's own alarm, a dimming lane, no light."""

from __future__ import annotations

from fabricmon.checks import CRITICAL, OK, WARNING
from fabricmon.checks.optics import evaluate
from fabricmon.checks.optics import OpticsCheckConfig
from fabricmon.model.optics import ModuleDiag, OpticsPort, RxBaseline
from fabricmon.parsers.ethtool_module import parse_module
from helpers import FIXTURES

HERE = FIXTURES / "ethtool_module"
CFG = OpticsCheckConfig()
QSFP = (HERE / "qsfp28_sr4_mellanox.txt").read_text()


def port(text: str, up: bool | None = True, peer: str = "") -> OpticsPort:
    return OpticsPort("mlx5_0", 1, "mlx5_0 port 1 (ens1f0np0)", parse_module(text), up=up, peer=peer,
                      key="node:mlx5_0:1")


def by_check(findings):
    return {f.check: f for f in findings}


def rx_line(lane: int, mw: float, dbm: float) -> tuple[str, str]:
    """The recording's receive-power line of `lane`, and the same line planted with a new reading."""
    old = next(ln for ln in QSFP.splitlines() if f"Rcvr signal avg optical power(Channel {lane})" in ln)
    return old, old.split(":")[0] + f": {mw:.4f} mW / {dbm:.2f} dBm"


def test_healthy_recording_is_ok() -> None:
    f, learn = evaluate([port(QSFP)], CFG, RxBaseline())
    assert [x.status for x in f] == [OK] * 3, [x.line() for x in f]
    # no baseline yet: dimming compared nothing, so it has no status (never an OK) while the lanes are learned
    assert "optics_dimming" not in by_check(f)
    assert [lr.lane for lr in learn] == [1, 2, 3, 4], "a healthy up port's lanes are learned"


def test_sfp_recording_reads_its_bias_beyond_its_own_alarm() -> None:
    """The real JDSU SFP reads 21.348 mA of laser bias against its own 10 mA high alarm threshold
    (its flag says Off): readings are judged against the thresholds, not the flags."""
    f, learn = evaluate([port((HERE / "sfp_1000base_sx_jdsu.txt").read_text())], CFG, RxBaseline())
    f = by_check(f)
    t = f["optics_thresholds"]
    assert t.status == CRITICAL
    assert "lane 1 laser bias 21.348 mA is beyond the module's high alarm threshold 10.000 mA" in t.message
    assert "receive power" not in t.message     # -4.96 dBm is well within -16.99/-20
    assert [lr.lane for lr in learn] == [1] and "optics_lane_imbalance" not in f     # one lane: nothing to compare


def test_receiver_under_module_low_alarm_is_critical_naming_lane_reading_threshold_peer() -> None:
    old, new = rx_line(3, 0.0350, -14.56)
    f = by_check(evaluate([port(QSFP.replace(old, new), peer="leaf1 Ethernet1/3")], CFG, None)[0])
    t = f["optics_thresholds"]
    assert t.status == CRITICAL
    assert "lane 3 receive power -14.56 dBm" in t.message
    assert "the module's low alarm threshold -13.31 dBm" in t.message
    assert "leaf1 Ethernet1/3" in t.message
    # under the warning (-10.30) but above the alarm: WARNING
    old, new = rx_line(3, 0.0800, -10.97)
    assert by_check(evaluate([port(QSFP.replace(old, new))], CFG, None)[0])["optics_thresholds"].status == WARNING


def test_one_low_lane_is_a_dirty_connector() -> None:
    old, new = rx_line(2, 0.2951, -5.30)          # 5 dB below its siblings, above every threshold
    f = by_check(evaluate([port(QSFP.replace(old, new))], CFG, None)[0])
    assert f["optics_thresholds"].status == OK
    li = f["optics_lane_imbalance"]
    assert li.status == WARNING and "lane 2 receives -5.30 dBm" in li.message and "dirty" in li.message
    # 3 dB below is within the 4 dB default spread
    old, new = rx_line(2, 0.4898, -3.10)
    assert by_check(evaluate([port(QSFP.replace(old, new))], CFG, None)[0])["optics_lane_imbalance"].status == OK


def test_dimming_from_the_learned_baseline_before_any_threshold() -> None:
    base = RxBaseline()
    _, learn = evaluate([port(QSFP)], CFG, base)
    for lr in learn:
        base.learn(lr.key, lr.lane, lr.serial, lr.rx_dbm, 1_700_000_000.0)
    assert base.get("node:mlx5_0:1", 1, "MT1708FT01255").rx_dbm == -0.12
    # all four lanes fall by 4 dB together: no lane imbalance, no threshold crossed, but dimming
    text = QSFP
    for lane, dbm in ((1, -4.12), (2, -4.09), (3, -3.45), (4, -3.45)):
        old, new = rx_line(lane, 10 ** (dbm / 10), dbm)
        text = text.replace(old, new)
    f, learn = evaluate([port(text)], CFG, base)
    f = by_check(f)
    assert f["optics_thresholds"].status == OK and f["optics_lane_imbalance"].status == OK
    d = f["optics_dimming"]
    assert d.status == WARNING
    assert "lane 1 receives -4.12 dBm, 4.0 dB below its baseline -0.12 dBm" in d.message
    assert not learn, "a dimmed lane never lowers its baseline"
    # a new module (another serial) starts a new baseline: not dimming
    f, _ = evaluate([port(text.replace("MT1708FT01255", "MT2000XX00001"))], CFG, base)
    assert "optics_dimming" not in by_check(f)          # nothing to compare with yet: no status
    # 2 dB down is within the 3 dB default
    old, new = rx_line(1, 10 ** (-2.12 / 10), -2.12)
    assert by_check(evaluate([port(QSFP.replace(old, new))], CFG, base)[0])["optics_dimming"].status == OK


def test_no_light_on_an_up_port_is_impossible_and_says_so() -> None:
    old, new = rx_line(4, 0.0, -40.0)
    f = by_check(evaluate([port(QSFP.replace(old, new))], CFG, None)[0])
    assert f["optics_no_light"].status == WARNING and "lane(s) 4 while the port is up" in f["optics_no_light"].message
    assert f["optics_thresholds"].status == CRITICAL


def test_dark_module_on_a_down_port_and_unused_lanes() -> None:
    dark = (HERE / "qsfp_plus_sr4_finisar_dark.txt").read_text()
    f = by_check(evaluate([port(dark, up=False)], CFG, RxBaseline())[0])
    # every lane's transmitter is off: unused lanes, nothing judged, nothing learned
    assert all(x.status == OK for x in f.values())
    # the recording seen with its transmitters on and no light, port down: the reason, at OK
    lit_tx = dark.replace("0.000 mA", "6.500 mA").replace(
        "Transmit avg optical power (Channel 1)    : 0.0000 mW / -inf dBm",
        "Transmit avg optical power (Channel 1)    : 0.8000 mW / -0.97 dBm")
    f = by_check(evaluate([port(lit_tx, up=False)], CFG, None)[0])
    assert f["optics_no_light"].status == OK and "fibre is cut" in f["optics_no_light"].message
    assert f["optics_thresholds"].status == OK      # a down port's receiver is the link checks' business


def test_no_thresholds_falls_back_to_class_defaults() -> None:
    text = "\n".join(ln for ln in QSFP.splitlines() if "threshold" not in ln)
    old, new = rx_line(1, 0.0400, -13.98)
    f = by_check(evaluate([port(text.replace(old, new))], CFG, None)[0])
    assert f["optics_thresholds"].status == CRITICAL
    assert "fabricmon's default low alarm threshold -13.30 dBm" in f["optics_thresholds"].message


def test_module_without_diagnostics_is_no_data() -> None:
    m = ModuleDiag(module_class="SFP", identifier="0x03 (SFP)")
    assert evaluate([OpticsPort("mlx5_0", 1, "x", m, up=True)], CFG, None) == ([], [])
