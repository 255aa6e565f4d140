"""The NIC's own PCIe link, and the GPUs': two checks on model.pcie records (docs/pcie.md).

- `pcie_link`: a function that trained below what it and its slot support (a ConnectX-7 at Gen4, or at
  x8: the port capped at half its line rate while every InfiniBand counter reads clean) is CRITICAL
  (`checks.pcie.link_severity`), naming the device, the link it has, the one it should have and the port
  it caps (its PCIe bandwidth against the port's data rate); a device whose slot supports less than the
  device (a Gen5 adapter in a Gen4 slot) is a WARNING (`slot_severity`). A GPU is judged by its width
  only: NVIDIA GPUs lower their PCIe speed when idle, so a GPU's speed below its maximum is no fault.
- `pcie_aer`: the AER counters of the function and of the port above it (an endpoint's errors may be
  counted at its link partner): a fatal error this boot is CRITICAL; a non-fatal one within
  `nonfatal_window` (or counted before the first sample: when is unknown) a WARNING; correctable errors
  rising by `correctable_warning` within `correctable_window` a WARNING, rising less counted in the OK.

Not judged (no status): a link whose current speed or width sysfs does not say (down, no PCIe capability),
a function without AER statistics, correctable errors counted before the first sample (a rate needs two).
The AER totals are sampled into the node's counter history by the model (pipeline.pcie), so `fabricmon
check` keeps them between runs in its state file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.checks.shape import Outcome, Report, judged_in, report
from fabricmon.model.history import CounterHistory
from fabricmon.model.pcie import AER_SEVERITIES, AerCounts, PcieDevice, PcieLink, PcieSection, capable
from fabricmon.schema import Schema, choice, integer, number

LINK, AER = "pcie_link", "pcie_aer"
CHECKS = (LINK, AER)
_SEV = {"ok": OK, "warning": WARNING, "critical": CRITICAL}


@dataclass(frozen=True, slots=True)
class PcieCheckConfig:
    """checks.pcie (docs/pcie.md)."""
    link_severity: int = CRITICAL
    slot_severity: int = WARNING
    correctable_window: float = 3600.0
    correctable_warning: int = 10
    nonfatal_window: float = 86400.0


_D = PcieCheckConfig()
SCHEMA: Schema[PcieCheckConfig] = Schema(fields=(
    choice("link_severity", _D.link_severity, "a function that trained below what it and its slot support", _SEV),
    choice("slot_severity", _D.slot_severity, "a function whose slot supports less than the function (it cannot reach "
           "its own maximum there)", _SEV),
    number("correctable_window", _D.correctable_window, "seconds over which correctable AER errors are counted", lo=60),
    integer("correctable_warning", _D.correctable_warning, "correctable AER errors within the window that are a "
            "WARNING (a marginal link retries TLPs: RxErr, BadTLP, BadDLLP)", lo=1),
    number("nonfatal_window", _D.nonfatal_window, "seconds within which a non-fatal AER error is a WARNING", lo=60),
), build=lambda v, key, ctx: PcieCheckConfig(**v))


@dataclass(frozen=True, slots=True)
class PcieInputs:
    """What the checks judge, as the model joined it: the functions (a GPU named GPU<n> where NVML says which),
    each NIC port's data rate (the port it caps), the counter history holding the AER totals (sampled by the
    model: pipeline.pcie), and the time."""
    devices: Sequence[PcieDevice]
    port_rates: Mapping[tuple[str, int], float]
    history: CounterHistory
    now: float
    # what the verdicts depend on beyond the history (the records' identity, the rates, the GPU names): the same
    # key as the last run reuses its outcome (the AER totals enter the history only with new records)
    key: object = None


def expected(dev: PcieDevice) -> PcieLink:
    """What the function should have trained at: the lesser of its own and its slot's maximum."""
    return capable(dev.maximum, dev.slot)


def _caps(dev: PcieDevice, port_rates: Mapping[tuple[str, int], float]) -> str:
    bw = dev.current.gbps
    if bw is None:
        return ""
    capped = [f"port {p} ({rate:g} Gb/s)" for p in dev.ports if (rate := port_rates.get((dev.name, p), 0.0)) > bw]
    if not capped:
        return ""
    return f": it caps {', '.join(capped)} at {bw:.0f} Gb/s"


def link(dev: PcieDevice, cfg: PcieCheckConfig, port_rates: Mapping[tuple[str, int], float]) -> Finding | None:
    if not dev.current.known or not dev.maximum.known:
        return None
    want = expected(dev)
    slow, narrow = dev.current.below(want)
    where = f"{dev.name} ({dev.address})" if dev.name != dev.address else dev.address
    port = dev.ports[0] if len(dev.ports) == 1 else None
    if dev.kind == "gpu":
        slow = False            # a GPU lowers its PCIe speed when idle: only its width is judged
    if slow or narrow:
        what = " and ".join(w for w, on in (("slower", slow), ("narrower", narrow)) if on)
        slot = f" and its slot ({dev.slot_address}: {dev.slot.text()})" if dev.slot is not None else ""
        return Finding(LINK, dev.name, port, cfg.link_severity,
                       f"{where} trained at {dev.current.text()}, {what} than the {want.text()} it{slot} support"
                       f"{_caps(dev, port_rates)}: reseat the {'GPU' if dev.kind == 'gpu' else 'adapter'}, check the "
                       f"slot, riser or cable and the BIOS link-speed setting (the kernel logs it as \"available "
                       f"PCIe bandwidth, limited by\")")
    cs, cn = want.below(dev.maximum)
    if (cs or cn) and dev.slot is not None:
        return Finding(LINK, dev.name, port, cfg.slot_severity,
                       f"{where} supports {dev.maximum.text()} but its slot ({dev.slot_address}) only "
                       f"{dev.slot.text()}: it runs at {dev.current.text()}{_caps(dev, port_rates)}: move it to a "
                       f"slot that supports its link")
    note = "; its speed is not judged (a GPU lowers it when idle)" if dev.kind == "gpu" and \
        dev.current.gts != want.gts else ""
    return Finding(LINK, dev.name, port, OK, f"{where} runs at {dev.current.text()}, what it and its slot support"
                   + note)


