"""`fabricmon install` and `fabricmon uninstall`: lay a node (or a fabric collector's host) down from the
files the wheel carries (fabricmon.deploy), and take it away again.

install, as root:
- the system user `fabricmon` and the group `rdma` (a sysusers.d file, applied with systemd-sysusers;
  useradd/groupadd where that is missing);
- the udev rule that gives the umad device nodes to `rdma`, then `udevadm control --reload` and a
  trigger of the infiniband_mad devices;
- /etc/fabricmon/fabricmon.yml from the example, only when absent (an edited config is never touched),
  and /etc/default/fabricmon (or -fabric), only when absent;
- the unit, with ExecStart pointing at the `fabricmon` of the environment this runs from, then
  `systemctl daemon-reload` (and `enable --now` with --now). Without --node/--fabric, a host that has units
  (an upgrade) gets exactly those rewritten and no other; a host with none, the node's.

`--root DIR` writes every file under DIR and runs nothing on this system (image builders, packagers,
tests); `--dry-run` prints what would be done and changes nothing. uninstall removes the units, the udev
rule and the sysusers.d file, and keeps the config, the defaults files and the state unless --purge.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from fabricmon import __version__, deploy
from fabricmon.deploy import rules as deploy_rules
from fabricmon.host.runner import resolve_program, run_command

COMMAND_TIMEOUT = 60.0          # seconds for one systemctl/udevadm/useradd; the process group is killed after
STATE_DIR = "/var/lib/fabricmon"
CONFIG = "/etc/fabricmon/fabricmon.yml"
UDEV_RULE = "/etc/udev/rules.d/90-fabricmon-umad.rules"
SYSUSERS = "/etc/sysusers.d/fabricmon.conf"
UNIT_DIR = "/etc/systemd/system"
SHIPPED_EXEC = "/opt/fabricmon/bin/fabricmon"      # what the shipped units say; install puts the real path
# the Debian package's program and where its units go (make deb, debian/rules)
PACKAGED_EXEC = "/usr/bin/fabricmon"
PACKAGED_UNIT_DIRS = ("/lib/systemd/system", "/usr/lib/systemd/system")


class InstallError(Exception):
    """Something install cannot do (not root, a command that failed): one line, exit 2."""


@dataclass(frozen=True)
class Role:
    name: str             # "node" or "fabric"
    unit: str             # fabricmon.service
    unit_src: Path
    defaults: str         # /etc/default/fabricmon
    defaults_src: Path


ROLES = {
    "node": Role("node", "fabricmon.service", deploy.NODE_UNIT, "/etc/default/fabricmon", deploy.NODE_DEFAULTS),
    "fabric": Role("fabric", "fabricmon-fabric.service", deploy.FABRIC_UNIT, "/etc/default/fabricmon-fabric",
                   deploy.FABRIC_DEFAULTS),
}


def this_fabricmon() -> str:
    """The `fabricmon` script of the environment this process runs from (a venv's bin/, pipx's, or the
    system's), not a symlink-resolved interpreter path: /opt/fabricmon/bin/fabricmon for a venv there."""
    beside = Path(os.path.abspath(sys.executable)).parent / "fabricmon"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    argv0 = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) == "fabricmon" and os.access(argv0, os.X_OK):
        return argv0
    found = shutil.which("fabricmon")
    if found:
        return os.path.abspath(found)
    raise InstallError("cannot find the fabricmon executable of this environment (run it as <venv>/bin/fabricmon)")


def packaged_unit(exe: str) -> str | None:
    """The Debian package's unit when `exe` is the package's /usr/bin/fabricmon and that unit is installed
    (docs/install-offline.md); None for a venv install."""
    if os.path.realpath(exe) != os.path.realpath(PACKAGED_EXEC):
        return None
    for d in PACKAGED_UNIT_DIRS:
        unit = os.path.join(d, ROLES["node"].unit)
        if os.path.isfile(unit):
            return unit
    return None


