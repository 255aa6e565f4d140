"""The one check runner, node daemon and fabric collector alike (checks.shape: the shape of a check).

Given the registered checks, the inputs and what is present (the record types fresh in this build,
capabilities, the counters read), it runs exactly the checks one of whose names has its inputs present,
in the order they are registered, composes each outcome's derived sub-section into the section being
built before the next check runs (through the model's one `compose`: a later check may read what an
earlier one derived, the fabric's ECMP groups leave out the ports the link check called degraded), and
returns the findings of the names that ran and, for each name, the devices it judged: the caller gives
a status to exactly those (none to a check that did not run, or to a device it did not judge: absent,
never OK)."""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from fabricmon.checks.shape import Check
from fabricmon.model.finding import Finding

In = TypeVar("In")
S = TypeVar("S")


@dataclass(slots=True)
class Ran:
    """A run: the findings of the names that ran, and each name that ran with the devices it judged."""
    findings: list[Finding] = field(default_factory=list)
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)


def no_derived(out: object, derived: object) -> None:
    raise TypeError(f"a check derived {type(derived).__name__}, and this runner composes nothing")


class CheckRunner(Generic[In, S]):
    """Runs the registered checks whose inputs are present; `compose(section, derived)` puts a check's
    derived sub-section into the section being built (the model's, by the sub-section's type)."""

    def __init__(self, checks: Sequence[Check[In]], compose: Callable[[S, object], None] = no_derived):
        self.checks = tuple(checks)
        self.compose = compose
        # what is present -> the checks that run and their names (the same every poll of a steady node or sweep)
        self._plans: dict[frozenset[str], list[tuple[Check[In], list[str]]]] = {}

    def plan(self, present: Set[str]) -> list[tuple[Check[In], list[str]]]:
        """The checks one of whose names has its inputs present, each with those names, in registration order."""
        key = frozenset(present)
        plan = self._plans.get(key)
        if plan is None:
            plan = [(c, names) for c in self.checks if (names := [r.name for r in c.reports if r.runs(key)])]
            if len(self._plans) >= 64:      # bounded: what is present changes rarely
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def names(self) -> list[str]:
        """Every name the registered checks report."""
        return [r.name for c in self.checks for r in c.reports]

    def run(self, inputs: In, present: Set[str], out: S) -> Ran:
        ran = Ran()
        for check, names in self.plan(present):
            outcome = check.run(inputs)
            if outcome.derived is not None:
                self.compose(out, outcome.derived)
            if len(names) == len(check.reports):
                ran.findings += outcome.findings
            else:       # only the names that ran have a status: a finding of another is not one
                ran.findings += [f for f in outcome.findings if f.check in names]
            judged = tuple(outcome.judged)
            ran.names.update(dict.fromkeys(names, judged))
        return ran


__all__ = ["CheckRunner", "Ran", "no_derived"]
