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
  `systemctl daemon-reload` (and `enable --now` with --now).

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

    def __init__(self, root: str | None, dry_run: bool, out=None) -> None:
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


def _require_root(plan: Plan, what: str) -> None:
    if plan.live and not plan.dry and os.geteuid() != 0:
        raise InstallError(f"{what} changes the system: run it as root (or use --root DIR or --dry-run)")


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


def install(args: argparse.Namespace, out=None) -> int:
    plan = Plan(args.root, args.dry_run, out)
    _require_root(plan, "fabricmon install")
    roles = _roles(args, ("node",))
    exe = this_fabricmon()
    units = [(role, render_unit(role, exe)) for role in roles]     # fail before writing anything
    if exe.startswith(("/home/", "/root/")):
        print(f"warning: {exe} is under /home or /root, which the unit's ProtectHome=yes hides from the service: "
              "install fabricmon into a venv such as /opt/fabricmon", file=plan.out)
    _users(plan)
    plan.write(UDEV_RULE, deploy.UDEV_RULE.read_bytes(), 0o644)
    plan.run(["udevadm", "control", "--reload"], required=False)
    plan.run(["udevadm", "trigger", "--subsystem-match=infiniband_mad", "--action=change"], required=False)
    plan.write(CONFIG, deploy.EXAMPLE_CONFIG.read_bytes(), 0o644, keep_existing=True)
    for role, text in units:
        plan.write(role.defaults, role.defaults_src.read_bytes(), 0o644, keep_existing=True)
        plan.write(f"{UNIT_DIR}/{role.unit}", text.encode(), 0o644)
    plan.run(["systemctl", "daemon-reload"], required=False)
    names = " ".join(role.unit for role, _ in units)
    if args.now:
        plan.run(["systemctl", "enable", "--now", *[role.unit for role, _ in units]])
    elif plan.live and not plan.dry:
        print(f"next: set expected_links in {CONFIG}, then: systemctl enable --now {names}", file=plan.out)
    return 0


def uninstall(args: argparse.Namespace, out=None) -> int:
    plan = Plan(args.root, args.dry_run, out)
    _require_root(plan, "fabricmon uninstall")
    roles = _roles(args, ("node", "fabric"))
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


def print_files(kind: str, dest: str, out=None, rules_options: dict | None = None) -> int:
    """Copy the shipped files of one kind (rules, dashboards, ...) of this version into `dest`. With
    rules_options (runbook_base, selector, fabric_selector) the rules are fitted to the site
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    kinds = [*deploy.PRINTABLE, "all"]
    sp = sub.add_parser("install", help="as root: user, udev rule, config, unit and daemon-reload (--root DIR, "
                                        "--dry-run); --print KIND DIR copies rules, dashboards, ... out")
    sp.add_argument("--node", action="store_true", help="the node daemon's unit (the default)")
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
                                                              "fabric_selector": args.fabric_selector})
            except deploy_rules.RulesError as exc:
                raise InstallError(str(exc)) from exc
        if args.runbook_base or args.selector or args.fabric_selector:
            raise InstallError("--runbook-base, --selector and --fabric-selector go with --print rules DIR")
        return install(args)
    except OSError as exc:           # a file that cannot be written: one line, not a traceback
        raise InstallError(str(exc)) from exc


def _cmd_uninstall(args: argparse.Namespace) -> int:
    try:
        return uninstall(args)
    except OSError as exc:
        raise InstallError(str(exc)) from exc


__all__ = ["InstallError", "add_parsers", "install", "print_files", "render_unit", "this_fabricmon", "uninstall"]