def _refuse_packaged(what: str) -> None:
    """install and uninstall on the running system are for a venv install: on a host where the Debian
    package laid fabricmon down, a second copy of the units under /etc/systemd/system would override the
    packaged ones, and uninstall --purge would take the package's conffiles. One line, exit 2."""
    try:
        exe = this_fabricmon()
    except InstallError:
        return
    unit = packaged_unit(exe)
    if unit is None:
        return
    if what == "install":
        raise InstallError(f"fabricmon install: this fabricmon ({exe}) is the Debian package's, which installed its units "
                           f"({unit}), udev rule, user and config already; install is for a venv install (local "
                           "changes to a unit: systemctl edit fabricmon)")
    raise InstallError(f"fabricmon uninstall: this fabricmon ({exe}) is the Debian package's ({unit}): remove it with "
                       "apt remove fabricmon (apt purge fabricmon also removes the config, the state and the user)")


def render_unit(role: Role, exe: str) -> str:
    """The shipped unit with ExecStart on `exe`, and a header saying where it came from."""
    text = role.unit_src.read_text()
    if SHIPPED_EXEC not in text:
        raise InstallError(f"{role.unit_src}: no ExecStart={SHIPPED_EXEC} to point at {exe}")
    if any(c.isspace() or c in "\"'\\$%;" for c in exe):
        raise InstallError(f"{exe}: the fabricmon path has a character a unit's ExecStart cannot take as it is; "
                           "install the venv under a plain path such as /opt/fabricmon")
    header = (f"# Written by `fabricmon install` (fabricmon {__version__}); `fabricmon uninstall` removes it.\n"
              f"# Local changes belong in a drop-in (systemctl edit {role.unit}), which uninstall keeps.\n")
    return header + text.replace(SHIPPED_EXEC, exe)


class Plan:
    """Carries out (or, dry, only reports) each step, printing one line per step."""

    def __init__(self, root: str | None, dry_run: bool, out: TextIO | None = None) -> None:
        self.root = Path(root).resolve() if root else None
        self.dry = dry_run
        self.out = out or sys.stdout
        self.live = self.root is None          # touches the running system (users, udev, systemd)

    def path(self, target: str) -> Path:
        return self.root / target.lstrip("/") if self.root else Path(target)

    def say(self, line: str) -> None:
        print(("would " if self.dry else "") + line, file=self.out)

    def write(self, target: str, data: bytes, mode: int, keep_existing: bool = False) -> bool:
        from fabricmon.fsutil import write_atomic
        p = self.path(target)
        if keep_existing and p.exists():
            print(f"kept {p} (it exists; never overwritten)", file=self.out)
            return False
        existed = p.exists()
        if self.dry:
            self.say(f"{'replace' if existed else 'write'} {p}")
        else:
            print(f"{'replaced' if existed else 'wrote'} {p}", file=self.out)
        if not self.dry:
            write_atomic(str(p), data, mode=mode)
        return True

    def remove(self, target: str) -> None:
        p = self.path(target)
        if not p.exists() and not p.is_symlink():
            return
        self.say(f"remove {p}" if self.dry else f"removed {p}")
        if not self.dry:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()

    def run(self, argv: list[str], required: bool = True) -> bool:
        """A command on the running system; under --root it is skipped and said so."""
        cmd = " ".join(argv)
        if not self.live:
            print(f"skipped (--root): {cmd}", file=self.out)
            return False
        if self.dry:
            self.say(f"run: {cmd}")
            return True
        exe = resolve_program(argv[0])
        if exe is None:
            if required:
                raise InstallError(f"{argv[0]}: not found (needed for: {cmd})")
            print(f"skipped: {cmd} ({argv[0]} not found)", file=self.out)
            return False
        res = run_command(argv, COMMAND_TIMEOUT, executable=exe)
        if not res.ok:
            if required:
                raise InstallError(res.describe())
            print(f"warning: {res.describe()}", file=self.out)
            return False
        print(f"ran: {cmd}", file=self.out)
        return True


