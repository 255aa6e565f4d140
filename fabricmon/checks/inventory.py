"""Expected inventory: the ports the config says this node must have are there.

Each `expected_links` entry is judged once, as a whole (device label `expected_links[<i>]`):
- it matches no port at all: CRITICAL (an adapter that died, a driver that did not load), with or
  without `count`;
- with `count: N`, fewer than N matching ports: CRITICAL, naming what is missing (ports seen
  earlier that are gone, or the names a finite glob allows that were not seen) and what was seen;
- otherwise OK.
Without any expectation, one node-wide OK finding says how many InfiniBand/RoCE ports there are
(and that there are none, when so), so a node without adapters never reads as silently healthy.

The learned inventory (model.learned: the ports seen healthy on this node) needs no configuration:
a learned port that is gone is CRITICAL, one finding per port (device and port labels), named with
its last known GUIDs and link, unless an `expected_links` entry with a `count` covers it (the
configured count wins). A node with no port, no expectation and nothing learned has nothing to
check: `nothing_to_check` says why, and `fabricmon check` answers UNKNOWN.

Pure: it takes the merged ports and the ports seen before, never reads or fetches anything.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fabricmon.model import ibspec

from fabricmon.checks import CRITICAL, OK, Finding
from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.learned import LearnedInventory, LearnedPort
from fabricmon.model.node_records import IbstatData, SysfsData
from fabricmon.model.ports import Inventory, PortView
from fabricmon.model.snapshot import SourceState, Unjudged, source_state
from fabricmon.schema import ConfigError, Context, Schema, choice, custom, glob_pattern, integer, number

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

# --- settings: `expected_links[]` (fabricmon.schema), composed by fabricmon/config/__init__.py -------------

@dataclass(frozen=True, slots=True)
class ExpectedLink:
    device: str
    port: str
    width: int | None
    speed: str | None
    rate_gbps: float | None
    link_layer: str          # "InfiniBand" (default), "Ethernet" or "any"
    count: int | None = None  # how many ports must match (expected_inventory); None: at least one

    @property
    def sets_rate(self) -> bool:
        """The entry says what its ports should train at (not only how many there are)."""
        return self.width is not None or self.speed is not None or self.rate_gbps is not None

    def matches(self, device: str, port: int, link_layer: str | None) -> bool:
        if not fnmatch.fnmatchcase(device, self.device):
            return False
        if not fnmatch.fnmatchcase(str(port), self.port):
            return False
        if self.link_layer == "any":
            return True
        return (link_layer or "InfiniBand") == self.link_layer


def _width(value: Any, key: str, ctx: Context) -> int:
    width = ibspec.parse_width(str(value))
    if width is None:
        raise ConfigError(key, f"expected a width like 4X, got {value!r}")
    return width


def _speed(value: Any, key: str, ctx: Context) -> str:
    gen = ibspec.generation(str(value))
    if gen is None:
        names = ", ".join(g.name for g in ibspec.GENERATIONS)
        raise ConfigError(key, f"unknown speed {value!r} (one of {names})")
    return gen.name


def _expected_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    if "device" not in m:
        raise ConfigError(f"{key}.device", "required (a glob on the HCA name, e.g. 'mlx5_*')")
    if all(values[k] is None for k in ("width", "speed", "rate_gbps", "count")):
        raise ConfigError(key, "needs at least one of width, speed, rate_gbps or count")


EXPECTED_LINK: Schema[ExpectedLink] = Schema(
    fields=(custom("device", None, "glob on the HCA name (required)", glob_pattern, "glob", default_doc="required"),
            custom("port", "*", "glob on the port number", glob_pattern, "glob"),
            custom("width", None, "expected width (`4X`)", _width, "width", default_doc="unset"),
            custom("speed", None, "expected speed (`NDR`, `HDR`, ...)", _speed, "speed", default_doc="unset"),
            number("rate_gbps", None, "expected rate in Gb/s (e.g. 400 for RoCE)", lo=0.1, default_doc="unset"),
            choice("link_layer", "InfiniBand", "which ports the entry applies to",
                   {layer.lower(): layer for layer in ("InfiniBand", "Ethernet", "any")},
                   reason="expected InfiniBand, Ethernet or any",
                   fold=lambda v: v.lower() if isinstance(v, str) else v),
            integer("count", None, "how many ports must match (`expected_inventory`)", lo=1, default_doc="unset")),
    check=_expected_check, build=lambda v, key, ctx: ExpectedLink(**v),
    doc="A list; at least one of width, speed, rate_gbps or count per entry. The first entry that sets a width, "
        "speed or rate applies to a port; every entry is also an inventory check (`expected_inventory`). The "
        "example config ships with none active and one commented example per fabric (NDR, HDR, RoCE 400G/200G).")


def expected_links(value: Any, key: str, ctx: Context) -> tuple[ExpectedLink, ...]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list, got {type(value).__name__}")
    return tuple(EXPECTED_LINK.load(item, f"{key}[{i}]", ctx) for i, item in enumerate(value))


CHECK = "expected_inventory"
MAX_EXPANSION = 256       # a finite glob expanding to more names than this is not listed


def expand_glob(pattern: str) -> list[str] | None:
    """Every name a glob made of literals and `[...]` classes matches (`mlx5_[0-7]` -> mlx5_0 ..
    mlx5_7), or None when it is open-ended (`*`, `?`, a negated class) or too large."""
    parts: list[list[str]] = []
    for m in re.finditer(r"\[([^\]]+)\]|([^\[\]*?]+)|(.)", pattern):
        cls, lit, other = m.groups()
        if lit is not None:
            parts.append([lit])
        elif cls is not None and not cls.startswith(("!", "^")):
            chars: list[str] = []
            i = 0
            while i < len(cls):
                if i + 2 < len(cls) and cls[i + 1] == "-":
                    lo, hi = ord(cls[i]), ord(cls[i + 2])
                    if hi < lo or hi - lo > MAX_EXPANSION:
                        return None
                    chars.extend(chr(c) for c in range(lo, hi + 1))
                    i += 3
                else:
                    chars.append(cls[i])
                    i += 1
            parts.append(sorted(set(chars)))
        else:
            return None
        total = 1
        for p in parts:
            total *= len(p)
        if total > MAX_EXPANSION:
            return None
    return ["".join(t) for t in itertools.product(*parts)]


def _name(key: tuple[str, int]) -> str:
    return f"{key[0]} port {key[1]}"


def _names(keys: list[tuple[str, int]], limit: int = 12) -> str:
    shown = ", ".join(_name(k) for k in keys[:limit])
    return shown + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


def describe(e: ExpectedLink, i: int) -> str:
    layer = "any link layer" if e.link_layer == "any" else e.link_layer
    port = "" if e.port == "*" else f" port {e.port}"
    count = f", count {e.count}" if e.count else ""
    return f"expected_links[{i}] ({e.device}{port}, {layer}{count})"


def _missing(e: ExpectedLink, present: Mapping[tuple[str, int], PortView],
             seen_before: Mapping[tuple[str, int], str]) -> str:
    """What is missing, as precisely as known: ports seen earlier that are gone, else the device
    names a finite glob allows that have no matching port."""
    gone = sorted(k for k, layer in seen_before.items()
                  if k not in present and e.matches(k[0], k[1], layer))
    if gone:
        return f"; missing (seen earlier): {_names(gone)}"
    names = expand_glob(e.device)
    if names is not None:
        have = {k[0] for k, p in present.items() if e.matches(p.device, p.port, p.link_layer)}
        absent = [n for n in names if n not in have]
        if absent:
            return f"; not seen: {', '.join(absent[:12])}" + (f" (+{len(absent) - 12} more)" if len(absent) > 12 else "")
    return ""


def evaluate(ports: Mapping[tuple[str, int], PortView], expected: tuple[ExpectedLink, ...],
             seen_before: Mapping[tuple[str, int], str] | None = None) -> list[Finding]:
    """`ports`: the merged ports of this snapshot; `seen_before`: ports seen by earlier snapshots
    (or earlier `check` runs) with their link layer, so a vanished adapter can be named."""
    seen_before = seen_before or {}
    if not expected:
        if not ports:       # nothing expected and nothing found: nothing judged (the snapshot's `unknown` says so)
            return []
        return [Finding(CHECK, "", None, OK, f"{len(ports)} InfiniBand/RoCE port(s) found (no expected_links configured)")]
    out = []
    for i, e in enumerate(expected):
        what = describe(e, i)
        matched = sorted(k for k, p in ports.items() if e.matches(p.device, p.port, p.link_layer))
        dev = f"expected_links[{i}]"
        if not matched:
            if ports:
                others = sorted(ports)
                seen = f"; seen only: {', '.join(f'{_name(k)} ({ports[k].link_layer})' for k in others[:12])}"
            else:
                seen = "; no InfiniBand or RoCE port at all"
            out.append(Finding(CHECK, dev, None, CRITICAL,
                               f"{what}: no matching port found{_missing(e, ports, seen_before)}{seen}: "
                               "check that the adapters are seated and powered, that the driver loaded "
                               "(dmesg, lspci -d 15b3:) and the firmware"))
        elif e.count and len(matched) < e.count:
            out.append(Finding(CHECK, dev, None, CRITICAL,
                               f"{what}: {len(matched)} of {e.count} port(s) found, {e.count - len(matched)} "
                               f"missing{_missing(e, ports, seen_before)}; seen: {_names(matched)}: "
                               "an adapter died or its driver did not load (dmesg, lspci -d 15b3:)"))
        else:
            extra = f" (more than the {e.count} expected)" if e.count and len(matched) > e.count else ""
            out.append(Finding(CHECK, dev, None, OK, f"{what}: {len(matched)} port(s) found{extra}"))
    return out


ACCEPT_COMMAND = "fabricmon inventory accept"


def evaluate_learned(gone: list[LearnedPort], expected: tuple[ExpectedLink, ...]) -> list[Finding]:
    """CRITICAL per learned port that is gone, unless an expected_links entry with a count covers it."""
    out = []
    for rec in gone:
        if any(e.count and e.matches(rec.device, rec.port, rec.link_layer) for e in expected):
            continue        # the configured count judges this port (expected_links wins)
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rec.learned_at)) if rec.learned_at else "earlier"
        out.append(Finding(CHECK, rec.device, rec.port, CRITICAL,
                           f"{rec.device} port {rec.port} is gone: seen healthy on this node (learned {when}; "
                           f"{rec.describe()}) and absent from the port inventory now: check that the adapter is "
                           "seated and powered and that its driver loaded (dmesg, lspci -d 15b3:); after planned "
                           f"maintenance accept the new inventory: {ACCEPT_COMMAND}"))
    return out


def nothing_to_check(ports: Mapping[tuple[str, int], PortView], expected: tuple[ExpectedLink, ...], learned: int,
                     where: str) -> str:
    """Why this node has nothing to check ("" when it has): no port, no expectation, nothing learned."""
    if ports or expected or learned:
        return ""
    return (f"nothing to check: no InfiniBand or RoCE device found ({where}) and none seen on this node before; "
            "is the RDMA driver loaded? (lsmod | grep ib_core, dmesg, lspci -d 15b3:)")


MAX_SEEN_PORTS = 1024


def unlisted(states: Mapping[str, SourceState]) -> list[str]:
    """The inventory sources in use (sysfs, ibstat) whose last run gave no port list (failed or
    not run yet): while there is one, a port missing from the inventory may only be unread."""
    listed = [s for s in (source_state(states, SysfsData), source_state(states, IbstatData))
              if s is not None and s.enabled and s.active]
    return [s.name for s in listed if s.data is None] if listed else ["sysfs"]


class LearnedKeeper(Protocol):
    """Where the ports seen healthy are kept (stores.learned.LearnedStore: a file in the state directory)."""
    inventory: LearnedInventory

    def refresh(self) -> None: ...

    def learn(self, inv: Inventory, now: float) -> list[LearnedPort]: ...


@dataclass(frozen=True, slots=True)
class InventorySettings:
    expected: tuple[ExpectedLink, ...] = ()             # expected_links
    excluded: Callable[[str], bool] = lambda device: False      # a device the config excludes


@dataclass(slots=True)
class InventoryState:
    learned: LearnedKeeper
    # every port seen by a snapshot so far: key -> (link layer, wall-clock time last seen), so that a
    # vanished adapter can be named (`check` keeps it in its state file)
    seen_ports: dict[tuple[str, int], tuple[str, float]] = field(default_factory=dict)


class ExpectedInventory:
    """expected_inventory (checks.shape): the ports against expected_links and against the ports learned
    healthy on this node (then learned: the state). Nothing is judged (no finding, no status) while the
    inventory is not known or no inventory source gave a port list; the check then derives why the node
    could not be judged (`Unjudged`: the snapshot's `unknown`, the health rule's UNKNOWN), as it does for a
    node with nothing to check."""
    reports = (report(CHECK),)

    def __init__(self, settings: InventorySettings, learned: LearnedKeeper):
        self.settings = settings
        self.state = InventoryState(learned)

    def run(self, inputs: NodeInputs) -> Outcome:
        ports, expected, s = inputs.ib.ports, self.settings.expected, self.state
        findings: list[Finding] = []
        if not inputs.inventory_known:
            unknown = f"the port inventory has not been read yet ({inputs.where or 'sysfs, ibstat'})"
        elif not ports and (missing := unlisted(inputs.states)):
            unknown = (f"no port inventory: {', '.join(missing)} gave no port list (the source's own error says "
                       "why)")
        else:
            gone = {k: layer for k, (layer, _) in s.seen_ports.items() if k not in ports}
            findings = evaluate(ports, expected, gone)
            findings += self._learned(inputs)
            learned = sum(1 for r in s.learned.inventory.ports.values() if not self.settings.excluded(r.device))
            unknown = nothing_to_check(ports, expected, learned, inputs.where)
        for k, p in ports.items():
            s.seen_ports[k] = (p.link_layer, inputs.now)
        if len(s.seen_ports) > MAX_SEEN_PORTS:        # bounded: forget the longest gone
            for k, _ in sorted(s.seen_ports.items(), key=lambda kv: kv[1][1])[:len(s.seen_ports) - MAX_SEEN_PORTS]:
                del s.seen_ports[k]
        return outcome_of(findings, Unjudged(unknown))

    def _learned(self, inputs: NodeInputs) -> list[Finding]:
        """Judge the learned ports against this inventory, then learn its healthy ports. A port is
        called gone only when every inventory source in use answered with a port list: a source
        that failed (a WARNING of its own) cannot tell that an adapter vanished."""
        store, inv, ports = self.state.learned, inputs.inv, inputs.ib.ports
        store.refresh()
        out = []
        if not unlisted(inputs.states):
            out = evaluate_learned(store.inventory.gone(inv, self.settings.excluded), self.settings.expected)
        store.learn(Inventory(inv.devices, dict(ports)), inputs.now)
        store.inventory.recall_peers(Inventory(inv.devices, dict(ports)))
        return out


__all__ = ["ACCEPT_COMMAND", "CHECK", "ExpectedInventory", "InventorySettings", "InventoryState", "LearnedKeeper",
           "MAX_SEEN_PORTS", "describe", "evaluate", "evaluate_learned", "expand_glob", "nothing_to_check", "unlisted"]
