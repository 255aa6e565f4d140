"""docs/architecture.md's statements about where I/O lives, checked on the source (with ast).

- host/ is the host boundary: commands, sysfs/procfs, NVML, SNMP, MADs, /dev/kmsg. Processes, raw
  sockets and foreign libraries (subprocess, ctypes, socket, select) appear nowhere else but in the
  places IO_ELSEWHERE names (the server's sockets, the daemon's mallopt, ...), each for its reason.
- sources/ fetch through HostIO: a source touches no file of the host; what IO_ELSEWHERE lets a
  source do is keep its own files (a state file in the state directory, a tool's private config).
- parsers/ and checks/ and exporter/ do no I/O at all; the model's one file is the counter
  history's save (`fabricmon check` keeps rates between runs).
- the pipeline keeps the state directory's files (the learned inventory, the optics baseline).

The table is kept both ways: every module doing I/O outside host/ and sim/ (the test simulators)
is named with the kinds it does, and every named module still does them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

PKG = REPO / "fabricmon"

# modules whose use is I/O of the process (processes, sockets, foreign libraries, descriptors)
IO_MODULES = {"subprocess", "ctypes", "socket", "select", "selectors", "ssl", "fcntl", "mmap"}
# calls that read or write a file or a directory
FILE_CALLS = {"open", "os.open", "os.fdopen", "os.listdir", "os.scandir", "os.stat", "os.lstat", "os.access",
              "os.path.exists", "os.path.isdir", "os.path.isfile", "os.replace", "os.rename", "os.remove",
              "os.unlink", "os.makedirs", "os.mkdir", "os.chmod", "os.walk", "os.readlink", "os.path.realpath",
              "os.pread", "os.read", "os.write", "write_atomic", "tempfile.mkdtemp", "tempfile.mkstemp",
              "shutil.rmtree", "shutil.copy", "shutil.copytree", "glob.glob", "fcntl.flock"}
FILE_METHODS = (".read_text", ".write_text", ".read_bytes", ".write_bytes")

# module (relative to fabricmon/) -> (the kinds of I/O it does, why it does them outside host/)
IO_ELSEWHERE: dict[str, tuple[set[str], str]] = {
    "config/__init__.py": ({"file"}, "the config file"),
    "cli.py": ({"socket", "file"}, "the commands' own files (capture bundles, `topology` output) and the hostname"),
    "install.py": ({"file"}, "`install`: the operator's files from deploy/"),
    "healthcheck.py": ({"ssl", "file"}, "`check`: its state file, and asking the daemon over HTTPS"),
    "fsutil.py": ({"file"}, "atomic writes, for everyone"),
    "deploy/rules.py": ({"file"}, "the shipped rules, read from the wheel"),
    "pages/__init__.py": ({"file"}, "static files, read from the wheel"),
    "pages/runbooks.py": ({"file"}, "the runbooks, read from the wheel"),
    "pages/html.py": ({"socket"}, "the hostname in the page title"),
    "serve/server.py": ({"socket", "select", "selectors", "ssl"}, "the HTTP(S) server"),
    "serve/webconfig.py": ({"ssl", "file"}, "the exporter-toolkit web config file and its TLS settings"),
    "serve/daemon.py": ({"ctypes"}, "glibc's mallopt (tune_malloc)"),
    "model/history.py": ({"file"}, "CounterHistory.save: `check` keeps rates between runs"),
    "stores/learned.py": ({"file", "fcntl"}, "the learned inventory in the state directory (locked)"),
    "stores/optics_baseline.py": ({"file"}, "the optics baseline in the state directory"),
    "pipeline/fabric_checks.py": ({"file"}, "whether the state directory exists"),
    "sources/kernel_log.py": ({"file"}, "its own state file (the last sequence number) in the state directory"),
    "sources/ethernet/settings.py": ({"file"}, "config: the SNMP secrets file the config names"),
    "sources/ethernet/snmp.py": ({"file"}, "net-snmp's private snmp.conf for the SNMPv3 fallback tools"),
    "sources/infiniband/discovery.py": ({"file"}, "whether its own last complete ibnetdiscover cache is there"),
    "sources/infiniband/mad/__main__.py": ({"file"}, "a debugging aid: reads a topology file it is given"),
    "remediation/record.py": ({"file", "fcntl"}, "the action record in the state directory, the daemon's lock on it "
                              "and `actions undo`'s requests"),
    "remediation/lease.py": ({"file", "fcntl"}, "the `file` lease: an flock on the lease file"),
}
NO_IO = ("parsers", "checks", "exporter")


def io_kinds(path: Path) -> set[str]:
    """The kinds of I/O a module does: the I/O modules it imports, and "file" where it opens, lists,
    stats or writes a file."""
    kinds: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            kinds |= {a.name.split(".")[0] for a in node.names} & IO_MODULES
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in IO_MODULES:
            kinds.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in FILE_CALLS or func.endswith(FILE_METHODS):
                kinds.add("file")
    return kinds


def modules() -> dict[str, Path]:
    return {str(p.relative_to(PKG)): p for p in sorted(PKG.rglob("*.py"))}


def test_io_outside_the_host_layer_is_only_where_the_table_says() -> None:
    found = {rel: io_kinds(p) for rel, p in modules().items()
             if not rel.startswith(("host/", "sim/"))}
    unlisted = [f"{rel}: {sorted(k)}" for rel, k in found.items()
                if k and not k <= IO_ELSEWHERE.get(rel, (set(), ""))[0]]
    assert not unlisted, "I/O outside host/ that IO_ELSEWHERE does not name:\n" + "\n".join(unlisted)
    stale = [f"{rel}: lists {sorted(k)}, does {sorted(found.get(rel, set()))}"
             for rel, (k, _) in IO_ELSEWHERE.items() if found.get(rel, set()) != k]
    assert not stale, "IO_ELSEWHERE names I/O a module no longer does:\n" + "\n".join(stale)


def test_processes_and_foreign_libraries_only_in_the_host_layer() -> None:
    """Commands run only through host/runner.py, libraries load only in host/ (umad, NVML) and the
    daemon's mallopt: no subprocess or ctypes anywhere else under fabricmon/ but the simulators."""
    bad = [f"{rel}: {sorted(io_kinds(p) & {'subprocess', 'ctypes'})}" for rel, p in modules().items()
           if not rel.startswith(("host/", "sim/")) and rel != "serve/daemon.py"
           and io_kinds(p) & {"subprocess", "ctypes"}]
    assert not bad, "\n".join(bad)
    runners = [rel for rel, p in modules().items() if rel.startswith("host/") and "subprocess" in io_kinds(p)]
    assert runners == ["host/runner.py"], runners


def test_parsers_checks_and_exporter_do_no_io() -> None:
    bad = [f"{rel}: {sorted(io_kinds(p))}" for rel, p in modules().items()
           if rel.split("/")[0] in NO_IO and io_kinds(p)]
    assert not bad, "\n".join(bad)


def test_sources_reach_the_host_only_through_hostio() -> None:
    """A source module opens no process, socket or library of its own, and the files it touches are
    its own (IO_ELSEWHERE); everything it reads of the host comes through the HostIO it is given."""
    bad = [f"{rel}: {sorted(k)}" for rel, p in modules().items() if rel.startswith("sources/")
           for k in [io_kinds(p) - {"file"}] if k]
    assert not bad, "\n".join(bad)
    own = sorted(rel for rel in IO_ELSEWHERE if rel.startswith("sources/"))
    assert own == sorted(rel for rel, p in modules().items() if rel.startswith("sources/") and io_kinds(p))


def test_the_document_says_what_this_test_checks() -> None:
    """docs/architecture.md names this test beside its statement of where I/O lives."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert "tests/pipeline/test_architecture_claims.py" in doc
    for rel in IO_ELSEWHERE:
        if rel.startswith("sources/"):
            assert rel.removeprefix("sources/") in doc or rel in doc, rel
