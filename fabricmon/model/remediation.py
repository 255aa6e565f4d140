"""What remediation did, does and waits for: the action record every layer reads (the remediation
package keeps it, the snapshot carries it, the exporter, the pages and `fabricmon actions` show it).

An action is one decision to put one thing out of service: a fabric port isolated (`isolate_port`)
or a node drained (`drain_node`). It lives from the decision until it is closed: returned to service
after its clean window, undone by an operator, or released because someone else returned it (a port
re-enabled by hand, a node whose drain reason an admin replaced). Its mode is the one it was decided
in: `act` (the collector or daemon changes the fabric or Slurm) or `dry_run` (every decision made,
logged, counted and shown; nothing touched). A value of the model: frozen, compared by value, written
to the state directory as JSON by the remediation package (remediation/record.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fabricmon.model.finding import Finding

ISOLATE, DRAIN = "isolate_port", "drain_node"
ACTIONS = (ISOLATE, DRAIN)
OFF, DRY_RUN, ACT = "off", "dry_run", "act"
MODES = (OFF, DRY_RUN, ACT)
MODE_VALUE = {OFF: 0, DRY_RUN: 1, ACT: 2}       # fabricmon_remediation_mode

# an action's states: open (it is out of service, or being put out or back) ...
TODO = "todo"               # decided: being done (retried with backoff until it is confirmed)
DONE = "done"               # in effect (confirmed; a dry run's: as if), waiting for its clean window
WAITING = "waiting"         # decided, waits for something first (a host port: its node idle)
RETURNING = "returning"     # its clean window passed: being returned (retried until confirmed)
OPEN = (TODO, DONE, WAITING, RETURNING)
# ... and closed
RETURNED = "returned"       # back in service after its clean window
UNDONE = "undone"           # reversed by an operator (`fabricmon actions undo`)
RELEASED = "released"       # someone else returned it (re-enabled by hand, the drain reason replaced)
CLOSED = (RETURNED, UNDONE, RELEASED)
STATES = OPEN + CLOSED

# fabricmon_remediation_actions_total{result}: what each decision or step came to
RESULTS = ("done", "dry_run", "refused", "failed", "returned", "undone", "released")

PREFIX = "fabricmon:"       # every drain reason fabricmon writes starts with it (and only fabricmon's)


@dataclass(frozen=True, slots=True)
class Action:
    id: str                      # short and stable: "p7" (a port), "n3" (a node)
    kind: str                    # ISOLATE or DRAIN
    target: str                  # a port "<switch guid>:<port>", a node its Slurm name
    label: str                   # the target in words: 'leaf01 (0x...) port 3 to "spine01"[1]', 'node02'
    mode: str                    # ACT or DRY_RUN: what it was decided in
    state: str
    reason: str                  # the condemning finding, one line
    check: str                   # the condemning finding's check
    window: float                # the clean window (s): as long as the one that condemned it
    created: float
    updated: float
    effective: float | None = None   # when it took effect (confirmed; a dry run's: when it would have)
    clean_since: float | None = None  # the clean window's start (None: not clean yet)
    attempts: int = 0            # tries of the step in progress (TODO, RETURNING)
    next_try: float | None = None    # the next try of a failed step (backoff)
    error: str = ""              # the last failure, one line
    waits: str = ""              # what it waits for, in words
    returns: int = 0             # times this target was put out and returned before (its window doubles)
    guid: str = ""               # isolate: the switch
    port: int = 0                # isolate: the port set
    lid: int = 0                 # isolate: the switch's LID (InfiniBand)
    switch: str = ""             # isolate: the switch's name (Ethernet: the command's {switch})
    address: str = ""            # isolate: where the collector reaches the switch (Ethernet: host:port, {address})
    port_name: str = ""          # isolate: the port's name where it has one (Ethernet: ifName)
    peer: str = ""               # isolate: the link's other end "<guid>:<port>" ("" for a host port)
    node: str = ""               # drain: the node; isolate of a host port: its host
    parent: str = ""             # a drain for a host port: its isolate action's id
    baseline: tuple[tuple[str, int], ...] = ()   # the condemning counters when it took effect
    closed: float | None = None
    note: str = ""               # the last thing that happened to it, in words

    @property
    def open(self) -> bool:
        return self.state in OPEN

    @property
    def in_effect(self) -> bool:
        """Out of service now (or, in a dry run, as if)."""
        return self.state in (DONE, RETURNING) or (self.state == TODO and self.effective is not None)

    def returns_at(self) -> float | None:
        """When its clean window ends (None: not clean yet, or closed)."""
        if not self.open or self.clean_since is None:
            return None
        return self.clean_since + self.window


@dataclass(frozen=True, slots=True)
class Breaker:
    """One action's circuit breaker as of a decision round: how much may be out of service at once
    (`cap`), how much is (`used`: fabricmon's own and, for ports, links found down or disabled by others),
    how many decisions it refused this round and whether it is tripped (it refused one)."""
    cap: int
    used: int
    refused: int = 0
    tripped: bool = False
    detail: str = ""             # the cap and what it counts, in words


@dataclass(frozen=True, slots=True)
class Refusal:
    """A decision not acted on this round, and why (the cap, the graph, a job, the exclusion list, ...)."""
    kind: str
    target: str
    label: str
    why: str


@dataclass(frozen=True, slots=True)
class RemediationSection:
    """Remediation's state as of the snapshot's build (the Remediator's last round), carried by the
    snapshot it publishes next: never changed afterwards."""
    scope: str                                   # "node" (the node daemon) or "fabric" (a collector)
    modes: Mapping[str, str]                     # action -> its mode (OFF, DRY_RUN, ACT)
    held: bool = True                            # this process holds the lease: it acts
    lease: str = ""                              # how the lease is held, or why it is not
    actions: tuple[Action, ...] = ()             # the open ones and the recently closed ones
    counts: Mapping[tuple[str, str, str], int] = field(default_factory=dict)   # (action, mode, result) -> n
    breakers: Mapping[str, Breaker] = field(default_factory=dict)
    refused: tuple[Refusal, ...] = ()            # this round's refusals
    findings: tuple[Finding, ...] = ()           # the breaker tripped, an action failing

    def isolated(self) -> dict[tuple[str, int], Action]:
        """(switch guid, port) -> the open isolate action in effect there (both ends of its link)."""
        out: dict[tuple[str, int], Action] = {}
        for a in self.actions:
            if a.kind == ISOLATE and a.in_effect:
                out[(a.guid, a.port)] = a
                if a.peer:
                    g, _, p = a.peer.rpartition(":")
                    out[(g, int(p))] = a
        return out

    def active(self) -> bool:
        """Some action is not off."""
        return any(m != OFF for m in self.modes.values())


def modes_line(modes: Mapping[str, str]) -> str:
    """`isolate_port dry_run, drain_node off`: what `check` and the pages say."""
    return ", ".join(f"{a} {modes.get(a, OFF)}" for a in ACTIONS)


__all__ = ["ACT", "ACTIONS", "Action", "Breaker", "CLOSED", "DONE", "DRAIN", "DRY_RUN", "ISOLATE", "MODES",
           "MODE_VALUE", "OFF", "OPEN", "PREFIX", "RELEASED", "RESULTS", "RETURNED", "RETURNING", "Refusal",
           "RemediationSection", "STATES", "TODO", "UNDONE", "WAITING", "modes_line"]