NEEDS_ROOT = ("{what} needs root: it writes under /etc and runs systemctl and udevadm. Run it as root "
              "(sudo), or write the files into a directory you own with --root DIR")


def _user() -> str:
    import pwd
    uid = os.geteuid()
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _unwritable(plan: Plan, targets: list[str]) -> str | None:
    """The first directory this user cannot create or replace a target in: the target's directory,
    or the nearest one that exists when it must be created. None when every target can be written."""
    for target in targets:
        d = plan.path(target).parent
        while not d.exists() and d != d.parent:
            d = d.parent
        if d.is_dir() and not os.access(d, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
            return str(d)
    return None


def _preflight(plan: Plan, what: str, targets: list[str]) -> None:
    """Before anything is written or removed: the privilege this needs, said plainly. A real run
    stops (InstallError, exit 2); a dry run says the same as a warning on stderr."""
    problem = None
    if plan.live and os.geteuid() != 0:
        problem = (NEEDS_ROOT.format(what=what) + " (or preview with --dry-run)") if not plan.dry else \
            f"as {_user()} the real run would stop: " + NEEDS_ROOT.format(what=what)
    else:
        d = _unwritable(plan, targets)
        if d is not None:
            owner = _owner(d)
            problem = (f"cannot write {d} (owned by {owner}) as {_user()}: "
                       f"{'nothing would be written' if plan.dry else 'nothing was written'}; "
                       f"{what} needs root: run it as root, or give --root DIR a directory you own")
    if problem is None:
        return
    if not plan.dry:
        raise InstallError(problem)
    print(f"fabricmon: warning: {problem}", file=sys.stderr)


def _owner(path: str) -> str:
    import pwd
    uid = os.stat(path).st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


# what a unit's sandbox hides from the service (systemd.exec(5)): PrivateTmp= gives it empty /tmp and
# /var/tmp, ProtectHome=yes|tmpfs empties /home, /root and /run/user (read-only still lets it run programs)
SANDBOX_HIDES = {
    "PrivateTmp": ({"yes", "true", "on", "1"}, ("/tmp", "/var/tmp")),
    "ProtectHome": ({"yes", "true", "on", "1", "tmpfs"}, ("/home", "/root", "/run/user")),
}


def _interpreter(exe: str) -> str | None:
    """The interpreter of a `#!` script (a venv's bin/fabricmon names the venv's python)."""
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    return words[0] if words else None


def sandbox_hides(unit_text: str, exe: str) -> tuple[str, str, str] | None:
    """(path, directive, hidden dir) when the unit's sandbox hides the program (or the interpreter it
    runs on, either as named or with its symlinks resolved) from the service; None when it can run."""
    settings = {}
    for line in unit_text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in SANDBOX_HIDES:
            settings[key] = value.strip().lower()
    paths = [exe, os.path.realpath(exe)]
    interp = _interpreter(exe)
    if interp:
        paths += [interp, os.path.realpath(interp)]
    for directive, (on, hidden) in SANDBOX_HIDES.items():
        if settings.get(directive) not in on:
            continue
        for path in paths:
            for d in hidden:
                if path == d or path.startswith(d + "/"):
                    return path, directive, d
    return None


def _check_sandbox(plan: Plan, role: Role, exe: str) -> None:
    """A program the unit's sandbox hides would never start: a real install refuses it; under --root
    or --dry-run it is a warning."""
    hit = sandbox_hides(role.unit_src.read_text(), exe)
    if hit is None:
        return
    path, directive, d = hit
    what = "fabricmon" if path in (exe, os.path.realpath(exe)) else "the Python it runs on"
    problem = (f"{role.unit} could not start: {what} is {path}, under {d}, which the unit's {directive}= hides "
               f"from the service; install fabricmon into a venv outside {d} made by the distribution's Python "
               "(/usr/bin/python3 -m venv /opt/fabricmon; not a pyenv or conda python3 under /home or /root)")
    if plan.live and not plan.dry:
        raise InstallError(problem)
    print(f"fabricmon: warning: {problem}", file=sys.stderr)


def _roles(args: argparse.Namespace, default: tuple[str, ...]) -> list[Role]:
    picked = [r for r in ("node", "fabric") if getattr(args, r)]
    return [ROLES[r] for r in (picked or default)]


def _users(plan: Plan) -> None:
    plan.write(SYSUSERS, deploy.SYSUSERS.read_bytes(), 0o644)
    if not plan.live:
        plan.run(["systemd-sysusers", SYSUSERS])
        return
    if plan.dry or resolve_program("systemd-sysusers"):
        plan.run(["systemd-sysusers", SYSUSERS])
        return
    import grp
    import pwd
    try:
        grp.getgrnam("rdma")
    except KeyError:
        plan.run(["groupadd", "--system", "rdma"])
    try:
        pwd.getpwnam("fabricmon")
    except KeyError:
        plan.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", STATE_DIR,
                  "--shell", "/usr/sbin/nologin", "--comment", "fabricmon daemon", "fabricmon"])


