"""A source that the shipped unit's privileges do not let read says so, with the reason and the fix in one
line, and returns no data (the pipeline reports it down): the tools' own words, recorded on this machine
as an unprivileged user (setpriv, no capability) and replayed here; tests/deployed/ runs the same for
real as the service user. Vendor tools and NVML cannot be run here: their words come from their sources
(pynvml's, libibumad's), and what that shows is named in docs/security.md."""

from __future__ import annotations

import errno
import math

import pytest

from fabricmon.config import from_dict
from fabricmon.host import LiveIO, ReplayIO, RecordingIO
from fabricmon.host.nvml import NvmlError
from fabricmon.model.ports import DeviceView, Inventory, PortView
from fabricmon.pipeline.source import Inputs
from fabricmon.host import umad
from fabricmon.sources import privilege
from fabricmon.sources.gpu import GpuSource
from fabricmon.sources.iblinkinfo import IblinkinfoSource
from fabricmon.sources.optics import OpticsSource
from fabricmon.sources.perfquery import PerfquerySource
from fabricmon.sources.slurm import SlurmSource
from helpers import FakeIO

# ethtool 6.1 (Debian 12) as a user without CAP_NET_ADMIN, on a real veth, and as root on the same veth
EEPROM_EPERM = "netlink error: Operation not permitted\n"
EEPROM_EOPNOTSUPP = "netlink error: Operation not supported\n"
# ethtool's ioctl path (a kernel without ETHTOOL_MSG_MODULE_EEPROM_GET): the same EPERM, other words
EEPROM_EPERM_IOCTL = "Cannot get module EEPROM information: Operation not permitted\n"
# infiniband-diags 44 on this machine (no umad device): iblinkinfo, then perfquery
IBLINKINFO_NO_UMAD = ("ibwarn: [19769] get_abi_version: can't read ABI version from /sys/class/infiniband_mad/"
                      "abi_version (No such file or directory): is ib_umad module loaded?\nibwarn: [19769] "
                      "mad_rpc_open_port: can't open UMAD port (mlx5_0:1)\nFailed to open mlx5_0 port 1\n")
PERFQUERY_NO_UMAD = ("ibwarn: [19770] mad_rpc_open_port: can't open UMAD port (mlx5_0:1)\n"
                     "perfquery: iberror: failed: Failed to open 'mlx5_0' port '1'\n")


def inventory(ports: dict[str, tuple[str, str]]) -> Inventory:
    """device -> (netdev, link layer), one port each, up, no counters from sysfs (perfquery's ports)."""
    inv = Inventory()
    for dev, (nd, layer) in ports.items():
        inv.devices[dev] = DeviceView(device=dev, netdev=nd)
        inv.ports[(dev, 1)] = PortView(device=dev, port=1, link_layer=layer, state_id=4, phys_state_id=5,
                                       width=4, generation="NDR", rate_gbps=400.0)
    return inv


def inputs(inv: Inventory) -> Inputs:
    return Inputs(deadline=math.inf, inventory=inv)


def test_ethtool_m_denied_says_cap_net_admin_and_the_drop_in() -> None:
    inv = inventory({"mlx5_0": ("ens1f0np0", "Ethernet"), "mlx5_1": ("ib0", "InfiniBand")})
    out = OpticsSource(from_dict({}).sources["optics"]).collect(FakeIO({("ethtool", "-m", "ens1f0np0"): (1, "", EEPROM_EPERM),
                                                      ("ethtool", "-m", "ib0"): (1, "", EEPROM_EPERM_IOCTL)}),
                                              inputs(inv))
    assert out.data is None                 # nothing read: the source is down, not "no module"
    assert [k for k, _ in out.errors] == ["exit_code", "exit_code"]
    first = out.errors[0][1]          # netdevs in name order
    assert first.startswith("ethtool -m ens1f0np0: exit 1: netlink error: Operation not permitted: reading a module "
                            "EEPROM needs CAP_NET_ADMIN, which the shipped unit does not grant: ")
    assert first.endswith("(systemctl edit fabricmon: CapabilityBoundingSet=CAP_NET_ADMIN, "
                          "AmbientCapabilities=CAP_NET_ADMIN)")
    assert out.errors[1][1].startswith("ethtool -m ib0: exit 1: Cannot get module EEPROM information: Operation not "
                                       "permitted: reading a module EEPROM needs CAP_NET_ADMIN")
    # with the capability the same veth answers "not supported": a netdev without a module, no error
    out = OpticsSource(from_dict({}).sources["optics"]).collect(FakeIO({("ethtool", "-m", "ens1f0np0"): (1, "", EEPROM_EOPNOTSUPP)}),
                                              inputs(inventory({"mlx5_0": ("ens1f0np0", "Ethernet")})))
    assert not out.errors and out.data.modules["ens1f0np0"].module is None


