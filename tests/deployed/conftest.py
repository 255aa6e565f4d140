"""The shipped unit's restrictions reproduced without systemd, for tests/deployed/.

- `service`: a real user with only the unit's groups. The unit's `User=`/`Group=` (fabricmon) and its
  `SupplementaryGroups=` (rdma) where this host has them; where it does not, a user and groups made for
  the session (useradd/groupadd, system accounts) and removed after it: only what this fixture created.
  No /etc/group membership is added: systemd gives the unit its groups at start, as setpriv does here.
- `ServiceUser.run` / `.popen`: `python -m fabricmon ...` as that user through setpriv(1): its uid, gid
  and the unit's groups, the unit's capability sets (`CapabilityBoundingSet=` as the bounding set,
  `AmbientCapabilities=` as the inheritable and ambient sets, or none), `--no-new-privs` for
  `NoNewPrivileges=yes`, the unit's `UMask=`, cwd /, and the environment systemd gives a service.
- `dmesg_restrict`: kernel.dmesg_restrict=1 (Debian's and Ubuntu's default), set through /proc/sys for
  the session where it is not, and restored after.
- `node_view`: the daemon's view of a node from fabricmon.sim.sysfs_tree (one InfiniBand HCA, one RoCE
  HCA whose netdevs are a real veth pair, so that ethtool runs for real), world-readable, with a state
  directory owned by the user as `StateDirectory=` (mode `StateDirectoryMode=`) makes it.

What systemd adds and this cannot: the mount namespace (ProtectSystem=strict, ProtectHome, PrivateTmp,
InaccessiblePaths), the device cgroup (DevicePolicy=closed, DeviceAllow=), the seccomp filter
(SystemCallFilter=) and ProtectProc=. tests/ship/test_systemd.py checks those settings as text and with
`systemd-analyze`; docs/security.md says what each source needs of them.

Root-only prerequisites go through helpers.unavailable: skipped locally, failed under $CI (root there).
"""

from __future__ import annotations

import grp
import os
import pwd
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from fabricmon.sim import sysfs_tree
from helpers import REPO, unavailable