# what an operator sets after a first install of each kind, before enabling its unit
NEXT_STEP = {
    "node": "set expected_links in {config} (uncomment the example of your fabric)",
    "fabric": ("check the fabric: section of {config}: fabric.kind (infiniband, the default; ethernet needs "
               "fabric.ethernet.switches: docs/ethernet.md) and fabric.sources.design.path, the cabling as designed "
               "(fabricmon fabric design save FILE writes it: docs/design.md)"),
}


def _installed(plan: Plan) -> list[Role]:
    """The units this host (or --root tree) already has: what a plain `install` refreshes on an upgrade."""
    return [r for r in ROLES.values() if plan.path(f"{UNIT_DIR}/{r.unit}").exists()]


def _next_steps(plan: Plan, roles: list[Role], had: list[Role]) -> None:
    """One `next:` line per kind: a unit installed now is configured, then enabled; a unit that was there
    (an upgrade) is restarted if it runs (try-restart), the config being kept."""
    enable = f"systemctl --root {plan.root} enable" if plan.root else "systemctl enable --now"
    config = str(plan.path(CONFIG))
    refreshed = [r.unit for r in roles if r in had]
    for role in roles:
        if role not in had:
            print(f"next: {NEXT_STEP[role.name].format(config=config)}, then: {enable} {role.unit}", file=plan.out)
    if refreshed and plan.live:
        print(f"next: systemctl try-restart {' '.join(refreshed)} (restarts what runs; the config was kept: "
              "a key this version renamed stops it with `config error at <key>`, docs/upgrading.md)", file=plan.out)


def install(args: argparse.Namespace, out: TextIO | None = None) -> int:
    plan = Plan(args.root, args.dry_run, out)
    if plan.live:
        _refuse_packaged("install")
    had = _installed(plan)
    # --node/--fabric: those units; neither: the units installed (an upgrade writes no unit the host never
    # had: a collector-only host gets no node daemon), or the node's on a host with none
    roles = _roles(args, tuple(r.name for r in had) or ("node",))
    targets = [SYSUSERS, UDEV_RULE, CONFIG, *(r.defaults for r in roles), *(f"{UNIT_DIR}/{r.unit}" for r in roles)]
    _preflight(plan, "fabricmon install", targets)
    exe = this_fabricmon()
    units = [(role, render_unit(role, exe)) for role in roles]     # fail before writing anything
    for role in roles:
        _check_sandbox(plan, role, exe)
    if had and not (args.node or args.fabric):
        others = [r for r in ROLES.values() if r not in had]
        print(f"refreshing the installed {' and '.join(r.unit for r in had)}"
              + "".join(f" (fabricmon install --{r.name} adds {r.unit})" for r in others), file=plan.out)
    _users(plan)
    plan.write(UDEV_RULE, deploy.UDEV_RULE.read_bytes(), 0o644)
    plan.run(["udevadm", "control", "--reload"], required=False)
    plan.run(["udevadm", "trigger", "--subsystem-match=infiniband_mad", "--action=change"], required=False)
    plan.write(CONFIG, deploy.EXAMPLE_CONFIG.read_bytes(), 0o644, keep_existing=True)
    for role, text in units:
        plan.write(role.defaults, role.defaults_src.read_bytes(), 0o644, keep_existing=True)
        plan.write(f"{UNIT_DIR}/{role.unit}", text.encode(), 0o644)
    plan.run(["systemctl", "daemon-reload"], required=False)
    if args.now:
        plan.run(["systemctl", "enable", "--now", *[role.unit for role, _ in units]])
    elif not plan.dry:
        _next_steps(plan, roles, had)
    return 0


