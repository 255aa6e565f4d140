"""Host ports no subnet manager configured: a host CA's port that is cabled and up (its link trained: the
switch port reads Init or later, and the discovery walked it) but has no LID. ibnetdiscover prints such
a port's LID as 65535 (0xFFFF: what ConnectX reports before a subnet manager assigns one) or 0; the SM
never swept it, or refused it (a partition or M_Key it could not pass, no LID left in its range), or the
SM's sweep stopped. The port carries no traffic: nothing can be routed to it, its host's jobs lose that
rail (NCCL drops the HCA, or the job fails to start). It is neither healthy nor down (the link check
calls Init up: the cable is fine), and it is never a parse error.

One WARNING per such port, on the switch port it is cabled to (device: the switch GUID, port: its
port), naming the host, the host's port and its port GUID (what the SM's log names), and the LID it
printed; the fix is at the subnet manager (or the HCA), not the cable. A port is judged where a fresh
discovery reads LIDs (`host_lids`: ibnetdiscover; never LLDP) and this sweep read its switch (the port's
state is the sweep's: a port it reads down is degraded_link's, never this check's); every switch the sweep
read is judged, OK where each of its host ports has its LID (a spine has none). The finding clears at the
first discovery that reads the port's LID.

Records in (the section's host ports and their links), findings out; nothing parsed, nothing kept."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TYPE_CHECKING

from fabricmon.checks import WARNING, Finding
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import FabricPort, SwitchNode

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "host_port_unconfigured"
NEEDS = ("topology", "host_lids", "SweepData")   # a fresh discovery that reads the CA ports' LIDs, a fresh sweep


def evaluate(ports: Mapping[tuple[str, int], FabricPort], switches: Mapping[str, SwitchNode],
             hosts: Mapping[str, str], swept: Set[str]) -> tuple[list[Finding], tuple[str, ...]]:
    """The WARNINGs, one per host port up without a LID, of the switches `swept` (those the sweep read), and
    the switches judged: every one of them."""
    findings = []
    for (g, port), p in ports.items():
        lk = p.link
        if p.role != "host" or lk is None or not p.up or lk.remote_unassigned_lid is None or g not in swept:
            continue
        sw = switches[g].name if g in switches else g
        host = hosts.get(lk.remote_guid) or f"0x{lk.remote_guid}"
        guid = lk.remote_port_guid or lk.remote_guid
        findings.append(Finding(
            CHECK, g, port, WARNING,
            f'{sw} port {p.label} (host to "{lk.remote_name}"[{lk.remote_port_label}]): host {host} port '
            f"{lk.remote_port_label} (CA 0x{lk.remote_guid}, port GUID 0x{guid}) has no LID (lid "
            f"{lk.remote_unassigned_lid}): its link is up at {lk.rate_class} but no subnet manager configured it, so "
            f"the host cannot use this port; check the subnet manager (sminfo; its log for port GUID 0x{guid}: "
            f"a partition, M_Key or LID range it refused) and the host's HCA"))
    return findings, tuple(g for g in switches if g in swept)


class HostPorts:
    """host_port_unconfigured (checks.shape): no settings, no state."""
    reports = (report(CHECK, *NEEDS),)
    settings = None
    state = None

    def run(self, inputs: FabricInputs) -> Outcome:
        swept = inputs.sweep.switches_read() if inputs.sweep is not None else set()
        findings, judged = evaluate(inputs.sec.ports, inputs.sec.switches, inputs.topo.hosts, swept)
        return Outcome(findings, judged)


__all__ = ["CHECK", "NEEDS", "HostPorts", "evaluate"]