UNIT = REPO / "fabricmon" / "deploy" / "systemd" / "fabricmon.service"
FABRIC_UNIT = REPO / "fabricmon" / "deploy" / "systemd" / "fabricmon-fabric.service"
# systemd's PATH for a service (systemd.exec(5), "Environment variables in spawned processes")
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unit_service(path: Path = UNIT) -> dict[str, list[str]]:
    """The unit's [Service] settings, each key's values in order."""
    kv: dict[str, list[str]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            kv.setdefault(k, []).append(v)
    return kv


def caps(setting: list[str]) -> tuple[str, ...]:
    """`CAP_SYSLOG CAP_NET_ADMIN` (all assignments of one key) -> setpriv's names ("syslog", "net_admin")."""
    return tuple(c.lower().removeprefix("cap_") for v in setting for c in v.split())


@dataclass
class ServiceUser:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]             # the unit's SupplementaryGroups=, as gids
    home: str
    caps: tuple[str, ...]               # the unit's AmbientCapabilities= (= its bounding set here)
    no_new_privs: bool
    umask: int
    created: list[tuple[str, str]] = field(default_factory=list)      # ("user"|"group", name), to remove

    def argv(self, argv: list[str], caps: tuple[str, ...] | None = None) -> list[str]:
        """setpriv ... python -m fabricmon argv, with the unit's capabilities (or `caps`)."""
        use = self.caps if caps is None else caps
        sets = "".join(f",+{c}" for c in use)
        prefix = [shutil.which("setpriv") or "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                  f"--groups={','.join(map(str, self.groups))}" if self.groups else "--clear-groups",
                  f"--inh-caps=-all{sets}", f"--ambient-caps=-all{sets}", f"--bounding-set=-all{sets}"]
        if self.no_new_privs:
            prefix.append("--no-new-privs")
        return [*prefix, "--", sys.executable, "-m", "fabricmon", *argv]

    def python(self, code: str, caps: tuple[str, ...] | None = None) -> subprocess.CompletedProcess:
        """`python -c code` as the user (this checkout's fabricmon importable), as `run`."""
        argv = self.argv([], caps)
        argv = [*argv[:argv.index("-m")], "-c", code]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=self.env(), cwd="/",
                              umask=self.umask)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """What systemd gives a service (plus `extra`: an EnvironmentFile='s variables)."""
        return {"PATH": SERVICE_PATH, "HOME": self.home, "USER": self.name, "LOGNAME": self.name,
                "SHELL": "/usr/sbin/nologin", "LANG": "C.UTF-8", **(extra or {})}

    def run(self, argv: list[str], caps: tuple[str, ...] | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv, caps), capture_output=True, text=True, timeout=timeout,
                              env=self.env(env), cwd="/", umask=self.umask)

    def popen(self, argv: list[str], stderr, caps: tuple[str, ...] | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(self.argv(argv, caps), stdout=subprocess.DEVNULL, stderr=stderr, env=self.env(env),
                                cwd="/", umask=self.umask)


def _tool(name: str, package: str) -> str:
    return shutil.which(name) or unavailable(f"{name} is needed (Debian package {package})")


def _ensure_group(name: str, created: list[tuple[str, str]]) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        pass
    res = subprocess.run([_tool("groupadd", "passwd"), "--system", name], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        unavailable(f"groupadd --system {name}: {res.stderr.strip()}")
    created.append(("group", name))
    return grp.getgrnam(name).gr_gid


def _remove(created: list[tuple[str, str]]) -> None:
    for kind, name in reversed(created):
        if kind == "user":
            subprocess.run([_tool("userdel", "passwd"), name], capture_output=True, timeout=30)
        else:
            try:
                grp.getgrnam(name)
            except KeyError:
                continue        # userdel took the user's own group with it
            subprocess.run([_tool("groupdel", "passwd"), name], capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def service():
    """The unit's user and groups, as described above; skipped (failed under $CI) without root."""
    if os.geteuid() != 0:
        unavailable("running fabricmon as the service user needs root (to create it and drop to it), as CI does")
    _tool("setpriv", "util-linux")
    kv = unit_service()
    user, group = kv["User"][-1], kv["Group"][-1]
    supplementary = [g for v in kv.get("SupplementaryGroups", []) for g in v.split()]
    created: list[tuple[str, str]] = []
    suffix = f"{os.getpid() % 100000}"
    try:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            # absent here: a user of our own for the session (another worker may be making its own)
            user = group = f"fmdeploy{suffix}"
            res = subprocess.run([_tool("useradd", "passwd"), "--system", "--user-group", "--no-create-home",
                                  "--home-dir", "/var/lib/fabricmon", "--shell", "/usr/sbin/nologin", user],
                                 capture_output=True, text=True, timeout=30)
            if res.returncode != 0:
                unavailable(f"useradd --system {user}: {res.stderr.strip()}")
            created.append(("user", user))
            pw = pwd.getpwnam(user)
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            gid = pw.pw_gid
        groups = []
        for g in supplementary:
            try:
                groups.append(grp.getgrnam(g).gr_gid)
            except KeyError:
                groups.append(_ensure_group(f"fm{g}{suffix}", created))     # the rdma stand-in, for the session
        ambient = caps(kv.get("AmbientCapabilities", []))
        assert set(ambient) <= set(caps(kv.get("CapabilityBoundingSet", []))), "ambient caps outside the bound"
        su = ServiceUser(user, pw.pw_uid, gid, tuple(groups), pw.pw_dir, ambient,
                         kv.get("NoNewPrivileges", ["no"])[-1] == "yes", int(kv.get("UMask", ["0022"])[-1], 8),
                         created)
        probe = su.run(["--help"], timeout=60)
        if probe.returncode != 0:
            unavailable("the service user cannot run this checkout's fabricmon (a checkout or Python under a "
                        f"private directory?): {probe.stderr.strip()[-300:]}")
        yield su
    finally:
        _remove(created)


@pytest.fixture(scope="session")
def dmesg_restrict():
    """kernel.dmesg_restrict=1 for the session (restored after where it was not)."""
    knob = Path("/proc/sys/kernel/dmesg_restrict")
    try:
        before = knob.read_text().strip()
    except OSError as exc:
        unavailable(f"{knob}: {exc.strerror}")
    if before != "1":
        try:
            knob.write_text("1\n")
        except OSError as exc:
            unavailable(f"setting kernel.dmesg_restrict=1 needs root and a writable /proc/sys: {exc.strerror}")
    try:
        yield 1
    finally:
        if before != "1":
            knob.write_text(before + "\n")


@dataclass
class NodeView:
    root: Path              # world-readable: the tree, the config
    sysfs: Path
    state: Path             # the user's, as StateDirectory= makes it
    config: Path
    pcis: list[str]         # mlx5_0's and mlx5_1's PCI functions (a domain no other test uses)
    netdevs: list[str]      # mlx5_0's (IPoIB) and mlx5_1's (RoCE) netdevs: a real veth pair

    def write_config(self, **extra) -> Path:
        doc = {"paths": {"sysfs": str(self.sysfs), "state_dir": str(self.state)}, "logging": {"format": "json"},
               **extra}
        self.config.write_text(yaml.safe_dump(doc))
        self.config.chmod(0o644)
        return self.config


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("ip", "iproute2"), *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def node_view(service):
    """The node as the daemon sees it (the module docstring); removed after the test."""
    root = Path(tempfile.mkdtemp(prefix="fabricmon-deployed-", dir="/tmp"))
    tag = f"{random.randint(0, 0xffff):04x}"
    netdevs = [f"fm{tag}i", f"fm{tag}r"]
    res = _ip("link", "add", netdevs[0], "type", "veth", "peer", "name", netdevs[1])
    if res.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"a veth pair (ip link add ... type veth): {res.stderr.strip()}")
    try:
        for nd in netdevs:
            _ip("link", "set", nd, "up")
        sysfs = sysfs_tree.build(root / "sys", 2)
        ib = sysfs / "class" / "infiniband"
        port = ib / "mlx5_1" / "ports" / "1"
        (port / "link_layer").write_text("Ethernet")
        (port / "rate").write_text("200 Gb/sec (2X NDR)")
        domain = f"{random.randint(0x1000, 0xfffe):04x}"
        pcis = []
        for i, nd in enumerate(netdevs):
            pci = f"{domain}:{0x10 + i:02x}:00.0"
            fn = sysfs / "devices" / f"pci{domain}:00" / pci
            (fn / "net" / nd).mkdir(parents=True)
            (fn / "numa_node").write_text("0")
            os.symlink(os.path.relpath(fn, ib / f"mlx5_{i}"), ib / f"mlx5_{i}" / "device")
            net = sysfs / "class" / "net" / nd
            net.mkdir(parents=True)
            for f, v in (("mtu", "4092" if i == 0 else "9000"), ("speed", "200000"), ("operstate", "up")):
                (net / f).write_text(v)
            pcis.append(pci)
        state = root / "state"
        state.mkdir()
        os.chown(state, service.uid, service.gid)
        state.chmod(int(unit_service().get("StateDirectoryMode", ["0755"])[-1], 8))
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                p = Path(d) / n
                if not p.is_symlink() and p != state:
                    p.chmod(0o755 if p.is_dir() else 0o644)
        root.chmod(0o755)
        view = NodeView(root, sysfs, state, root / "fabricmon.yml", pcis, netdevs)
        view.write_config()
        yield view
    finally:
        _ip("link", "del", netdevs[0])
        shutil.rmtree(root, ignore_errors=True)