def uninstall(args: argparse.Namespace, out: TextIO | None = None) -> int:
    plan = Plan(args.root, args.dry_run, out)
    if plan.live:
        _refuse_packaged("uninstall")
    roles = _roles(args, ("node", "fabric"))
    _preflight(plan, "fabricmon uninstall",
               [t for t in (*(f"{UNIT_DIR}/{r.unit}" for r in roles), UDEV_RULE, SYSUSERS,
                            *((*(r.defaults for r in roles), CONFIG, STATE_DIR) if args.purge else ()))
                if plan.path(t).exists() or plan.path(t).is_symlink()])
    for role in roles:
        if plan.path(f"{UNIT_DIR}/{role.unit}").exists():
            plan.run(["systemctl", "disable", "--now", role.unit], required=False)
        plan.remove(f"{UNIT_DIR}/{role.unit}")
    others = [r for r in ROLES.values() if r not in roles and plan.path(f"{UNIT_DIR}/{r.unit}").exists()]
    if not others:                   # the shared pieces go with the last unit
        plan.remove(UDEV_RULE)
        plan.run(["udevadm", "control", "--reload"], required=False)
        plan.remove(SYSUSERS)
    plan.run(["systemctl", "daemon-reload"], required=False)
    if args.purge:
        for role in roles:
            plan.remove(role.defaults)
        if not others:
            plan.remove(CONFIG)
            if plan.path(os.path.dirname(CONFIG)).is_dir() and not any(plan.path(os.path.dirname(CONFIG)).iterdir()):
                plan.remove(os.path.dirname(CONFIG))
            plan.remove(STATE_DIR)
            if plan.live:
                import pwd
                try:
                    pwd.getpwnam("fabricmon")
                    plan.run(["userdel", "fabricmon"], required=False)
                except KeyError:
                    pass
    else:
        kept = [str(plan.path(p)) for p in (CONFIG, *(r.defaults for r in roles), STATE_DIR) if plan.path(p).exists()]
        if kept:
            print(f"kept {', '.join(kept)} (--purge removes them)", file=plan.out)
    return 0


