"""The PCIe functions' AER totals sampled into the node's counter history (kept between `fabricmon check`
runs with the rest of it), under (`pcie:<address>`, 0, `aer:<severity>`), for checks.pcie's rates."""

from __future__ import annotations

from collections.abc import Mapping

from fabricmon.checks.pcie import aer_key, totals
from fabricmon.model.history import CounterIntake
from fabricmon.model.pcie import PcieData
from fabricmon.model.snapshot import SourceState, source_data, source_state


def keys(states: Mapping[str, SourceState]) -> set[tuple[str, int]]:
    """The history's port keys of the functions the pcie source read (kept when the ports are pruned)."""
    data = source_data(states, PcieData)
    return {(aer_key(a, "")[0], 0) for a in data.devices} if data is not None else set()


def record(states: Mapping[str, SourceState], intake: CounterIntake) -> None:
    data = source_data(states, PcieData)
    st = source_state(states, PcieData)
    if data is None or st is None:
        return
    for addr, dev in data.devices.items():
        values = {aer_key(addr, s)[2]: v for s, v in totals(dev).items() if v is not None}
        if values:
            intake.take_port((aer_key(addr, "")[0], 0), st.data_time, values, {}, stream="pcie")


__all__ = ["keys", "record"]
