"""fabricmon as deployed: the daemon run as the shipped unit's user, with only its groups and its
capabilities, under kernel.dmesg_restrict=1 (tests/deployed/conftest.py reproduces them without systemd).
Every enabled source either reads or says it cannot, with the reason and the fix (issue 46.6).

- The kernel log: with the unit's CAP_SYSLOG, real lines written into this machine's ring buffer (as root,
  by the test) are read and counted and become findings; without it, the source reports itself down with
  the reason (`fabricmon_source_up{source="kernel_log"} 0`, the error, a WARNING `source` finding, `check`
  not 0).
- ethtool -S reads unprivileged on a real veth; ethtool -m does not (CAP_NET_ADMIN): the optics source
  says so, and the drop-in its message names makes it read.
- The slurm source against a real Slurm cluster (fabricmon.sim.slurm): it names another user's job; under
  slurm.conf PrivateData=jobs it says that squeue hides the jobs from it, and what to change.
- The Ethernet collector's SNMP secret file, made by root: a config error naming the user and the chown.
- The tools of infiniband-diags run for real (no HCA here: their umad port does not open, and the
  message says why from the device nodes); the udev rule's group and mode give the unit's user a umad
  node, which a root-only one does not (a node of our own: no device here). mlnx_qos and NVML are not on this machine: what their
  privileges mean is shown by their recorded words (tests/sources/test_privilege.py) and written in
  docs/security.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest
import yaml

from cli.test_health_check import free_port, wait_for
from deployed.conftest import FABRIC_UNIT, caps, unit_service
from fabricmon.sim.slurm import SimSlurm
from fabricmon.sim.slurm import tools_available as slurm_tools
from fabricmon.sources.kernel_log import FIX_DENIED
from fabricmon.sources.privilege import EEPROM_FIX, MLXLINK_FIX
from helpers import REPO, exposition_samples, require_writable_kmsg, sample_value, scrape_samples, unavailable
from sources.test_kernel_log import write_kmsg

pytestmark = pytest.mark.deployed

# What each node source does as the service user with the unit's groups and capabilities on this machine:
# None, it reads; else words its error must hold (what is missing and what to change). A source not named
# here fails the test: say what it needs as deployed (docs/security.md) before it ships.
AS_DEPLOYED: dict[str, str | None] = {
    "sysfs": None, "hw_counters": None, "netdev": None,      # world-readable sysfs files
    "port_state": None,         # the ports' state and phys_state: world-readable sysfs files
    "gpudirect": None,          # /proc/modules, /sys/module: world-readable
    "kernel_log": None,         # /dev/kmsg with the unit's CAP_SYSLOG
    "ethtool": None,            # ethtool -S: no capability (ETHTOOL_GSTATS is open to all)
    "optics": EEPROM_FIX,       # ethtool -m: CAP_NET_ADMIN, which the unit does not grant
    "ibstat": None,             # sysfs only (no HCA here: no ports)
    "perfquery": None,          # only ports without sysfs counters: none here
    "iblinkinfo": "umad",       # the umad device (group rdma); no HCA here: privilege.umad_reason says which
    "mlnx_qos": None,           # rtnetlink DCB reads and sysfs (not installed here: off, enabled: auto)
    "gpu": None,                # NVML (not installed here: no GPUs, enabled: auto)
    "slurm": None,              # slurmd's spool directory (0755) and squeue (no slurmd here: no jobs)
    "nccl_inspector": None, "nccl_ras": None,                # off by default
    "fec": None,                # ethtool -I --show-fec: a netlink get, open to all (the veth: "not supported", no data)
    "pcie": None,               # world-readable PCI sysfs files
    "mlxlink": MLXLINK_FIX,     # root only (not installed here: off, enabled: auto)
}
UMAD_REASONS = (": no umad device (", ": permission denied on /dev/infiniband/umad", ": cannot open the local umad port")


def logged_errors(stderr: str) -> dict[str, list[str]]:
    """The daemon's `source error` log lines (JSON), by source."""
    out: dict[str, list[str]] = {}
    for line in stderr.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            if doc.get("event") == "source error":
                out.setdefault(doc["source"], []).append(doc["error"])
    return out


def outcomes(samples: dict, stderr: str) -> dict[str, tuple[bool, list[str]]]:
    """Each active source: (up, its errors)."""
    errors = logged_errors(stderr)
    active = [dict(lbl)["source"] for (n, lbl), v in samples.items() if n == "fabricmon_source_active" and v == 1]
    return {s: (sample_value(samples, "fabricmon_source_up", source=s) == 1, errors.get(s, [])) for s in active}


