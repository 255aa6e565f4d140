"""switch_vitals: a switch's fans, power supplies and temperatures as it reports them over SNMP
(model.vitals records from parsers.vitals: ENTITY-SENSOR-MIB, ENTITY-STATE-MIB and the vendors' tables),
one finding per switch: the worst of its parts, naming the switch and each part that is not OK (a failed
fan or power supply, a sensor beyond the switch's own threshold, a fan stopped at 0 rpm). docs/vitals.md.

A switch that reports no part (none of the tables answered), or only parts whose state says nothing (an
empty bay, "unavailable"), is not judged: no status, never an OK. Records in, findings out."""

from __future__ import annotations

from fabricmon.checks import OK, Finding
from fabricmon.checks.fabric_inputs import FabricInputs
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.snapshot import source_data
from fabricmon.model.vitals import SwitchVitalsData, Vital, VitalsView

CHECK = "switch_vitals"
NEEDS = ("switch_vitals",)       # a source read the switches' vitals (checks.fabric_inputs.CAPABILITIES)
_FIX = {"fan": "replace the fan (tray) and check the airflow", "psu": "check its power feed, reseat or replace the power "
        "supply", "temperature": "check the airflow, the fans and the room's inlet temperature",
        "module": "check the module's log; reseat or replace it"}


def describe(v: Vital) -> str:
    reading = f", {v.value:g} {v.unit}" if v.value is not None and v.unit else ""
    why = f", {v.note}" if v.note else ""
    return f"{v.kind if v.kind != 'psu' else 'power supply'} \"{v.part}\" {v.state}{reading}{why} ({v.source})"


def judge(name: str, guid: str, parts: list[Vital]) -> Finding | None:
    judged = [v for v in parts if v.status is not None]
    if not judged:
        return None
    bad = sorted((v for v in judged if v.status), key=lambda v: (-(v.status or 0), v.kind, v.part))
    if not bad:
        kinds = {k: sum(1 for v in judged if v.kind == k) for k in ("fan", "psu", "temperature", "module")}
        counted = ", ".join(f"{n} {k if k != 'psu' else 'power supplies'}{'s' if n > 1 and k != 'psu' else ''}"
                            for k, n in kinds.items() if n)
        return Finding(CHECK, guid, None, OK, f"switch {name}: {counted} OK")
    fixes = "; ".join(dict.fromkeys(_FIX[v.kind] for v in bad))
    return Finding(CHECK, guid, None, max(v.status or 0 for v in bad),
                   f"switch {name}: " + "; ".join(describe(v) for v in bad) + f": {fixes}")


class Vitals:
    """switch_vitals (checks.shape): the switches whose vitals the source read; their parts go into the section."""
    reports = (report(CHECK, *NEEDS),)
    state = None
    settings = None

    def run(self, inputs: FabricInputs) -> Outcome:
        data = source_data(inputs.states, SwitchVitalsData)
        if data is None:
            return Outcome((), ())
        sec = inputs.sec
        findings: list[Finding] = []
        view: dict[str, list[Vital]] = {}
        for g, parts in sorted(data.switches.items()):
            sw = sec.switches.get(g)
            if sw is None:
                continue
            f = judge(sw.name or g, g, parts)
            if f is not None:
                findings.append(f)
                view[g] = parts
        return Outcome(findings, tuple(f.device for f in findings), VitalsView(view))


__all__ = ["CHECK", "NEEDS", "Vitals", "describe", "judge"]
