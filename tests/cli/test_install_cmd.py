"""`fabricmon install` / `uninstall` in-process, under --root (nothing on this system is touched):
what is written where, what is kept, what --dry-run and --print do, and the one-line errors.
tests/ship/test_wheel_install.py does the same from a built wheel in a fresh venv, with systemd-analyze."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fabricmon import cli, deploy, install
from helpers import as_ordinary_user

WRITTEN = ("etc/fabricmon/fabricmon.yml", "etc/default/fabricmon", "etc/systemd/system/fabricmon.service",
           "etc/udev/rules.d/90-fabricmon-umad.rules", "etc/sysusers.d/fabricmon.conf")


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_install_under_root_writes_every_file_and_runs_nothing(tmp_path: Path, capsys) -> None:
    assert cli.main(["install", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert files(tmp_path) == set(WRITTEN)
    assert (tmp_path / "etc/fabricmon/fabricmon.yml").read_bytes() == deploy.EXAMPLE_CONFIG.read_bytes()
    assert (tmp_path / "etc/udev/rules.d/90-fabricmon-umad.rules").read_bytes() == deploy.UDEV_RULE.read_bytes()
    unit = (tmp_path / "etc/systemd/system/fabricmon.service").read_text()
    assert f"\nExecStart={install.this_fabricmon()} run $FABRICMON_ARGS\n" in unit
    assert install.SHIPPED_EXEC not in unit and "install -m" not in unit
    for cmd in ("systemd-sysusers", "udevadm control --reload", "systemctl daemon-reload"):
        assert f"skipped (--root): {cmd}" in out
    assert oct((tmp_path / "etc/systemd/system/fabricmon.service").stat().st_mode & 0o777) == "0o644"


def test_a_second_install_keeps_an_edited_config_and_defaults(tmp_path: Path, capsys) -> None:
    cli.main(["install", "--root", str(tmp_path)])
    cfg = tmp_path / "etc/fabricmon/fabricmon.yml"
    cfg.write_text("server: {port: 9999}\n")
    (tmp_path / "etc/default/fabricmon").write_text('FABRICMON_ARGS="--listen 10.0.0.1:9879"\n')
    (tmp_path / "etc/systemd/system/fabricmon.service").write_text("stale\n")
    capsys.readouterr()
    assert cli.main(["install", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert cfg.read_text() == "server: {port: 9999}\n"
    assert f"kept {cfg} (it exists; never overwritten)" in out
    assert "10.0.0.1" in (tmp_path / "etc/default/fabricmon").read_text()
    assert "ExecStart=" in (tmp_path / "etc/systemd/system/fabricmon.service").read_text()   # the unit is ours


def test_fabric_instead_or_as_well(tmp_path: Path) -> None:
    cli.main(["install", "--root", str(tmp_path / "a"), "--fabric"])
    got = files(tmp_path / "a")
    assert "etc/systemd/system/fabricmon-fabric.service" in got and "etc/default/fabricmon-fabric" in got
    assert "etc/systemd/system/fabricmon.service" not in got
    cli.main(["install", "--root", str(tmp_path / "b"), "--fabric", "--node"])
    got = files(tmp_path / "b")
    assert {"etc/systemd/system/fabricmon-fabric.service", "etc/systemd/system/fabricmon.service"} <= got
    unit = (tmp_path / "b/etc/systemd/system/fabricmon-fabric.service").read_text()
    assert f"\nExecStart={install.this_fabricmon()} fabric run $FABRICMON_FABRIC_ARGS\n" in unit


def test_an_upgrade_refreshes_the_units_installed_and_writes_none_the_host_never_had(tmp_path: Path, capsys) -> None:
    """The README's upgrade (`fabricmon install` after pip install --upgrade) on a collector-only host:
    its fabric unit is rewritten (ExecStart on this environment), no node unit or node defaults appear.
    With both units, both are rewritten; with none, the node's is installed as on a first install."""
    exe = install.this_fabricmon()
    fabric_unit = tmp_path / "collector/etc/systemd/system/fabricmon-fabric.service"
    cli.main(["install", "--root", str(tmp_path / "collector"), "--fabric"])
    fabric_unit.write_text(fabric_unit.read_text().replace(exe, "/opt/old-fabricmon/bin/fabricmon"))
    capsys.readouterr()
    assert cli.main(["install", "--root", str(tmp_path / "collector")]) == 0
    out = capsys.readouterr().out
    got = files(tmp_path / "collector")
    assert "etc/systemd/system/fabricmon.service" not in got and "etc/default/fabricmon" not in got, got
    assert f"\nExecStart={exe} fabric run $FABRICMON_FABRIC_ARGS\n" in fabric_unit.read_text()
    assert f"replaced {fabric_unit}" in out, out
    assert "refreshing the installed fabricmon-fabric.service (fabricmon install --node adds fabricmon.service)" in out
    assert "expected_links" not in out, out
    # both units: both refreshed
    cli.main(["install", "--root", str(tmp_path / "both"), "--node", "--fabric"])
    units = [tmp_path / "both/etc/systemd/system" / u for u in ("fabricmon.service", "fabricmon-fabric.service")]
    for u in units:
        u.write_text(u.read_text().replace(exe, "/opt/old-fabricmon/bin/fabricmon"))
    assert cli.main(["install", "--root", str(tmp_path / "both")]) == 0
    for u in units:
        assert "/opt/old-fabricmon" not in u.read_text() and f"ExecStart={exe} " in u.read_text(), u
    # nothing installed: the node daemon, as on a first install
    assert cli.main(["install", "--root", str(tmp_path / "fresh")]) == 0
    assert files(tmp_path / "fresh") == set(WRITTEN)