def _top(counts: Mapping[str, AerCounts], severity: str, slot: Mapping[str, AerCounts]) -> str:
    names: dict[str, int] = {}
    for src in (counts, slot):
        c = src.get(severity)
        if c is not None:
            for k, v in c.errors.items():
                if v:
                    names[k] = names.get(k, 0) + v
    top = sorted(names.items(), key=lambda kv: -kv[1])[:3]
    return f" ({', '.join(f'{k} {v}' for k, v in top)})" if top else ""


def aer_key(address: str, severity: str) -> tuple[str, int, str]:
    """Where the model keeps a function's AER total of one severity in the counter history."""
    return (f"pcie:{address}", 0, f"aer:{severity}")


def totals(dev: PcieDevice) -> dict[str, int | None]:
    """Per severity, the function's and its slot's counts together (None: neither has AER statistics)."""
    out: dict[str, int | None] = {}
    for severity in AER_SEVERITIES:
        a, b = dev.aer.get(severity), dev.slot_aer.get(severity)
        out[severity] = None if a is None and b is None else \
            ((a.total or 0) if a is not None else 0) + ((b.total or 0) if b is not None else 0)
    return out


def aer(dev: PcieDevice, cfg: PcieCheckConfig, history: CounterHistory, now: float) -> Finding | None:
    count = totals(dev)
    if all(v is None for v in count.values()):
        return None
    where = f"{dev.name} ({dev.address})" if dev.name != dev.address else dev.address
    port = dev.ports[0] if len(dev.ports) == 1 else None
    seen = f" (with the port above it, {dev.slot_address})" if dev.slot_aer else ""
    fatal = count["fatal"]
    if fatal:
        return Finding(AER, dev.name, port, CRITICAL,
                       f"{where}: {fatal} fatal PCIe error(s) this boot{seen}{_top(dev.aer, 'fatal', dev.slot_aer)}: "
                       "the link was reset under the driver; reseat or replace the device, check the slot and riser, "
                       "and its firmware")
    nonfatal = count["nonfatal"]
    if nonfatal:
        inc, covered = history.increase(aer_key(dev.address, "nonfatal"), cfg.nonfatal_window, now)
        if inc or not covered:
            when = (f"rose by {inc} in the last {covered / 3600:.1f} h" if covered
                    else f"{nonfatal} this boot (when is unknown)")
            return Finding(AER, dev.name, port, WARNING,
                           f"{where}: non-fatal PCIe errors {when}{seen}{_top(dev.aer, 'nonfatal', dev.slot_aer)}: "
                           "transactions were lost and retried by the driver; reseat the device, check the slot")
    cor = count["correctable"]
    if cor is None:
        return Finding(AER, dev.name, port, OK, f"{where}: no uncorrectable PCIe error this boot")
    inc, covered = history.increase(aer_key(dev.address, "correctable"), cfg.correctable_window, now)
    if not covered:
        if cor:
            return None         # counted before the first sample: when is unknown, a rate needs two samples
        return Finding(AER, dev.name, port, OK, f"{where}: no PCIe error since boot{seen}")
    if inc >= cfg.correctable_warning:
        return Finding(AER, dev.name, port, WARNING,
                       f"{where}: correctable PCIe errors rose by {inc} in the last {covered / 60:.0f} min (threshold "
                       f"{cfg.correctable_warning}){seen}{_top(dev.aer, 'correctable', dev.slot_aer)}: the link "
                       "retries TLPs (a marginal slot, riser or signal); reseat the device before it fails uncorrectably")
    return Finding(AER, dev.name, port, OK,
                   f"{where}: {inc} correctable PCIe error(s) in the last {covered / 60:.0f} min ({cor} since boot)"
                   f"{seen}")


class Pcie:
    """Both checks (checks.shape); state: the last outcome and its inputs' key (a build whose pcie records did not
    change reuses it: a daemon rebuilds whenever any source completes). The AER totals are the model's history."""

    def __init__(self, settings: PcieCheckConfig, select: Callable[[Any], PcieInputs | None]):
        self.settings = settings
        self.select = select
        self.state: dict[str, tuple[object, Outcome]] = {}
        self.reports: tuple[Report, ...] = tuple(report(c, "PcieData") for c in CHECKS)

    def run(self, inputs: Any) -> Outcome:
        sel = self.select(inputs)
        if sel is None:
            return Outcome((), ())
        last = self.state.get("last")
        if sel.key is not None and last is not None and last[0] == sel.key:
            return last[1]
        findings: list[Finding] = []
        section = PcieSection(list(sel.devices))
        for dev in sel.devices:
            section.expected[dev.address] = expected(dev)
            for f in (link(dev, self.settings, sel.port_rates), aer(dev, self.settings, sel.history, sel.now)):
                if f is not None:
                    findings.append(f)
        out = Outcome(findings, judged_in(findings), section)
        if sel.key is not None:
            self.state["last"] = (sel.key, out)
        return out


__all__ = ["AER", "CHECKS", "LINK", "SCHEMA", "Pcie", "PcieCheckConfig", "PcieInputs", "aer", "aer_key", "expected", "link",
           "totals"]
