"""The node configuration of the pipeline: how the latest records of every node source become
a Snapshot. Records are picked by their type, never by the name of the source that made them:

1. merge the port records (sysfs, ibstat, perfquery, iblinkinfo) into an Inventory;
2. sample every checked counter into the CounterHistory (IB and RoCE alike, one rule);
3. run the checks registered here (inventory, degraded_link and link_errors, roce, optics, gpudirect,
   affinity, kernel_log, nccl, nccl_ras) through the one runner (pipeline.checks), each when its inputs
   are present (checks.node_inputs), on records + deltas;
4. name the jobs running on the node in every WARNING/CRITICAL finding (pipeline.jobs);
5. return the typed Snapshot.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping

import structlog

from fabricmon.model import ibspec
from fabricmon.checks import Finding
from fabricmon.checks import affinity, degraded_link, gpudirect, inventory as inventory_checks, kernel_log, link_errors
from fabricmon.checks import nccl, nccl_ras, roce
from fabricmon.checks import optics as optics_checks
from fabricmon.checks import cable_history, pcie, phy_ber
from fabricmon.checks.inventory import MAX_SEEN_PORTS, InventorySettings, unlisted
from fabricmon.checks.link_errors import CHECKED_COUNTERS
from fabricmon.checks.node_inputs import NodeInputs
from fabricmon.checks.optics import Readings
from fabricmon.checks.shape import counters
from fabricmon.config import Config
from fabricmon.model.ber import BerSection
from fabricmon.model.cable_ledger import CablesSection
from fabricmon.model.pcie import PcieData, PcieSection
from fabricmon.model.gpu import AffinityResult, GpuData, GpudirectStatus
from fabricmon.model.kernel_log import KernelSection
from fabricmon.model.history import CounterHistory, CounterIntake, CounterRule, ib_rule, saturation
from fabricmon.model.nccl import NcclSection, RasData
from fabricmon.model.optics import OpticsData, OpticsPort, OpticsSection
from fabricmon.model.ports import Inventory, PortVerdicts, PortView, merge
from fabricmon.model.roce import NetdevData, RoceView, record_roce_counters, roce_targets
from fabricmon.model.snapshot import (GpuSection, IbSection, RoceSection, Sections, SourceState, Unjudged,
                                      records_present, source_data, source_state)
from fabricmon.pipeline.checks import CheckRunner
from fabricmon.pipeline.jobs import node_jobs
from fabricmon.model.node_records import EthtoolData, HwCountersData, IbstatData, LinkData, MlnxQosData, SysfsData
from fabricmon.pipeline import ber as ber_view
from fabricmon.pipeline import pcie as pcie_view
from fabricmon.stores.cable_ledger import LedgerStore, PortModule, ledger_path, modules as port_modules
from fabricmon.stores.optics_baseline import forget_port
from fabricmon.stores.learned import LearnedStore
from fabricmon.stores.nccl_baseline import NcclBaselineStore, nccl_baseline_path
from fabricmon.stores.optics_baseline import BaselineStore, baseline_path

log = structlog.get_logger("fabricmon.pipeline")

@functools.lru_cache(maxsize=64)
def counters_read(read: frozenset[str]) -> frozenset[str]:
    """What the ports' counters make present (the same every poll of a steady node): ports, each counter
    read, and saturating_counters once one of them saturates."""
    out = {"ports", *counters(read)}
    if not read.isdisjoint(ibspec.SATURABLE):
        out.add("saturating_counters")
    return frozenset(out)


class NodeModel:
    """Builds node snapshots; keeps the counter history between builds, and the node checks (each with its
    settings and state) registered with the one runner."""

    def __init__(self, config: Config, history: CounterHistory | None = None,
                 clock: Callable[[], float] = time.time, learned: LearnedStore | None = None,
                 optics_baseline: BaselineStore | None = None):
        self.config = config
        # The ports seen healthy on this node (in state_dir for the daemon and `check`; in memory
        # otherwise): one that was there and is gone is CRITICAL without any configuration.
        self.learned = learned if learned is not None else LearnedStore()
        # Each lane's learned receive power, kept beside the learned inventory (in memory when it is).
        self.optics_baseline = optics_baseline if optics_baseline is not None else \
            BaselineStore(baseline_path(self.learned.path))
        # Which module (serial) was in which port, and the trouble each had (a moved cable carries it).
        self.cables = LedgerStore(ledger_path(self.learned.path))
        self._modules: list[PortModule] = []
        # Each job's learned NCCL bus bandwidth, kept there too (a restart mid-job keeps the job's baseline).
        self.nccl_baseline = NcclBaselineStore(nccl_baseline_path(self.learned.path))
        self.clock = clock
        self.history = history or CounterHistory(
            horizon=max(*(c.window for c in config.checks.counters.values()), *config.roce.windows(),
                        config.checks.phy_ber.long_window))
        self.intake = CounterIntake(self.history)
        # port -> (its checked counters, their widths, their rules): _rules()
        self._port_rules: dict[tuple[str, int], tuple[tuple[str, ...], dict[str, int], dict[str, CounterRule]]] = {}
        checks = config.checks
        self._inventory = inventory_checks.ExpectedInventory(
            InventorySettings(config.expected_links, config.device_excluded), self.learned)
        self.checks: CheckRunner[NodeInputs, Sections] = CheckRunner([
            self._inventory,
            degraded_link.NodePorts(checks, config.expected_links),
            roce.Roce(config.roce),
            optics_checks.Optics(checks.optics, self.optics_baseline, self._optics, ("OpticsData",)),
            gpudirect.Gpudirect(),
            affinity.Affinity(),
            kernel_log.KernelLog(),
            nccl.NcclSlow(checks.nccl_slow_collective, self.nccl_baseline),
            nccl_ras.NcclRas(),
            phy_ber.PhyBer(checks.phy_ber, self._ber),
            pcie.Pcie(checks.pcie, self._pcie),
            cable_history.CableHistory(self.cables, self._held, ("OpticsData", "MlxlinkData")),
        ], compose)

    @property
    def seen_ports(self) -> dict[tuple[str, int], tuple[str, float]]:
        """Every port seen by a snapshot so far: key -> (link layer, wall-clock time last seen), so that
        expected_inventory can name an adapter that vanished (its state). `check` keeps it in its state."""
        return self._inventory.state.seen_ports

    @staticmethod
    def inventory(states: Mapping[str, SourceState]) -> Inventory:
        """The merge of the latest records (by type); each port's counters named by the source that
        made their record (for the journal and the pages)."""
        inv = merge(s.data for s in states.values() if s.enabled and s.data is not None)
        for p in inv.ports.values():
            if p.counter_record is not None:
                st = source_state(states, p.counter_record)
                p.counter_source = st.name if st is not None else None
        return inv

    def take(self, states: Mapping[str, SourceState]) -> None:
        """An inventory source finished: nothing to take (the node's inventory is a pure merge)."""

    # --- counters -------------------------------------------------------------------
    def _record_ib_counters(self, states: Mapping[str, SourceState], ports: dict[tuple[str, int], PortView],
                            keep: set[tuple[str, int]] | None = None) -> None:
        for key, p in ports.items():
            if not p.counters:
                continue
            src = source_state(states, p.counter_record) if p.counter_record is not None else None
            t = src.data_time if src else self.clock()
            # traffic counters feed no check: keep no history for them (the same sample again is skipped)
            rules = self._rules(p)
            for name in self.intake.take_port(key, t, p.counters, rules, only=CHECKED_COUNTERS, stream="ib"):
                log.info("counter decreased (reset)", device=p.device, port=p.port, counter=name)
        self.intake.prune(set(ports) | (keep or set()))

    def _rules(self, p: PortView) -> dict[str, CounterRule]:
        """The rules of the port's checked counters at their widths, kept while its widths and
        counters stay the same (every poll of a steady port)."""
        names = tuple(n for n in p.counters if n in CHECKED_COUNTERS)
        kept = self._port_rules.get(p.key)
        if kept is not None and kept[0] == names and kept[1] == p.counter_bits:
            return kept[2]
        if len(self._port_rules) > MAX_SEEN_PORTS:
            self._port_rules.clear()
        bits = p.counter_bits
        rules = {n: ib_rule(n, bits.get(n)) for n in names}
        self._port_rules[p.key] = (names, dict(bits), rules)
        return rules

    # --- RoCE and GPU -----------------------------------------------------------------
    @staticmethod
    def _note(st: SourceState | None, kind: str, data: object) -> str:
        if st is None or not st.enabled:
            return f"sources.{st.name if st else kind} is disabled"
        if not st.active or (data is not None and getattr(data, "tool_missing", False)):
            return f"{st.name} is not installed (sources.{st.name}.enabled: auto)"
        if st.active_errors:
            return f"{st.name} failed: {sorted(st.active_errors)[0]}"
        return f"no {st.name} data for this netdev yet"

    def roce_views(self, states: Mapping[str, SourceState], inv: Inventory) -> list[RoceView]:
        qos_st, eth_st = source_state(states, MlnxQosData), source_state(states, EthtoolData)
        qos, eth = source_data(states, MlnxQosData), source_data(states, EthtoolData)
        nd = source_data(states, NetdevData)
        views = []
        for t in roce_targets(inv.devices, inv.ports):
            p = inv.ports.get((t.device, t.port))
            v = RoceView(target=t, hw=dict(p.hw_counters) if p is not None else {})
            if not t.netdev:
                v.qos_note = v.stats_note = "the RoCE port's netdev is unknown (no device/net in sysfs)"
                views.append(v)
                continue
            v.qos = qos.netdevs.get(t.netdev) if qos is not None else None
            if v.qos is None:
                v.qos_note = self._note(qos_st, "mlnx_qos", qos)
            v.stats = eth.netdevs.get(t.netdev) if eth is not None else None
            if v.stats is None:
                v.stats_note = self._note(eth_st, "ethtool", eth)
            v.netdev = nd.netdevs.get(t.netdev) if nd is not None else None
            views.append(v)
        return views

    # --- optics -------------------------------------------------------------------------
    def _optics(self, inputs: NodeInputs) -> Readings | None:
        """The modules `ethtool -m` read, joined to the ports: what checks.optics judges (the same logic as
        the switches'), and the optics section."""
        states, ports = inputs.states, inputs.ib.ports
        data = source_data(states, OpticsData)
        if data is None:
            return None
        mods = sorted(data.modules.values(), key=lambda m: (m.device, m.port, m.netdev))
        links = source_data(states, LinkData)
        judged, seen = [], set()
        for m in mods:
            if m.module is None or not m.module.has_readings or self.config.device_excluded(m.device):
                continue
            if (m.device, m.port) in seen:      # one finding per port and check: the first netdev's module
                continue
            seen.add((m.device, m.port))
            p = ports.get((m.device, m.port))
            up = p.up if p is not None and p.state_id is not None else None
            ln = links.links.get((m.device, m.port)) if links is not None else None     # the switch port opposite (IB)
            peer = f"{ln.remote_desc} port {ln.remote_port}".strip() if ln is not None and ln.remote_desc else ""
            judged.append(OpticsPort(m.device, m.port, f"{m.device} port {m.port} ({m.netdev})", m.module, up=up,
                                     peer=peer, key=f"node:{m.device}:{m.port}:{m.netdev}"))
        return Readings(judged, inputs.now, OpticsSection(mods))

    # --- physical-layer BER ----------------------------------------------------------------
    def _ber(self, inputs: NodeInputs) -> phy_ber.BerInputs | None:
        """The ports whose physical counters a source read (joined and sampled into the history by the build)."""
        if not inputs.ber:
            return None
        return phy_ber.BerInputs(inputs.ber, inputs.history, inputs.now)

    def _held(self, inputs: NodeInputs) -> list[cable_history.Held]:
        """The ports' modules observed this build (stores.cable_ledger), for cable_history."""
        return [cable_history.Held(m.key, m.label, m.device, m.port, m.serial, m.vendor, m.part_number)
                for m in self._modules if not self.config.device_excluded(m.device)]

    @staticmethod
    def _pcie(inputs: NodeInputs) -> pcie.PcieInputs | None:
        """The PCIe functions the pcie source read, a GPU named GPU<n> where NVML gives its bus id, and each
        port's data rate (what a narrow link caps)."""
        data = source_data(inputs.states, PcieData)
        if data is None:
            return None
        names = {g.bus_id.lower(): f"GPU{g.index}" for g in (inputs.gpus.gpus if inputs.gpus is not None else [])}
        devices = []
        for addr, d in sorted(data.devices.items()):
            if d.kind == "gpu" and addr in names:
                d = dataclasses.replace(d, name=names[addr])
            devices.append(d)
        rates = {k: p.rate_gbps for k, p in inputs.ib.ports.items() if p.rate_gbps and p.up}
        st = source_state(inputs.states, PcieData)
        key = (id(data), st.data_time if st is not None else 0.0, tuple(sorted(rates.items())), tuple(sorted(names.items())))
        return pcie.PcieInputs(devices, rates, inputs.history, inputs.now, key)

    def _where(self, states: Mapping[str, SourceState]) -> str:
        """Where the port inventory was looked for, for the UNKNOWN line."""
        where = [f"{self.config.sysfs.rstrip('/')}/class/infiniband"]
        st = source_state(states, IbstatData)
        if st is not None and st.enabled and st.active:
            where.append("ibstat")
        return ", ".join(where)

    # --- the build ----------------------------------------------------------------------
    def build(self, states: Mapping[str, SourceState], inventory_ran: tuple[bool, bool] = (True, True)
              ) -> tuple[Sections, list[Finding]]:
        """The snapshot sections (keyword arguments of Snapshot) and the findings.

        `inventory_ran`: (every, any) active inventory source has answered. The inventory is
        known when all have, or when one has and ports were found; until then a port is not
        called missing (expected_inventory says it is waiting)."""
        now = self.clock()
        inv = self.inventory(states)
        ib = IbSection(devices=dict(sorted(inv.devices.items())), ports=dict(sorted(inv.ports.items())))
        ib.saturation = {key: saturation(p.counters, p.counter_bits) for key, p in ib.ports.items()}
        self._record_ib_counters(states, ib.ports, pcie_view.keys(states))
        pcie_view.record(states, self.intake)
        inventory_known = inventory_ran[0] or (inventory_ran[1] and bool(ib.ports))
        views = self.roce_views(states, inv)
        eth_st, hw_st = source_state(states, EthtoolData), source_state(states, HwCountersData)
        record_roce_counters(views, self.intake,
                             eth_st.data_time if eth_st is not None and eth_st.data is not None else None,
                             hw_st.data_time if hw_st is not None and hw_st.data is not None else None)
        self._modules = port_modules(states)
        for change in self.cables.observe(self._modules, now):        # a new module: its light is learned again
            forget_port(self.optics_baseline, change.port + ":")
            log.info("module changed", port=change.port, change=change.kind, serial=change.serial, before=change.before)
        ber_ports = [p for p in ber_view.ber_ports(states, inv) if not self.config.device_excluded(p.device)]
        ber_view.record(ber_ports, states, self.intake, now)
        gpus = source_data(states, GpuData)
        out: Sections = {"ib": ib, "roce": RoceSection(views), "gpu": GpuSection(gpus=gpus),
                         "inventory_known": inventory_known, "unknown": "", "optics": None, "kernel": None,
                         "nccl": None, "ras": source_data(states, RasData), "ber": None, "pcie": None, "cables": None}
        inputs = NodeInputs(states, inv, ib, self.history, now, inventory_known, self._where(states), views, gpus, out,
                            ber_ports)
        findings = self.checks.run(inputs, self.present(states, ib, views), out).findings
        self.cables.troubles(findings, self._modules, now)          # what the module in each port carries on
        out["jobs"], findings = node_jobs(states, findings)
        return out, findings

    @staticmethod
    def present(states: Mapping[str, SourceState], ib: IbSection, views: list[RoceView]) -> set[str]:
        """What the node checks may run on (checks.node_inputs): the records the sources yielded, the
        ports, the counters they read, the RoCE ports, the devices whose counters sysfs does not read."""
        present = records_present(states)
        if ib.ports:
            present |= counters_read(frozenset().union(*(p.counters for p in ib.ports.values())))
        if views:
            present.add("roce")
        sysfs = source_data(states, SysfsData)
        if sysfs is not None and sysfs.restricted:
            present.add("restricted_counters")
        return present

def compose(out: Sections, derived: object) -> None:
    """The node's one composer (pipeline.checks): a check's derived sub-section into the sections being built,
    by its type; a type it does not know is a bug, never dropped."""
    if isinstance(derived, PortVerdicts):
        out["ib"].verdicts.update(derived.verdicts)
    elif isinstance(derived, AffinityResult):
        out["gpu"].affinity = derived
    elif isinstance(derived, GpudirectStatus):
        out["gpu"].gpudirect = derived
    elif isinstance(derived, Unjudged):
        out["unknown"] = derived.reason
    elif isinstance(derived, KernelSection):
        out["kernel"] = derived
    elif isinstance(derived, NcclSection):
        out["nccl"] = derived
    elif isinstance(derived, OpticsSection):
        out["optics"] = derived
    elif isinstance(derived, BerSection):
        out["ber"] = derived
    elif isinstance(derived, PcieSection):
        out["pcie"] = derived
    elif isinstance(derived, CablesSection):
        out["cables"] = derived
    else:
        raise TypeError(f"the node composes no {type(derived).__name__}")


__all__ = ["NodeModel", "CHECKED_COUNTERS", "compose", "unlisted"]
