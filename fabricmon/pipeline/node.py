"""The node configuration of the pipeline: how the latest records of every node source become
a Snapshot. Records are picked by their type, never by the name of the source that made them:

1. merge the port records (sysfs, ibstat, perfquery, iblinkinfo) into an Inventory;
2. sample every checked counter into the CounterHistory (IB and RoCE alike, one rule);
3. run the checks (degraded_link, link_errors, roce, optics, gpudirect, affinity) on records + deltas;
4. name the jobs running on the node in every WARNING/CRITICAL finding (pipeline.jobs);
5. return the typed Snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import structlog

from fabricmon.checks import Finding
from fabricmon.checks import affinity as affinity_checks
from fabricmon.checks import degraded_link, inventory as inventory_checks, link_errors
from fabricmon.checks import gpudirect as gpudirect_checks
from fabricmon.checks import kernel_log as kernel_log_checks
from fabricmon.checks import nccl as nccl_checks
from fabricmon.checks import nccl_ras as nccl_ras_checks
from fabricmon.checks import optics as optics_checks
from fabricmon.checks import roce as roce_checks
from fabricmon.config import Config
from fabricmon.checks.settings import COUNTER_CHECKS
from fabricmon.model.gpu import GpuData, GpudirectFacts
from fabricmon.model.history import CounterHistory, CounterIntake, CounterRule, ib_rule
from fabricmon.model.kernel_log import KernelLogData, KernelSection
from fabricmon.model.nccl import NcclData, NcclSection, RasData
from fabricmon.model.nccl import join as nccl_join
from fabricmon.model.optics import OpticsData, OpticsPort, OpticsSection
from fabricmon.model.ports import DeviceView, Inventory, PortView, merge
from fabricmon.model.roce import NetdevData, RoceView, record_roce_counters, roce_targets
from fabricmon.model.snapshot import (GpuSection, IbSection, RoceSection, Sections, SourceState, source_data,
                                      source_state)
from fabricmon.pipeline.jobs import node_jobs
from fabricmon.model.node_records import EthtoolData, HwCountersData, IbstatData, LinkData, MlnxQosData, SysfsData
from fabricmon.pipeline.learned import LearnedStore
from fabricmon.pipeline.nccl_baseline import NcclBaselineStore, nccl_baseline_path
from fabricmon.pipeline.optics_baseline import BaselineStore, baseline_path

log = structlog.get_logger("fabricmon.pipeline")

MAX_SEEN_PORTS = 1024
CHECKED_COUNTERS = frozenset(c for counters, *_ in COUNTER_CHECKS.values() for c in counters)


def unlisted(states: Mapping[str, SourceState]) -> list[str]:
    """The inventory sources in use (sysfs, ibstat) whose last run gave no port list (failed or
    not run yet): while there is one, a port missing from the inventory may only be unread."""
    listed = [s for s in (source_state(states, SysfsData), source_state(states, IbstatData))
              if s is not None and s.enabled and s.active]
    return [s.name for s in listed if s.data is None] if listed else ["sysfs"]


class NodeModel:
    """Builds node snapshots; keeps the counter history between builds."""

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
        # Each job's learned NCCL bus bandwidth, kept there too (a restart mid-job keeps the job's baseline).
        self.nccl_baseline = NcclBaselineStore(nccl_baseline_path(self.learned.path))
        self.clock = clock
        self.history = history or CounterHistory(
            horizon=max(*(c.window for c in config.checks.counters.values()), *config.roce.windows()))
        self.intake = CounterIntake(self.history)
        # Every port seen by a snapshot so far: key -> (link layer, wall-clock time last seen), so
        # that expected_inventory can name an adapter that vanished. `check` keeps it in its state.
        self.seen_ports: dict[tuple[str, int], tuple[str, float]] = {}
        # port -> (its checked counters, their widths, their rules): _rules()
        self._port_rules: dict[tuple[str, int], tuple[tuple[str, ...], dict[str, int], dict[str, CounterRule]]] = {}

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

    # --- counters -------------------------------------------------------------------
    def _record_ib_counters(self, states: Mapping[str, SourceState], ports: dict[tuple[str, int], PortView]) -> None:
        for key, p in ports.items():
            if not p.counters:
                continue
            src = source_state(states, p.counter_record) if p.counter_record is not None else None
            t = src.data_time if src else self.clock()
            # traffic counters feed no check: keep no history for them (the same sample again is skipped)
            rules = self._rules(p)
            for name in self.intake.take_port(key, t, p.counters, rules, only=CHECKED_COUNTERS, stream="ib"):
                log.info("counter decreased (reset)", device=p.device, port=p.port, counter=name)
        self.intake.prune(set(ports))

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

    @staticmethod
    def nics(devices: Mapping[str, DeviceView], ports: Mapping[tuple[str, int], PortView]
             ) -> dict[str, affinity_checks.NicInfo]:
        out = {}
        for name, d in sorted(devices.items()):
            mine = [p for (dev, _), p in ports.items() if dev == name]
            known = [p for p in mine if p.state_id is not None]
            usable = not known or any(p.up for p in known)
            out[name] = affinity_checks.NicInfo(
                device=name, pci_path=d.pci_path, pci_chain=d.pci_chain, numa_node=d.numa_node,
                usable=usable, ports=tuple(sorted(p.port for p in mine)) or (1,))
        return out

    # --- optics -------------------------------------------------------------------------
    def _optics(self, states: Mapping[str, SourceState], ports: Mapping[tuple[str, int], PortView],
                now: float) -> tuple[OpticsSection | None, list[Finding]]:
        """The modules `ethtool -m` read, judged by checks.optics (the same logic as the switches')."""
        data = source_data(states, OpticsData)
        if data is None:
            return None, []
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
        findings, learn = optics_checks.evaluate(judged, self.config.checks.optics, self.optics_baseline.baseline)
        self.optics_baseline.learn(learn, now)
        return OpticsSection(mods), findings

    # --- the learned inventory ------------------------------------------------------------
    def _learned(self, states: Mapping[str, SourceState], inv: Inventory,
                 ports: Mapping[tuple[str, int], PortView], now: float) -> list[Finding]:
        """Judge the learned ports against this inventory, then learn its healthy ports. A port is
        called gone only when every inventory source in use answered with a port list: a source
        that failed (a WARNING of its own) cannot tell that an adapter vanished."""
        self.learned.refresh()
        out = []
        if not unlisted(states):
            out = inventory_checks.evaluate_learned(self.learned.inventory.gone(inv, self.config.device_excluded),
                                                    self.config.expected_links)
        self.learned.learn(Inventory(inv.devices, dict(ports)), now)
        self.learned.inventory.recall_peers(Inventory(inv.devices, dict(ports)))
        return out

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
        ib.saturation = {key: link_errors.saturated(p) for key, p in ib.ports.items()}
        self._record_ib_counters(states, ib.ports)
        findings: list[Finding] = []
        inventory_known = inventory_ran[0] or (inventory_ran[1] and bool(ib.ports))
        unknown = ""
        if inventory_known:
            gone = {k: layer for k, (layer, _) in self.seen_ports.items() if k not in ib.ports}
            findings += inventory_checks.evaluate(ib.ports, self.config.expected_links, gone)
            findings += self._learned(states, inv, ib.ports, now)
            learned = sum(1 for r in self.learned.inventory.ports.values() if not self.config.device_excluded(r.device))
            unknown = inventory_checks.nothing_to_check(ib.ports, self.config.expected_links, learned,
                                                        self._where(states))
        else:
            findings += inventory_checks.waiting(self.config.expected_links)
        for k, p in ib.ports.items():
            self.seen_ports[k] = (p.link_layer, now)
        if len(self.seen_ports) > MAX_SEEN_PORTS:        # bounded: forget the longest gone
            for k, _ in sorted(self.seen_ports.items(), key=lambda kv: kv[1][1])[:len(self.seen_ports) - MAX_SEEN_PORTS]:
                del self.seen_ports[k]
        for key, p in ib.ports.items():
            v = degraded_link.evaluate_port(p, self.config.checks, self.config.expected_links)
            ib.verdicts[key] = v
            findings.append(v.finding)
            findings.extend(link_errors.evaluate_port(p, self.history, self.config.checks, now, ib.saturation[key]))

        views = self.roce_views(states, inv)
        eth_st, hw_st = source_state(states, EthtoolData), source_state(states, HwCountersData)
        record_roce_counters(views, self.intake,
                             eth_st.data_time if eth_st is not None and eth_st.data is not None else None,
                             hw_st.data_time if hw_st is not None and hw_st.data is not None else None)
        findings += roce_checks.evaluate(views, self.history, self.config.roce, now)
        optics, optics_findings = self._optics(states, ib.ports, now)
        findings += optics_findings

        facts = source_data(states, GpudirectFacts)
        gpus = source_data(states, GpuData)
        gd = gpudirect_checks.evaluate(facts, gpus, len(inv.devices))
        if gd.finding is not None:
            findings.append(gd.finding)
        aff = affinity_checks.evaluate(gpus, self.nics(inv.devices, inv.ports))
        findings += aff.findings
        gpu = GpuSection(gpudirect=gd if facts is not None else None, gpus=gpus, affinity=aff)
        kernel, kernel_findings = self._kernel_log(states, inv, ib, gpus, now)
        findings += kernel_findings
        nccl_data = source_data(states, NcclData)
        nccl = nccl_join(nccl_data, aff, inv.devices, ib.ports) if nccl_data is not None else None
        if nccl is not None:
            findings += self._nccl_slow(nccl, now)
        ras = source_data(states, RasData)
        if ras is not None:
            findings += nccl_ras_checks.evaluate(ras, ib.ports)
        jobs, findings = node_jobs(states, findings)
        return ({"ib": ib, "roce": RoceSection(views), "gpu": gpu, "inventory_known": inventory_known,
                 "jobs": jobs, "unknown": unknown, "optics": optics, "kernel": kernel, "nccl": nccl, "ras": ras},
                findings)

    def _nccl_slow(self, nccl: NcclSection, now: float) -> list[Finding]:
        """The jobs' baselines learned from the new dumps, then the slow paths judged (checks.nccl)."""
        cfg = self.config.checks.nccl_slow_collective
        self.nccl_baseline.learn(nccl.paths, now, cfg)
        learned = self.nccl_baseline.state.learned()
        nccl.baseline_gbs = {p.baseline_key: learned[p.baseline_key] for p in nccl.paths if p.baseline_key in learned}
        found, nccl.slow = nccl_checks.evaluate(nccl.paths, nccl.baseline_gbs, cfg)
        return found

    def _kernel_log(self, states: Mapping[str, SourceState], inv: Inventory, ib: IbSection, gpus: GpuData | None,
                    now: float) -> tuple[KernelSection | None, list[Finding]]:
        """The kernel log's events judged against the ports (checks.kernel_log), and the devices whose
        counters the sysfs source does not read (restricted_counters)."""
        sysfs = source_data(states, SysfsData)
        restricted = dict(sysfs.restricted) if sysfs is not None else {}
        data = source_data(states, KernelLogData)
        if data is None and not restricted:
            return None, []
        hold = data.hold if data is not None else 0.0       # the source's setting, carried by its record
        kernel, findings = kernel_log_checks.evaluate(data, inv.devices, ib.ports, now, hold,
                                                      gpu_node=bool(gpus is not None and gpus.gpus))
        kernel.restricted = restricted
        return kernel, findings + kernel_log_checks.restricted_findings(restricted)


__all__ = ["NodeModel", "CHECKED_COUNTERS", "unlisted"]