def test_each_kind_says_its_own_next_step(tmp_path: Path, capsys) -> None:
    cli.main(["install", "--root", str(tmp_path / "f"), "--fabric"])
    nxt = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("next: ")]
    assert len(nxt) == 1 and "fabric.kind" in nxt[0] and "expected_links" not in nxt[0], nxt
    assert nxt[0].endswith(f"then: systemctl --root {tmp_path / 'f'} enable fabricmon-fabric.service"), nxt
    cli.main(["install", "--root", str(tmp_path / "n")])
    nxt = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("next: ")]
    assert len(nxt) == 1 and "expected_links" in nxt[0] and "fabric.kind" not in nxt[0], nxt
    cli.main(["install", "--root", str(tmp_path / "b"), "--node", "--fabric"])
    nxt = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("next: ")]
    assert [("expected_links" in ln, "fabric.kind" in ln) for ln in nxt] == [(True, False), (False, True)], nxt
    cli.main(["install", "--root", str(tmp_path / "b")])            # an upgrade: nothing to set (under --root)
    assert "next: " not in capsys.readouterr().out
    # on the running system an upgraded unit is restarted where it runs, and none is configured again
    buf = io.StringIO()
    install._next_steps(install.Plan(None, False, buf), [install.ROLES["fabric"]], [install.ROLES["fabric"]])
    assert buf.getvalue().startswith("next: systemctl try-restart fabricmon-fabric.service ("), buf.getvalue()
    assert buf.getvalue().count("\n") == 1 and "fabric.kind" not in buf.getvalue()


