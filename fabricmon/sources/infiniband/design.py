"""design (the InfiniBand fabric collector): the fabric as designed, a design file
(`fabric.sources.design.path`): an `ibnetdiscover` topology file of the accepted fabric or a CSV of
cable ends (parsers.design; `format`: auto, ibnetdiscover, csv), read on the discovery's schedule;
the model compares every discovery with it (checks.fabric_design, docs/design.md). Off until a path
is set (`enabled: auto`); a file that cannot be read or parsed is this source's error, naming the
file and the line (the comparison does not run, nothing else is lost)."""

from __future__ import annotations

from dataclasses import dataclass

from fabricmon.host.io import HostIO
from fabricmon.model.design import Design, DesignData
from fabricmon.parsers.design import FORMATS, parse_design
from fabricmon.parsers.errors import ParseError
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.schema import Schema, choice, from_class, string


@dataclass(frozen=True, slots=True)
class DesignSettings:
    """fabric.sources.design's own keys."""
    path: str | None = None
    format: str = "auto"


OPTIONS: Schema[DesignSettings] = Schema(fields=(
    string("path", None, "the fabric's design (docs/design.md): an ibnetdiscover topology file of the fabric as "
           "accepted, or a CSV of cable ends (start_device,start_port,end_device,end_port[,speed][,width][,start_guid][,end_guid]); "
           "`fabricmon fabric design save FILE` writes one from the live fabric. Null: no design, nothing compared",
           null=True, kind="path"),
    choice("format", "auto", "the design file's form; auto: ibnetdiscover where the file holds an ibnetdiscover "
           "node line, else csv", FORMATS),
), build=from_class(DesignSettings))


@register("design", enabled="auto", interval=300.0, timeout=30.0, collector="infiniband", records=DesignData,
          options=OPTIONS)
class DesignSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        s = self.sc.settings(DesignSettings)
        if s.path is None:
            if self.sc.enabled is True:
                out.error("read", "enabled without a design file: set fabric.sources.design.path")
            else:                       # auto without a file: quietly off (up, nothing to compare)
                out.data = DesignData("", Design(), configured=False)
            return out
        try:
            text = io.read_host_file(s.path)
        except OSError as exc:
            out.error("read", f"cannot read the design {s.path}: {exc.strerror or exc}")
            return out
        try:
            design = parse_design(text, s.format)
        except ParseError as exc:
            out.error("parse", f"{s.path}: {exc}")
            return out
        out.data = DesignData(s.path, design)
        return out


__all__ = ["DesignSource"]