def test_every_enabled_source_reads_or_says_why_not(service, dmesg_restrict, node_view) -> None:
    res = service.run(["once", "--config", str(node_view.config)])
    samples = exposition_samples(res.stdout)
    seen = outcomes(samples, res.stderr)
    assert seen, res.stderr[-2000:]
    unknown = sorted(set(seen) - set(AS_DEPLOYED))
    assert not unknown, f"sources that AS_DEPLOYED does not name (what do they need as deployed?): {unknown}"
    for name, (up, errors) in sorted(seen.items()):
        want = AS_DEPLOYED[name]
        if want is None:
            assert up and not errors, f"{name} does not read as the service user: {errors}"
        else:
            assert not up and errors, f"{name} should say it cannot read as the service user: up={up}"
            for e in errors:
                assert want in e and (want != "umad" or any(r in e for r in UMAD_REASONS)), (name, e)
    # the ones this machine runs for real, named: a test that checked nothing would pass too
    assert {"sysfs", "hw_counters", "netdev", "gpudirect", "kernel_log", "ethtool", "optics"} <= set(seen)
    assert sample_value(samples, "fabricmon_source_up", source="kernel_log") == 1


def test_the_kernel_log_reads_real_lines_with_the_units_capability(service, dmesg_restrict, node_view) -> None:
    """The daemon as the service user with CAP_SYSLOG only: real lines written into the ring buffer are
    counted and become the findings they should; its state is the user's own file, in the state directory
    StateDirectory= makes (mode 0750: no one else reads it)."""
    require_writable_kmsg()
    pci = node_view.pcis[0]
    cfg = node_view.write_config(sources={"sysfs": {"interval": 0.2}, "kernel_log": {"interval": 0.2}})
    port = free_port()
    log = open(node_view.root / "daemon.log", "w")
    proc = service.popen(["run", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"], stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert proc.poll() is None, (node_view.root / "daemon.log").read_text()[-2000:]
            try:
                s = scrape_samples(port)
            except OSError:
                return False
            return sample_value(s, "fabricmon_source_up", source="kernel_log") == 1
        wait_for(ready, 30)
        before = scrape_samples(port)
        lines0 = sum(sample_value(before, "fabricmon_kernel_log_lines_total", result=r) or 0
                     for r in ("unmatched", "attributed", "unattributed"))
        write_kmsg([f"fabricmon deployed test {pci}: an unrelated line",
                    f"mlx5_core {pci}: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a "
                    "command resource"])

        def counted() -> dict | None:
            s = scrape_samples(port)
            ev = sample_value(s, "fabricmon_kernel_log_events_total", device="mlx5_0", port="1", event="cmd_timeout",
                              **{"class": "fatal"})
            return s if ev == 1 else None
        after = wait_for(counted, 30)
        lines1 = sum(sample_value(after, "fabricmon_kernel_log_lines_total", result=r) or 0
                     for r in ("unmatched", "attributed", "unattributed"))
        assert lines1 >= lines0 + 2 and sample_value(after, "fabricmon_kernel_log_lines_total", result="attributed") >= 1
        assert sample_value(after, "fabricmon_source_up", source="kernel_log") == 1
        with urllib.request.urlopen(url + "/api/v1/findings", timeout=5) as r:
            found = [f for f in json.loads(r.read())["findings"] if f["check"] == "kernel_log" and f["device"] == "mlx5_0"]
        assert found and found[0]["status"] == 2, found
        # `check` as the same user asks the daemon: CRITICAL (a fatal event drains the node)
        res = service.run(["check", "--daemon", url])
        assert res.returncode == 2, res.stdout + res.stderr
        assert "cmd_timeout" in res.stdout and "mlx5_0" in res.stdout, res.stdout
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
            proc.wait()
        log.close()
    assert (node_view.state / "kernel_log.json").stat().st_uid == service.uid
    st = node_view.state.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (service.uid, 0o750)


def test_without_cap_syslog_the_kernel_log_says_why(service, dmesg_restrict, node_view) -> None:
    """The same user without the capability (the unit before issue 46): the source is down with the reason
    and the fix, a WARNING `source` finding, and `check` does not exit 0."""
    res = service.run(["once", "--config", str(node_view.config)], caps=())
    samples = exposition_samples(res.stdout)
    assert sample_value(samples, "fabricmon_source_up", source="kernel_log") == 0
    assert sample_value(samples, "fabricmon_kernel_log_lines_total", result="unmatched") is None     # no zeros
    [msg] = logged_errors(res.stderr)["kernel_log"]
    assert msg.startswith("/dev/kmsg: Operation not permitted (kernel.dmesg_restrict=1 and no CAP_SYSLOG); "
                          "journalctl -k: "), msg
    assert msg.endswith(f": {FIX_DENIED}"), msg
    assert sample_value(samples, "fabricmon_health_status") != 0
    check = service.run(["check", "--config", str(node_view.config), "--no-state"], caps=())
    assert check.returncode != 0, check.stdout
    assert f"WARNING source: source kernel_log: {msg}" in check.stdout, check.stdout


def test_the_optics_fix_it_names_makes_it_read(service, dmesg_restrict, node_view) -> None:
    """The drop-in the optics error names (CAP_NET_ADMIN added): ethtool -m reads the same veths, which
    answer "not supported" (no module): a read, no error."""
    res = service.run(["once", "--config", str(node_view.config)], caps=(*service.caps, "net_admin"))
    samples = exposition_samples(res.stdout)
    assert sample_value(samples, "fabricmon_source_up", source="optics") == 1, logged_errors(res.stderr)
    assert "optics" not in logged_errors(res.stderr)
    assert os.path.exists(f"/sys/class/net/{node_view.netdevs[1]}"), "the veth the daemon read is real"


def test_the_fabric_collectors_secret_file_must_be_its_users(service, node_view) -> None:
    """The Ethernet collector's SNMP secret, made as root (mode 0600, as the docs ask) and read by the
    collector's user with the fabric unit's capabilities (none): a config error naming the key, the
    reason and the chown that fixes it; once the file is the user's, the config loads."""
    fabric_caps = caps(unit_service(FABRIC_UNIT).get("AmbientCapabilities", []))
    secret = node_view.root / "snmp-community"
    secret.write_text("public\n")
    secret.chmod(0o600)
    node_view.config.write_text(yaml.safe_dump({
        "paths": {"state_dir": str(node_view.state)}, "logging": {"format": "json"},
        "fabric": {"kind": "ethernet", "ethernet": {"switches": ["127.0.0.1:9"], "snmp": {
            "version": "2c", "community_file": str(secret), "timeout": 0.5, "retries": 0}}}}))
    res = service.run(["fabric", "once", "--config", str(node_view.config)], caps=fabric_caps)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"fabricmon: config error at fabric.ethernet.snmp.community_file: cannot read {secret} as user {service.name}: "
        f"Permission denied: make it that user's (chown {service.name} {secret}; chmod 600 {secret})")
    os.chown(secret, service.uid, service.gid)
    res = service.run(["fabric", "once", "--config", str(node_view.config)], caps=fabric_caps)
    assert "config error" not in res.stderr and res.returncode == 3, res.stderr[-1000:]     # no switch answers


def test_check_run_as_root_leaves_the_state_the_service_users(service, node_view) -> None:
    """`fabricmon check` run by root against the service user's state directory (an operator trying a
    changed config) used to leave check-state.json root's, mode 0600: the service user's next check logged
    `ignoring unreadable check state ... Permission denied` and lost the counter history (issue 53). Every
    state file keeps the owner of its directory, with the mode it had."""
    cfg = str(node_view.config)
    first = subprocess.run([sys.executable, "-m", "fabricmon", "check", "--config", cfg], capture_output=True,
                           text=True, timeout=120, cwd="/")
    assert first.returncode in (0, 1, 2), first.stdout + first.stderr
    state = node_view.state / "check-state.json"
    written = sorted(p for p in node_view.state.rglob("*") if p.is_file())
    assert state in written, written
    for p in written:
        st = p.stat()
        assert (st.st_uid, st.st_gid) == (service.uid, service.gid), f"{p} is {st.st_uid}:{st.st_gid}, not the user's"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600       # the mode it had: the history is the user's alone
    before = json.loads(state.read_text())["counters"]
    assert before and all(len(samples) == 1 for samples in before.values())
    second = service.run(["check", "--config", cfg])
    assert second.returncode in (0, 1, 2), second.stdout + second.stderr
    assert "ignoring unreadable check state" not in second.stderr, second.stderr[-1000:]
    after = json.loads(state.read_text())["counters"]
    # the second run read root's samples: each counter now holds both runs' (the first run's time first)
    assert all(len(after[k]) == 2 and after[k][0][0] == before[k][0][0] for k in before), after
    assert state.stat().st_uid == service.uid


def test_the_slurm_source_names_jobs_or_says_private_data_hides_them(service, node_view) -> None:
    """A real slurmctld and slurmd (root's job on node01): the daemon as the service user names the job
    (the spool directory is 0755, squeue answers any user). With PrivateData=jobs, squeue hides it from
    that user (measured: "Invalid job id specified" for one id): the source says so, with the fix."""
    ok, why = slurm_tools()
    if not ok:
        unavailable(why)
    work = Path(tempfile.mkdtemp(prefix="fabricmon-deployed-slurm-", dir="/tmp"))
    work.chmod(0o755)
    try:
        with SimSlurm(["node01"], work) as cluster:
            job = cluster.submit("train", ["node01"])
            cluster.wait_running(job)
            env = {"SLURM_CONF": str(cluster.conf)}
            cfg = node_view.write_config(slurm={"node_name": "node01"})
            res = service.run(["once", "--config", str(cfg)], env=env)
            samples = exposition_samples(res.stdout)
            assert sample_value(samples, "fabricmon_slurm_job_info", job_id=job, user="root", job_name="train") == 1, \
                res.stderr[-2000:]
            assert "slurm" not in logged_errors(res.stderr)
            with open(cluster.conf, "a") as fh:
                fh.write("PrivateData=jobs\n")
            cluster.run(["scontrol", "reconfigure"])
            cfg = node_view.write_config(slurm={"node_name": "node01"}, sources={"slurm": {"interval": 0.2}})
            port = free_port()
            log_path = node_view.root / "daemon.log"
            with open(log_path, "w") as log:
                proc = service.popen(["run", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"], stderr=log,
                                     env=env)
                try:
                    def said() -> list[str]:
                        assert proc.poll() is None, log_path.read_text()[-2000:]
                        return logged_errors(log_path.read_text()).get("slurm", [])
                    [msg] = wait_for(said, 30)
                finally:
                    proc.terminate()
                    proc.wait(10)
            assert msg == (f"squeue does not show job(s) {job} whose steps run on this node: slurm.conf "
                           f"PrivateData=jobs hides other users' jobs from user {service.name}, so no finding can "
                           f"name them: make {service.name} a Slurm operator (sacctmgr modify user {service.name} "
                           "set adminlevel=operator) or take jobs out of PrivateData")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_udev_rule_gives_the_units_group_the_umad_device(service, node_view) -> None:
    """No HCA here, so no real umad device: its permission as the rule sets it, and as without the rule,
    on nodes in a directory of our own. As the service user with the unit's groups, one the rule made
    (its GROUP=, its MODE=) is usable; a root-only one (the kernel's default, no rule) is "permission
    denied" with the fix. The rule's group is one the unit runs in."""
    rule = (REPO / "fabricmon" / "deploy" / "udev" / "90-fabricmon-umad.rules").read_text()
    m = re.search(r'KERNEL=="umad\*".*GROUP="([^"]+)", MODE="(0[0-7]{3})"', rule)
    assert m, rule
    group, mode = m.group(1), int(m.group(2), 8)
    supplementary = [g for v in unit_service().get("SupplementaryGroups", []) for g in v.split()]
    assert group in supplementary, (group, supplementary)
    gid = service.groups[supplementary.index(group)]
    devs = node_view.root / "dev"
    devs.mkdir()
    devs.chmod(0o755)
    code = f"from fabricmon.sources.privilege import umad_reason; print(umad_reason({str(devs / 'umad*')!r}))"
    (devs / "umad0").write_text("")
    os.chown(devs / "umad0", 0, gid)
    (devs / "umad0").chmod(mode)
    res = service.python(code)
    assert res.stdout.strip() == (f"cannot open the local umad port ({devs / 'umad0'} exist): is the local HCA port "
                                  "up? (ibstat)"), res.stdout + res.stderr
    os.chown(devs / "umad0", 0, 0)
    (devs / "umad0").chmod(0o600)
    res = service.python(code)
    assert res.stdout.strip().startswith(f"permission denied on {devs / 'umad0'}: run as root or as a member of the "
                                         "group that owns it (fabricmon's udev rule gives it to group rdma"), res.stdout
