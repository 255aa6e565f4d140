"""RoCE lossless health, GPUDirect RDMA readiness and GPU-NIC affinity, wired into the collector.

Sources (each its own module in fabricmon.sources, each a `sources.<name>` config entry):
- inventory phase (no dependency): gpudirect, gpu;
- per-port phase (need the RoCE netdevs found by sysfs): mlnx_qos, ethtool, netdev.
The collector hands their records, plus the merged devices and ports, to `RoceGpu.evaluate`,
which samples the RoCE counters into the collector's CounterHistory and runs the checks in
fabricmon.checks.{roce,gpudirect,affinity}. Results go to Snapshot.extra for the exporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricmon.checks import Finding
from fabricmon.checks import affinity as affinity_checks
from fabricmon.checks import gpudirect as gpudirect_checks
from fabricmon.checks import roce as roce_checks
from fabricmon.config import Config
from fabricmon.history import CounterHistory
from fabricmon.hostio import HostIO
from fabricmon.sources import SourceOutput
from fabricmon.sources.ethtool import EthtoolSource
from fabricmon.sources.gpu import GpuSource
from fabricmon.sources.gpudirect import GpudirectSource
from fabricmon.sources.mlnx_qos import MlnxQosSource
from fabricmon.sources.netdev import NetdevSource
from fabricmon.sources.targets import RoceTarget, roce_targets

INVENTORY_SOURCES = ("gpudirect", "gpu")
PER_PORT_SOURCES = ("mlnx_qos", "ethtool", "netdev")
SOURCES = INVENTORY_SOURCES + PER_PORT_SOURCES


class RoceGpu:
    def __init__(self, config: Config):
        self.config = config
        self.sources = {
            "mlnx_qos": MlnxQosSource(config), "ethtool": EthtoolSource(config), "netdev": NetdevSource(config),
            "gpudirect": GpudirectSource(config), "gpu": GpuSource(config),
        }

    def horizon(self) -> float:
        """The longest window the RoCE checks read from the counter history."""
        return max(self.config.roce.windows())

    def collect(self, name: str, io: HostIO, devices: Mapping[str, Any],
                ports: Mapping[tuple[str, int], Any]) -> SourceOutput:
        src = self.sources[name]
        if name in PER_PORT_SOURCES:
            return src.collect(io, roce_targets(devices, ports))
        return src.collect(io)

    @staticmethod
    def _data(states: Mapping[str, Any], name: str) -> Any:
        st = states.get(name)
        return st.data if st is not None and st.enabled else None

    def _note(self, states: Mapping[str, Any], name: str, data: Any) -> str:
        st = states.get(name)
        if st is None or not st.enabled:
            return f"sources.{name} is disabled"
        if data is not None and getattr(data, "tool_missing", False):
            return f"{name} is not installed (sources.{name}.enabled: auto)"
        if st.active_errors:
            return f"{name} failed: {sorted(st.active_errors)[0]}"
        return f"no {name} data for this netdev yet"

    def roce_views(self, states: Mapping[str, Any], devices: Mapping[str, Any],
                   ports: Mapping[tuple[str, int], Any]) -> list[roce_checks.RoceView]:
        qos = self._data(states, "mlnx_qos")
        eth = self._data(states, "ethtool")
        nd = self._data(states, "netdev")
        views = []
        for t in roce_targets(devices, ports):
            p = ports.get((t.device, t.port))
            v = roce_checks.RoceView(target=t, hw=dict(getattr(p, "hw_counters", {}) or {}))
            if not t.netdev:
                v.qos_note = v.stats_note = "the RoCE port's netdev is unknown (no device/net in sysfs)"
                views.append(v)
                continue
            v.qos = qos.netdevs.get(t.netdev) if qos is not None else None
            if v.qos is None:
                v.qos_note = self._note(states, "mlnx_qos", qos)
            v.stats = eth.netdevs.get(t.netdev) if eth is not None else None
            if v.stats is None:
                v.stats_note = self._note(states, "ethtool", eth)
            v.netdev = nd.netdevs.get(t.netdev) if nd is not None else None
            views.append(v)
        return views

    def nics(self, devices: Mapping[str, Any], ports: Mapping[tuple[str, int], Any]
             ) -> dict[str, affinity_checks.NicInfo]:
        out = {}
        for name, d in sorted(devices.items()):
            mine = [p for (dev, _), p in ports.items() if dev == name]
            known = [p for p in mine if getattr(p, "state_id", None) is not None]
            usable = not known or any(p.up for p in known)
            out[name] = affinity_checks.NicInfo(
                device=name, pci_path=getattr(d, "pci_path", None), numa_node=getattr(d, "numa_node", None),
                usable=usable, ports=tuple(sorted(p.port for p in mine)) or (1,))
        return out

    def evaluate(self, states: Mapping[str, Any], devices: Mapping[str, Any],
                 ports: Mapping[tuple[str, int], Any], history: CounterHistory, now: float
                 ) -> tuple[dict[str, Any], list[Finding]]:
        findings: list[Finding] = []
        views = self.roce_views(states, devices, ports)
        eth_state, sys_state = states.get("ethtool"), states.get("sysfs")
        roce_checks.record(
            views, history,
            eth_state.data_time if eth_state is not None and eth_state.data is not None else None,
            sys_state.data_time if sys_state is not None and sys_state.data is not None else None)
        findings += roce_checks.evaluate(views, history, self.config, now)
        gpu_data = self._data(states, "gpu")
        gd = gpudirect_checks.evaluate(self._data(states, "gpudirect"), gpu_data, len(devices))
        if gd.finding is not None:
            findings.append(gd.finding)
        aff = affinity_checks.evaluate(gpu_data, self.nics(devices, ports))
        findings += aff.findings
        extra = {"roce": views, "gpudirect": gd if self._data(states, "gpudirect") is not None else None,
                 "gpu": gpu_data, "affinity": aff}
        return extra, findings


__all__ = ["RoceGpu", "RoceTarget", "SOURCES", "INVENTORY_SOURCES", "PER_PORT_SOURCES"]
