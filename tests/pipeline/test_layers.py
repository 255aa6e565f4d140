"""The layers hold: data flows sources -> parsers -> model -> checks -> exporter, and each
layer imports only what lies before it (checked on the source files, with ast)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

PKG = REPO / "fabricmon"

# layer folder -> modules it must never import
FORBIDDEN = {
    # parsers return records: the model's (record types only), or a parser's own intermediate results
    "parsers": ("fabricmon.sources", "fabricmon.checks", "fabricmon.model.snapshot", "fabricmon.model.history",
                "fabricmon.pipeline", "fabricmon.exporter", "fabricmon.host", "fabricmon.config"),
    # a check declares its settings (a dataclass and its fabricmon.schema) and receives only them
    "checks": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.host", "fabricmon.pipeline",
               "fabricmon.exporter", "fabricmon.config", "fabricmon.config.fabric"),
    # a source receives its SourceConfig (its keys and typed settings), never the whole config
    "sources": ("fabricmon.checks", "fabricmon.exporter", "fabricmon.pipeline.scheduler",
                "fabricmon.pipeline.node", "fabricmon.serve", "fabricmon.config", "fabricmon.config.fabric"),
    "exporter": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.host", "fabricmon.pipeline"),
    # pages read the published snapshot only: no data path of their own
    "pages": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.host", "fabricmon.pipeline", "fabricmon.exporter",
              "fabricmon.serve"),
    # the pipeline runs what the registry holds and reads records by type: it never imports a source
    # (the registry does), never globs devices nor reads a tool's text (a source's failure hint does)
    "pipeline": ("fabricmon.sources", "fabricmon.exporter", "fabricmon.serve", "fabricmon.pages", "fabricmon.cli",
                 "glob"),
    # the host boundary is the bottom layer: device I/O (commands, files, NVML, SNMP, MADs) knows no record
    "host": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.model", "fabricmon.checks", "fabricmon.pipeline",
             "fabricmon.exporter", "fabricmon.serve", "fabricmon.pages", "fabricmon.config"),
    # types flow down: the model holds findings and verdicts as its own types, never a check's; the
    # records live in the model (model/node_records.py, model/fabric.py, ...), which parsers import,
    # never the other way round
    "model": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.pipeline", "fabricmon.checks",
              "fabricmon.exporter", "fabricmon.serve", "fabricmon.config", "fabricmon.config.fabric"),
    # acting is its own layer after the verdict: it reads published snapshots and acts through the host; it
    # never reaches back into what builds them (the pipeline, the sources, the parsers) nor into what shows
    # them (the exporter, the pages, the server); its one use of a source package is the MAD codec's pure
    # encoders (REMEDIATION_ALLOWED)
    # the state directory's stores: above the records and the checks' settings, below what runs them
    "stores": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.pipeline", "fabricmon.exporter",
               "fabricmon.serve", "fabricmon.pages", "fabricmon.cli", "fabricmon.host", "fabricmon.remediation"),
    "remediation": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.pipeline", "fabricmon.exporter",
                    "fabricmon.serve", "fabricmon.pages", "fabricmon.cli"),
}
# what the remediation layer may import of a forbidden package: the SubnSet(PortInfo) encoder it sends
REMEDIATION_ALLOWED = ("fabricmon.sources.infiniband.mad.codec",)
# single modules -> modules they must never import. The config composes the sections the packages
# declare beside their code (the checks' settings, serve/settings.py, sources/<kind>/settings.py):
# it sits above the checks and below the pipeline, and reads a source or serve package only through
# its `settings` module. The registry sits below everything but the schema layer, which imports nothing.
FORBIDDEN_MODULES = {
    "config/__init__.py": ("fabricmon.pipeline", "fabricmon.model", "fabricmon.pages", "fabricmon.cli"),
    "config/fabric.py": ("fabricmon.pipeline", "fabricmon.model", "fabricmon.pages", "fabricmon.cli"),
    "registry.py": ("fabricmon.",),
}
ALLOWED_MODULES = {"registry.py": ("fabricmon.schema",)}
# only the `settings` module of these packages (config/__init__.py, config/fabric.py): e.g. a key the exporter
# reads goes to fabricmon/exporter/settings.py (the pipeline's package imports the config: none there)
SETTINGS_ONLY = ("fabricmon.sources", "fabricmon.serve", "fabricmon.exporter", "fabricmon.remediation")


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_each_layer_imports_only_what_lies_before_it() -> None:
    bad = []
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((PKG / layer).rglob("*.py")):
            for name in imports(path):
                if layer == "remediation" and any(name == a or name.startswith(a + ".") for a in REMEDIATION_ALLOWED):
                    continue
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    bad.append(f"{path.relative_to(REPO)} imports {name}")
    for module, forbidden in FORBIDDEN_MODULES.items():
        for name in imports(PKG / module):
            if any(name == a or name.startswith(a + ".") for a in ALLOWED_MODULES.get(module, ())):
                continue
            if any(name == f or name.startswith(f if f.endswith(".") else f + ".") for f in forbidden):
                bad.append(f"fabricmon/{module} imports {name}")
            elif module != "registry.py" and any(name.startswith(p + ".") for p in SETTINGS_ONLY) \
                    and ".settings" not in name:
                bad.append(f"fabricmon/{module} imports {name}: only a package's settings module")
    assert not bad, "\n".join(bad)


def _module_graph() -> dict[str, set[str]]:
    """fabricmon module -> the fabricmon modules it imports anywhere (top level, in a function or
    under TYPE_CHECKING alike: a type import is a dependency too)."""
    mods = {}
    for path in PKG.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    graph = {}
    for name, path in mods.items():
        deps = set()
        for imp in imports(path):
            while imp and imp not in mods:
                imp = imp.rpartition(".")[0]
            # a module's own packages are initialised before it: not an edge
            if imp and imp != name and not name.startswith(imp + "."):
                deps.add(imp)
        graph[name] = deps
    return graph


def test_no_import_circle() -> None:
    """No module reaches itself through its imports (the config once imported the source
    registry, which imported the snapshot, which imported a check type, which imported the config)."""
    graph = _module_graph()
    circles = []
    state: dict[str, int] = {}          # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                circles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "\n".join(circles)


def test_only_the_nvml_boundary_imports_pynvml() -> None:
    users = [p.relative_to(REPO) for p in PKG.rglob("*.py") if "pynvml" in {n.split(".")[0] for n in imports(p)}]
    assert users == [Path("fabricmon/host/nvml.py")]


def test_hostio_declares_every_method_sources_call() -> None:
    from fabricmon.host.io import HostIO
    declared = {n for n in vars(HostIO) if not n.startswith("_")}
    called = set()
    for path in (PKG / "sources").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "io":
                called.add(node.attr)
    assert called and called <= declared, called - declared
    assert "getattr(io" not in "".join(p.read_text() for p in (PKG / "sources").rglob("*.py"))


def test_sources_do_their_device_io_through_hostio_only() -> None:
    """The MAD engine's I/O (libibumad through ctypes, the umad2sim environment) is the host's
    (host/mad.py): no source loads a library, tests which HostIO it was given or reads the process's
    environment to decide what to reach. The one environment read left in sources/ is Slurm's own
    convention for where slurm.conf is (SLURM_CONF, read once), not device I/O."""
    bad = []
    for path in sorted((PKG / "sources").rglob("*.py")):
        text, rel = path.read_text(), str(path.relative_to(REPO))
        names = imports(path)
        # (a `python -m` entry point builds its own live host: the debugging aid mad/__main__.py)
        bad += [f"{rel} imports {n}" for n in names
                if n.split(".")[0] == "ctypes" or (n.endswith(".LiveIO") and path.name != "__main__.py")]
        if "type(io)" in text or "isinstance(io" in text:
            bad.append(f"{rel} tests which HostIO it has")
        if ("os.environ" in text or "getenv" in text) and rel != "fabricmon/sources/slurm.py":
            bad.append(f"{rel} reads the environment")
    assert not bad, "\n".join(bad)


def test_no_module_imports_a_private_name_of_another() -> None:
    """A helper two modules share is public and named where it belongs (routing and symmetry once
    imported the ECMP check's _ranges): never `from fabricmon.x import _name`."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fabricmon"):
                bad += [f"{path.relative_to(REPO)} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, "\n".join(bad)


def test_one_helper_finds_a_source_state_by_record_type() -> None:
    """`states.values() ... records is` is written once (model.snapshot.source_state)."""
    users = [str(p.relative_to(REPO)) for p in PKG.rglob("*.py") if ".records is " in p.read_text()]
    assert users == ["fabricmon/model/snapshot.py"], users


FABRIC_KINDS = {"ethernet", "infiniband"}
KIND_FREE = ("pipeline", "checks", "model", "exporter", "pages", "serve")


def kind_comparisons(tree: ast.AST) -> list[int]:
    """Lines that compare with a fabric-kind name (`== "ethernet"`, `in ("infiniband", ...)`, a match
    case) or key a mapping by one."""
    def kind_const(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.lower() in FABRIC_KINDS and node.value == node.value.lower()
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(kind_const(e) for e in node.elts)
        return False

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(kind_const(x) for x in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(k is not None and kind_const(k) for k in node.keys):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and kind_const(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.match_case) and any(kind_const(getattr(p, "value", None))
                                                        for p in ast.walk(node.pattern)):
            lines.append(node.pattern.lineno)
    return lines


def test_no_fabric_kind_comparison_outside_the_sources_parsers_host_and_config() -> None:
    """Capabilities, not kinds: a check runs because its inputs are present (pause frames, forwarding
    tables), never because the fabric is Ethernet or InfiniBand. Only sources/, parsers/, host/ and the
    config loader may know the kind; the fabric collector's registry name is the kind itself."""
    bad = []
    for layer in KIND_FREE:
        for path in sorted((PKG / layer).rglob("*.py")):
            bad += [f"{path.relative_to(REPO)}:{n}" for n in kind_comparisons(ast.parse(path.read_text()))]
    assert not bad, "fabric-kind comparisons:\n" + "\n".join(bad)
    # the detector itself finds each form it looks for
    probe = ('if sec.kind == "ethernet": pass\nx = k in ("infiniband", "x")\ny = {"ethernet": 1}\n'
             'w = t["infiniband"]\nmatch k:\n    case "ethernet": pass\n')
    assert kind_comparisons(ast.parse(probe)) == [1, 2, 3, 4, 6]
    assert not kind_comparisons(ast.parse('a = p.link_layer == "Ethernet"\nb = spec.kind != "traffic"\n'))


def test_the_pipeline_names_no_device() -> None:
    """Kind-specific failure reading (the umad devices) lives in the InfiniBand sources."""
    bad = [str(p.relative_to(REPO)) for p in (PKG / "pipeline").rglob("*.py") if "/dev/" in p.read_text()]
    assert not bad, bad


def test_the_model_names_no_source() -> None:
    """Records are picked and ranked by type, never by the name of the source that made them: no
    module of the model compares with a registered source's name, assigns one to a `*source*` field, or
    looks a source's state up by name (`states[...]`, `states.get(...)`). (A source's name is the
    registry's and the config's; the pipeline names a port's counter source for the journal and pages.)"""
    from fabricmon.config import registered
    names = {n for collector in ("node", "infiniband", "ethernet") for n in registered(collector)}

    def named(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    bad = []
    for path in sorted((PKG / "model").rglob("*.py")):
        rel = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(named(x) for x in (node.left, *node.comparators)):
                bad.append(f"{rel}:{node.lineno} compares with a source name")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and named(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any("source" in ast.unparse(t) for t in targets):
                    bad.append(f"{rel}:{node.lineno} assigns a source name")
            elif isinstance(node, ast.Tuple) and any(named(e) for e in node.elts):
                bad.append(f"{rel}:{node.lineno} lists a source name")
            elif isinstance(node, ast.Subscript) and named(node.slice) and "states" in ast.unparse(node.value):
                bad.append(f"{rel}:{node.lineno} looks a source up by name")
            elif isinstance(node, ast.Call) and node.args and named(node.args[0]) \
                    and ast.unparse(node.func).endswith("states.get"):
                bad.append(f"{rel}:{node.lineno} looks a source up by name")
    assert not bad, "\n".join(bad)