def test_dry_run_changes_nothing(tmp_path: Path, capsys) -> None:
    assert cli.main(["install", "--root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert files(tmp_path) == set()
    assert f"would write {tmp_path}/etc/systemd/system/fabricmon.service" in out
    cli.main(["install", "--root", str(tmp_path)])
    before = {p: (tmp_path / p).read_bytes() for p in files(tmp_path)}
    capsys.readouterr()
    assert cli.main(["uninstall", "--root", str(tmp_path), "--purge", "--dry-run"]) == 0
    assert f"would remove {tmp_path}/etc/fabricmon/fabricmon.yml" in capsys.readouterr().out
    assert {p: (tmp_path / p).read_bytes() for p in files(tmp_path)} == before


def test_uninstall_keeps_config_and_state_unless_purge(tmp_path: Path, capsys) -> None:
    cli.main(["install", "--root", str(tmp_path), "--node", "--fabric"])
    (tmp_path / "var/lib/fabricmon").mkdir(parents=True)
    (tmp_path / "var/lib/fabricmon/check-state.json").write_text("{}")
    (tmp_path / "etc/systemd/system/fabricmon.service.d").mkdir()          # an operator's drop-in stays
    (tmp_path / "etc/systemd/system/fabricmon.service.d/local.conf").write_text("[Service]\n")
    # the node unit only: the shared udev rule and sysusers file stay for the collector
    assert cli.main(["uninstall", "--root", str(tmp_path), "--node"]) == 0
    got = files(tmp_path)
    assert "etc/systemd/system/fabricmon.service" not in got
    assert {"etc/systemd/system/fabricmon-fabric.service", "etc/udev/rules.d/90-fabricmon-umad.rules",
            "etc/sysusers.d/fabricmon.conf"} <= got
    assert cli.main(["uninstall", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert files(tmp_path) == {"etc/fabricmon/fabricmon.yml", "etc/default/fabricmon", "etc/default/fabricmon-fabric",
                               "var/lib/fabricmon/check-state.json",
                               "etc/systemd/system/fabricmon.service.d/local.conf"}
    assert "(--purge removes them)" in out
    assert cli.main(["uninstall", "--root", str(tmp_path), "--purge"]) == 0
    assert files(tmp_path) == {"etc/systemd/system/fabricmon.service.d/local.conf"}
    assert not (tmp_path / "etc/fabricmon").exists() and not (tmp_path / "var/lib/fabricmon").exists()


def test_print_writes_this_versions_rules_and_dashboards(tmp_path: Path, capsys) -> None:
    assert cli.main(["install", "--print", "rules", str(tmp_path / "rules")]) == 0
    assert (tmp_path / "rules/fabricmon.rules.yml").read_bytes() == deploy.RULES.read_bytes()
    assert (tmp_path / "rules/fabricmon.rules.test.yml").read_bytes() == deploy.RULE_TESTS.read_bytes()
    assert cli.main(["install", "--print", "dashboards", str(tmp_path / "dash")]) == 0
    assert sorted(p.name for p in (tmp_path / "dash").iterdir()) == ["fabricmon-fabric.json", "fabricmon-node.json"]
    assert cli.main(["install", "--print", "wrappers", str(tmp_path / "wr")]) == 0
    assert os.access(tmp_path / "wr/fabricmon-healthcheck.sh", os.X_OK)
    printed = capsys.readouterr().out.split()
    assert str(tmp_path / "rules/fabricmon.rules.yml") in printed
    assert cli.main(["install", "--print", "all", str(tmp_path / "all")]) == 0
    assert len(list((tmp_path / "all").iterdir())) == sum(len(v) for v in deploy.PRINTABLE.values())


def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    assert cli.main(["install", "--print", "grafana", str(tmp_path)]) == 2
    assert "unknown kind 'grafana'" in capsys.readouterr().err
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for argv in (["install"], ["uninstall"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "needs root" in err and "--root DIR" in err and "--dry-run" in err, err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cli.main(["install", "--root", str(blocked)]) == 2                 # not a directory
    assert capsys.readouterr().err.startswith("fabricmon: ")


def test_the_unit_refuses_a_path_it_cannot_carry() -> None:
    with pytest.raises(install.InstallError, match="plain path"):
        install.render_unit(install.ROLES["node"], "/opt/my venv/bin/fabricmon")


def test_the_fabricmon_of_this_environment() -> None:
    exe = install.this_fabricmon()
    assert Path(exe).name == "fabricmon" and os.access(exe, os.X_OK)
    assert Path(exe).parent == Path(os.path.abspath(sys.executable)).parent


def test_dry_run_on_the_running_system_names_every_command_and_runs_none(capsys, monkeypatch) -> None:
    ran = []
    monkeypatch.setattr(install, "run_command", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)           # not root: fine for a dry run
    assert cli.main(["install", "--dry-run", "--fabric"]) == 0
    out = capsys.readouterr().out
    for line in ("would run: systemd-sysusers /etc/sysusers.d/fabricmon.conf",
                 "would run: udevadm control --reload",
                 "would run: udevadm trigger --subsystem-match=infiniband_mad --action=change",
                 "would run: systemctl daemon-reload",
                 "/etc/systemd/system/fabricmon-fabric.service"):
        assert line in out, out
    assert ran == []


# --- privilege: checked before anything is written, and said plainly ----------------------------

def as_user(argv: list[str]) -> subprocess.CompletedProcess:
    """fabricmon as an ordinary user, without a home."""
    return as_ordinary_user(argv, {**os.environ, "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.fixture
def unwritable_tree():
    """A tree the ordinary user cannot write: root's (0755) when the tests run as root, else our own
    at 0555. Under /tmp, not pytest's 0700 tmp_path, so that nobody can reach it."""
    d = Path(tempfile.mkdtemp(prefix="fabricmon-rootowned-"))
    (d / "etc").mkdir()
    for p in (d, d / "etc"):
        p.chmod(0o755 if os.geteuid() == 0 else 0o555)
    try:
        yield d
    finally:
        for p in (d, d / "etc"):
            p.chmod(0o755)
        shutil.rmtree(d)


def test_install_as_an_ordinary_user_into_a_root_owned_tree_writes_nothing_and_says_why(unwritable_tree) -> None:
    res = as_user(["install", "--root", str(unwritable_tree)])
    assert res.returncode == 2, res.stdout + res.stderr
    assert "wrote" not in res.stdout and "Errno" not in res.stderr, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"fabricmon: cannot write {unwritable_tree}"), res.stderr
    assert "nothing was written" in res.stderr and "as root" in res.stderr and "--root DIR" in res.stderr, res.stderr
    assert sorted(p.name for p in unwritable_tree.rglob("*")) == ["etc"]
    # uninstall the same way: checked before anything is removed
    res = as_user(["uninstall", "--root", str(unwritable_tree)])
    assert res.returncode == 0 and "removed" not in res.stdout, res.stdout + res.stderr   # nothing there to remove


def test_dry_run_as_an_ordinary_user_says_what_privilege_it_needs(unwritable_tree) -> None:
    res = as_user(["install", "--dry-run"])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "would write /etc/systemd/system/fabricmon.service" in res.stdout
    lines = res.stderr.splitlines()
    assert lines and all(ln.startswith("fabricmon: warning: ") for ln in lines), res.stderr
    assert "needs root" in lines[0] and "--root DIR" in lines[0] and "real run would stop" in lines[0], res.stderr
    res = as_user(["install", "--dry-run", "--root", str(unwritable_tree)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"cannot write {unwritable_tree}" in res.stderr and "nothing would be written" in res.stderr, res.stderr


def test_live_install_as_an_ordinary_user_says_it_needs_root(capsys, monkeypatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["install"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs root" in err and "--root DIR" in err, err


# --- an ExecStart the unit's sandbox hides ---------------------------------------------------------

@pytest.mark.parametrize("exe,hidden", [
    ("/tmp/venv/bin/fabricmon", ("PrivateTmp", "/tmp")),
    ("/var/tmp/fm/bin/fabricmon", ("PrivateTmp", "/var/tmp")),
    ("/home/alice/venv/bin/fabricmon", ("ProtectHome", "/home")),
    ("/root/venv/bin/fabricmon", ("ProtectHome", "/root")),
    ("/opt/fabricmon/bin/fabricmon", None),
    ("/tmpfoo/bin/fabricmon", None),
])
def test_the_shipped_units_sandbox_hides_tmp_and_home(exe: str, hidden) -> None:
    for role in install.ROLES.values():
        hit = install.sandbox_hides(role.unit_src.read_text(), exe)
        assert (hit[1:] if hit else None) == hidden, (role.unit, hit)
    assert install.sandbox_hides("[Service]\nPrivateTmp=no\nProtectHome=read-only\n", "/tmp/x/fabricmon") is None


def fake_venv(base: Path, python: str = "/usr/bin/python3") -> str:
    exe = base / "venv" / "bin" / "fabricmon"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!{python}\nimport sys\n")
    exe.chmod(0o755)
    return str(exe)


def test_install_refuses_a_venv_under_tmp_that_private_tmp_hides(tmp_path: Path, capsys, monkeypatch) -> None:
    """A venv under /tmp: the service would get an empty /tmp and never start. A real install stops before
    writing anything; --dry-run and --root say so as a warning."""
    assert str(tmp_path).startswith("/tmp/"), tmp_path
    exe = fake_venv(tmp_path)
    monkeypatch.setattr(install, "this_fabricmon", lambda: exe)
    monkeypatch.setattr(install, "run_command", lambda *a, **k: pytest.fail(f"ran {a}"))

    def no_writes(*a, **k):
        raise AssertionError("install wrote before refusing")
    monkeypatch.setattr(install, "_users", no_writes)
    monkeypatch.setattr(install.Plan, "write", no_writes)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cli.main(["install"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"is {exe}, under /tmp" in err and "PrivateTmp=" in err, err
    assert "/opt/fabricmon" in err
    monkeypatch.undo()
    monkeypatch.setattr(install, "this_fabricmon", lambda: exe)
    assert cli.main(["install", "--root", str(tmp_path / "root")]) == 0          # an image: warned
    err = capsys.readouterr().err
    assert err.startswith("fabricmon: warning: fabricmon.service could not start: ") and "PrivateTmp=" in err, err


def test_an_interpreter_under_root_is_hidden_too(tmp_path: Path) -> None:
    """/opt/fabricmon made from a Python under /root (pyenv): the unit's ProtectHome= hides the interpreter."""
    exe = fake_venv(tmp_path, "/root/.pyenv/versions/3.11.7/bin/python3")
    # (tmp_path is itself under /tmp: the shipped unit without PrivateTmp=, so that the interpreter is what it finds)
    unit = "".join(ln for ln in install.ROLES["node"].unit_src.read_text().splitlines(True)
                   if not ln.startswith("PrivateTmp="))
    assert install.sandbox_hides(unit, exe) == ("/root/.pyenv/versions/3.11.7/bin/python3", "ProtectHome", "/root")


def test_install_and_uninstall_refuse_where_the_debian_package_installed_fabricmon(tmp_path: Path, capsys,
                                                                                 monkeypatch) -> None:
    """On a host where `apt install ./fabricmon_*.deb` laid fabricmon down (/usr/bin/fabricmon, its units in
    /lib/systemd/system), install would put a second copy of the units in /etc/systemd/system, overriding the
    packaged ones, and uninstall --purge would take the package's conffiles: both say so in one line, exit 2,
    and touch nothing, dry run or not. --root (an image) and --print still work."""
    (tmp_path / "fabricmon.service").write_text("[Service]\n")
    monkeypatch.setattr(install, "PACKAGED_UNIT_DIRS", (str(tmp_path),))
    monkeypatch.setattr(install, "this_fabricmon", lambda: install.PACKAGED_EXEC)
    monkeypatch.setattr(install, "run_command", lambda *a, **k: pytest.fail(f"ran {a}"))
    monkeypatch.setattr(install.Plan, "write", lambda *a, **k: pytest.fail("wrote"))
    monkeypatch.setattr(install.Plan, "remove", lambda *a, **k: pytest.fail("removed"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    for argv, says in ((["install"], "install is for a venv install"), (["install", "--dry-run"], "Debian package's"),
                       (["uninstall", "--purge"], "apt remove fabricmon")):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err and f"({tmp_path / 'fabricmon.service'})" in err, err
    monkeypatch.undo()
    monkeypatch.setattr(install, "PACKAGED_UNIT_DIRS", (str(tmp_path),))
    monkeypatch.setattr(install, "this_fabricmon", lambda: install.PACKAGED_EXEC)
    assert cli.main(["install", "--root", str(tmp_path / "image")]) == 0
    assert install.packaged_unit("/opt/fabricmon/bin/fabricmon") is None       # a venv's: not the package's
