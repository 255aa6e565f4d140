"""docs/metrics.md is the catalogue, rendered: a family added to (or changed in) the catalogue without
regenerating the reference fails here, as the golden expositions do. Regenerate with `make metrics-doc`
(or `make golden`) and review the diff."""

from __future__ import annotations

import dataclasses
import os
import re

from fabricmon.exporter.catalogue import CATALOGUE, Metric
from fabricmon.exporter.reference import markdown, section_of
from helpers import REPO

DOC = REPO / "docs" / "metrics.md"
UPDATE = os.environ.get("FABRICMON_UPDATE_GOLDEN") == "1"


def test_docs_metrics_md_is_the_catalogue() -> None:
    want = markdown()
    if UPDATE:
        DOC.write_text(want)
    assert DOC.is_file(), f"{DOC} missing: run `make metrics-doc`"
    got = DOC.read_text()
    if got != want:
        documented = set(re.findall(r"^\| `(\w+)`", got, re.M))
        missing = sorted(m.exposed_name for m in CATALOGUE if m.exposed_name not in documented)
        raise AssertionError("docs/metrics.md is not the catalogue's reference (run `make metrics-doc` and review): "
                             f"undocumented families {missing}" if missing else
                             "docs/metrics.md differs from the catalogue (a type, label or help changed): "
                             "run `make metrics-doc` and review the diff")


def test_every_family_is_a_row_with_its_type_labels_set_and_help() -> None:
    text = markdown()
    for m in CATALOGUE:
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{m.exposed_name}`"))
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert cells[1] == m.type and cells[2] == ", ".join(m.labels), row
        assert cells[3] == ", ".join((m.counter_set, *m.also)), row
        assert cells[4].replace("\\|", "|") == m.help.replace("\n", " "), row


def test_a_new_family_is_never_left_out() -> None:
    """A family with a prefix no section knows still gets a row (under "Other metrics"), and the
    comparison above fails until the file is regenerated."""
    new = Metric("fabricmon_frobnicator_widgets", "gauge", "Widgets | frobnicated.", ("widget",), lambda snap: ())
    assert section_of(new) == "Other metrics"
    text = markdown((*CATALOGUE, new))
    assert "## Other metrics" in text
    assert "| `fabricmon_frobnicator_widgets` | gauge | widget | default | Widgets \\| frobnicated. |" in text
    assert text != DOC.read_text()
    changed = dataclasses.replace(CATALOGUE[0], help=CATALOGUE[0].help + " Changed.")
    assert markdown((changed, *CATALOGUE[1:])) != markdown()