@pytest.mark.parametrize("source, argv, said", [
    (IblinkinfoSource, ("iblinkinfo", "-C", "mlx5_0", "-P", "1", "-D", "0"), IBLINKINFO_NO_UMAD),
    (PerfquerySource, ("perfquery", "-C", "mlx5_0", "-P", "1"), PERFQUERY_NO_UMAD),
], ids=["iblinkinfo", "perfquery"])
def test_a_mad_tool_without_its_umad_port_says_why_from_the_device_nodes(tmp_path, monkeypatch, source, argv,
                                                                         said) -> None:
    """The tools print "can't open UMAD port" whether the device is missing or not permitted; the reason
    comes from the device nodes (privilege.umad_reason, shared with the fabric collector)."""
    inv = inventory({"mlx5_0": ("ibp17s0", "InfiniBand")})
    io = FakeIO({argv: (255, "", said), (argv[0], "-x", *argv[1:]): (255, "", said)})
    cfg = from_dict({"sources": {source.spec.name: {"enabled": True}}}, check_paths=False)
    monkeypatch.setattr(privilege, "UMAD_GLOB", str(tmp_path / "umad*"))        # this host's, in a test
    out = source(cfg.sources[source.spec.name]).collect(io, inputs(inv))
    assert out.data is None and out.errors
    msg = out.errors[0][1]
    assert msg.startswith(f"{' '.join(argv)}: exit 255: ")
    assert msg.endswith(f": no umad device ({tmp_path / 'umad*'} does not exist): no InfiniBand HCA on this host, "
                        "or the ib_umad module is not loaded (modprobe ib_umad)")
    # a device this user may not open: root-only, as without fabricmon's udev rule
    (tmp_path / "umad0").write_text("")
    (tmp_path / "umad0").chmod(0o600)
    monkeypatch.setattr(umad.os, "access", lambda path, mode: False)      # as a user outside group rdma
    msg = source(cfg.sources[source.spec.name]).collect(io, inputs(inv)).errors[0][1]
    assert msg.endswith(f": permission denied on {tmp_path / 'umad0'}: run as root or as a member of the group that "
                        "owns it (fabricmon's udev rule gives it to group rdma, mode 0660; the shipped units run in "
                        "it: SupplementaryGroups=rdma)")


def test_nvml_without_permission_is_a_failure_with_the_fix_never_no_gpus(tmp_path, monkeypatch) -> None:
    """NVML_ERROR_NO_PERMISSION (the daemon may not open /dev/nvidia*) was read as "no NVML here", so under
    `enabled: auto` a node with GPUs had none and the affinity and GPUDirect checks judged nothing. Now it
    is an error, live and replayed from a bundle (pynvml's words are kept)."""
    import pynvml
    (tmp_path / "module" / "nvidia").mkdir(parents=True)           # the driver is loaded
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: (_ for _ in ()).throw(
        pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)))
    live = LiveIO(str(tmp_path), str(tmp_path))
    with pytest.raises(NvmlError, match="Insufficient Permissions"):
        live.nvml_gpus()
    rec = RecordingIO(live, tmp_path / "bundle")
    for io in (live, rec):
        out = GpuSource(from_dict({}, check_paths=False).sources["gpu"]).collect(io, inputs(Inventory()))
        assert out.data is None
        assert out.errors == [("read", f"NVML: nvmlInit failed: Insufficient Permissions: {privilege.NVML_FIX}")]
    rec.save()
    out = GpuSource(from_dict({}, check_paths=False).sources["gpu"]).collect(ReplayIO(tmp_path / "bundle"), inputs(Inventory()))
    assert out.data is None and out.errors[0][1].endswith(privilege.NVML_FIX)


def test_a_spool_dir_this_user_may_not_list_says_so(tmp_path) -> None:
    class NoList(FakeIO):
        def hostname(self):
            return "node1"

        def read_host_file(self, path):
            raise OSError(errno.ENOENT, "no", path)

        def list_host_dir(self, path):
            raise OSError(errno.EACCES, "Permission denied", path)
    out = SlurmSource(from_dict({}, check_paths=False).sources["slurm"]).collect(NoList(), inputs(Inventory()))
    assert out.data is None
    assert out.errors == [("read", "/var/spool/slurmd: Permission denied: this user must be able to list slurmd's "
                                   "spool directory (slurmd makes it mode 0755; where a site restricted it, give the "
                                   "daemon's user read and search on it)")]
