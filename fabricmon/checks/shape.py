"""The one shape of a check, node daemon and fabric collector alike (docs/architecture.md, "A check").

A check is an object that declares
- `reports`: the check names it reports (`Finding.check`), each with the inputs it needs to run
  (`Report`: record types or capabilities, every one present; counters, one of them read);
- `settings`: what it is configured with (its own section of the config, never the `Config`);
- `state`: what it keeps between runs (counts over consecutive sweeps, a cache of what it derived from
  inputs that did not change, a learned baseline), its own object, nobody else's;
and `run(inputs) -> Outcome`: its findings, and what it derived for the snapshot as a function that
writes it into the section being built (`Outcome.write`). `run` never changes its inputs: a test runs
every registered check on its inputs and compares them before and after.

One runner (pipeline/checks.py) runs, for the node and the fabric, exactly the checks one of whose
names has its inputs present, writes their outcomes in the order they are registered, and says which
names ran: those, and only those, get a status (fabricmon_check_status, fabricmon_fabric_check_status);
a check that did not run has none (absent, never OK)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from fabricmon.model.finding import Finding

In = TypeVar("In", contravariant=True)      # what a check reads (pipeline.node's or pipeline.fabric's inputs)
S = TypeVar("S")                            # the section its outcome is written into


def counters(names: Iterable[str]) -> frozenset[str]:
    """The inputs that say a counter was read (a `Report.any_of` of counters; a present set's counters)."""
    return frozenset(f"counter:{n}" for n in names)


@dataclass(frozen=True, slots=True)
class Report:
    """One check name a check reports, and what must be present for it to run."""
    name: str
    needs: frozenset[str] = frozenset()     # every one present (a record type's name, a capability)
    any_of: frozenset[str] = frozenset()    # one of them present (the counters it judges); empty: none asked

    def runs(self, present: Set[str]) -> bool:
        return self.needs <= present and (not self.any_of or not self.any_of.isdisjoint(present))


def report(name: str, *needs: str, any_of: Iterable[str] = ()) -> Report:
    return Report(name, frozenset(needs), frozenset(any_of))


@dataclass(slots=True)
class Outcome(Generic[S]):
    """What one run of a check gives: its findings; what it derived, written by the runner into the
    section being built (never into the check's inputs); the devices it judged, each given a status
    (OK included) where the caller keeps one per device (None: every device the caller judges)."""
    findings: Sequence[Finding] = ()
    write: Callable[[S], None] | None = None
    judged: Iterable[str] | None = None


class Check(Protocol[In, S]):
    """A check: its names and their inputs, its settings, its state; run on inputs it never changes."""

    @property
    def reports(self) -> tuple[Report, ...]: ...

    @property
    def settings(self) -> object: ...

    @property
    def state(self) -> object: ...

    def run(self, inputs: In) -> Outcome[S]: ...


__all__ = ["Check", "Outcome", "Report", "counters", "report"]
