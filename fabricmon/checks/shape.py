"""The one shape of a check, node daemon and fabric collector alike (docs/architecture.md, "A check").

A check is an object that declares
- `reports`: the check names it reports (`Finding.check`), each with the inputs it needs to run
  (`Report`: record types or capabilities, every one present; counters, one of them read). A record
  type is present only while it is fresh: produced by a source run that succeeded within that source's
  staleness bound (pipeline.scheduler); nothing remembered stands in for it;
- `settings`: what it is configured with (its own section of the config, never the `Config`);
- `state`: what it keeps between runs (counts over consecutive sweeps, a cache of what it derived from
  inputs that did not change, a learned baseline), its own object, nobody else's;
and `run(inputs) -> Outcome`: its findings, the devices it judged (always said, never "all"), and what it
derived for the snapshot as one typed value (`Outcome.derived`, a sub-section the model composes into the
section being built: a check writes nothing itself). `run` never changes its inputs: a test runs every
registered check on its inputs and compares them before and after.

A device the check could not judge (no fresh reading of it, a rate that needs a second sample, a
setting that turns the judgement off) gets no finding: "not checked" is never OK.

One runner (pipeline/checks.py) runs, for the node and the fabric, exactly the checks one of whose
names has its inputs present, composes their outcomes in the order they are registered, and says which
names ran on which devices: those, and only those, get a status (fabricmon_check_status,
fabricmon_fabric_check_status); a check that did not run has none (absent, never OK)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence, Set
from dataclasses import dataclass
from typing import Protocol, TypeVar

from fabricmon.model.finding import Finding

In = TypeVar("In", contravariant=True)      # what a check reads (pipeline.node's or pipeline.fabric's inputs)


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


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one run of a check gives: its findings; the devices it judged, each given a status (OK
    included) where the caller keeps one per device (`()`: a check of the whole node or fabric; never
    "every device"); and what it derived, one typed value (a sub-section: the link verdicts, the ECMP
    groups, the affinity result, ...) that the model composes into the section being built."""
    findings: Sequence[Finding]
    judged: Collection[str]
    derived: object = None


def judged_in(findings: Iterable[Finding]) -> tuple[str, ...]:
    """The devices of these findings, in order: what a check that gives every device it judged a
    finding (OK included: the node's checks) judged."""
    return tuple(dict.fromkeys(f.device for f in findings))


def outcome_of(findings: Sequence[Finding], derived: object = None) -> Outcome:
    """The outcome of a check whose findings name every device it judged (OK included)."""
    return Outcome(findings, judged_in(findings), derived)


class Check(Protocol[In]):
    """A check: its names and their inputs, its settings, its state; run on inputs it never changes."""

    @property
    def reports(self) -> tuple[Report, ...]: ...

    @property
    def settings(self) -> object: ...

    @property
    def state(self) -> object: ...

    def run(self, inputs: In) -> Outcome: ...


__all__ = ["Check", "Outcome", "Report", "counters", "judged_in", "outcome_of", "report"]