def print_files(kind: str, dest: str, out: TextIO | None = None,
                rules_options: dict[str, str | None] | None = None) -> int:
    """Copy the shipped files of one kind (rules, dashboards, ...) of this version into `dest`. With
    rules_options (runbook_base, selector, fabric_selector, state_selector, fabric_state_selector) the rules are
    fitted to the site
    (deploy/rules.py); their promtool tests, written for the shipped selectors, are then left out."""
    out = out or sys.stdout
    opts = {k: v for k, v in (rules_options or {}).items() if v}
    kinds = list(deploy.PRINTABLE) if kind == "all" else [kind]
    fitted = deploy_rules.render(**opts) if opts and "rules" in kinds else None      # bad options: nothing written
    d = Path(dest)
    d.mkdir(parents=True, exist_ok=True)
    for k in kinds:
        for src in deploy.PRINTABLE[k]:
            target = d / src.name
            if fitted is not None and src == deploy.RULE_TESTS:
                print(f"left out {src.name}: its tests are written for the shipped selectors and runbook URLs",
                      file=out)
                continue
            if fitted is not None and src == deploy.RULES:
                target.write_text(fitted)
            else:
                shutil.copyfile(src, target)
            os.chmod(target, 0o755 if src.suffix == ".sh" else 0o644)
            print(target, file=out)
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kinds = [*deploy.PRINTABLE, "all"]
    sp = sub.add_parser("install", help="as root: user, udev rule, config, unit and daemon-reload (--root DIR, "
                                        "--dry-run); --print KIND DIR copies rules, dashboards, ... out")
    sp.add_argument("--node", action="store_true", help="the node daemon's unit (the default on a host with no unit; with "
                    "neither option, a host that has units gets those refreshed and no other)")
    sp.add_argument("--fabric", action="store_true", help="the fabric collector's unit (with --node: both)")
    sp.add_argument("--root", metavar="DIR", help="write under DIR and run nothing on this system")
    sp.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    sp.add_argument("--now", action="store_true", help="also systemctl enable --now the unit(s)")
    sp.add_argument("--print", nargs=2, metavar=("KIND", "DIR"), dest="print_files",
                    help=f"copy this version's files of KIND ({', '.join(kinds)}) into DIR, and nothing else")
    sp.add_argument("--runbook-base", metavar="URL", help="with --print rules: runbook_url is URL#<alert> (default: "
                    "http://<instance>/runbooks#<alert>, served by the daemon that raised the alert)")
    sp.add_argument("--selector", metavar="MATCHERS", help="with --print rules: the node daemons' scrape selector "
                    "(default: 'job=\"fabricmon\"')")
    sp.add_argument("--fabric-selector", metavar="MATCHERS", help="with --print rules: the fabric collectors' "
                    "scrape selector (default: 'job=\"fabricmon-fabric\"')")
    sp.add_argument("--state-selector", metavar="MATCHERS", help="with --print rules: the node daemons' state scrape "
                    "(collect[]=state, the port-down alerts' fast path; default: 'job=\"fabricmon-state\"')")
    sp.add_argument("--fabric-state-selector", metavar="MATCHERS", help="with --print rules: the fabric collectors' "
                    "state scrape (default: 'job=\"fabricmon-fabric-state\"')")
    sp.set_defaults(func=_cmd_install)
    sp = sub.add_parser("uninstall", help="as root: remove the units, udev rule and sysusers file; "
                                          "keep config and state unless --purge")
    sp.add_argument("--node", action="store_true", help="only the node daemon's unit")
    sp.add_argument("--fabric", action="store_true", help="only the fabric collector's unit")
    sp.add_argument("--root", metavar="DIR", help="remove under DIR and run nothing on this system")
    sp.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    sp.add_argument("--purge", action="store_true",
                    help="also remove /etc/fabricmon, the defaults files, /var/lib/fabricmon and the fabricmon user")
    sp.set_defaults(func=_cmd_uninstall)


def _cmd_install(args: argparse.Namespace) -> int:
    try:
        if args.print_files:
            kind, dest = args.print_files
            if kind not in deploy.PRINTABLE and kind != "all":
                raise InstallError(f"--print: unknown kind {kind!r} (one of {', '.join([*deploy.PRINTABLE, 'all'])})")
            try:
                return print_files(kind, dest, rules_options={"runbook_base": args.runbook_base, "selector": args.selector,
                                                              "fabric_selector": args.fabric_selector,
                                                              "state_selector": args.state_selector,
                                                              "fabric_state_selector": args.fabric_state_selector})
            except deploy_rules.RulesError as exc:
                raise InstallError(str(exc)) from exc
        if args.runbook_base or args.selector or args.fabric_selector or args.state_selector or args.fabric_state_selector:
            raise InstallError("--runbook-base, --selector, --fabric-selector, --state-selector and "
                               "--fabric-state-selector go with --print rules DIR")
        return install(args)
    except OSError as exc:           # a file that cannot be written: one line, not a traceback
        raise InstallError(str(exc)) from exc


def _cmd_uninstall(args: argparse.Namespace) -> int:
    try:
        return uninstall(args)
    except OSError as exc:
        raise InstallError(str(exc)) from exc


__all__ = ["InstallError", "add_parsers", "install", "packaged_unit", "print_files", "render_unit", "this_fabricmon",
           "uninstall"]
