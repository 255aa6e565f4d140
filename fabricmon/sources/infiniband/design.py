"""design (the InfiniBand fabric collector): the fabric as designed, a design file
(`fabric.sources.design.path`): an `ibnetdiscover` topology file of the accepted fabric or a CSV of
cable ends (parsers.design; `format`: auto, ibnetdiscover, csv), read on the discovery's schedule;
the model compares every discovery with it (checks.fabric_design, docs/design.md). Off until a path
is set (`enabled: auto`); a file that cannot be read or parsed is this source's error, naming the
file and the line (the comparison does not run, nothing else is lost)."""

from __future__ import annotations

import errno
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


MAX_BYTES = 256 << 20      # an ibnetdiscover file of a 4,000-CA fabric is a few MiB


def _read(io: HostIO, path: str) -> str:
    """The whole file (read_host_file keeps only a file's first MiB): a bounded read, or where the host
    does not offer one (a replayed bundle, which records whole files) the plain read."""
    try:
        got = io.read_host_file_bounded(path, MAX_BYTES)
    except OSError as exc:
        if exc.errno != errno.EOPNOTSUPP:
            raise
        return io.read_host_file(path)
    if got.size > MAX_BYTES:
        raise ValueError(f"{got.size} bytes, more than a design of {MAX_BYTES >> 20} MiB")
    if got.changed:
        raise ValueError("rewritten while read: read again at the next run")
    return got.data.decode("utf-8", "replace")


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
            text = _read(io, s.path)
        except OSError as exc:
            out.error("read", f"cannot read the design {s.path}: {exc.strerror or exc}")
            return out
        except ValueError as exc:
            out.error("read", f"{s.path}: {exc}")
            return out
        try:
            design = parse_design(text, s.format)
        except ParseError as exc:
            out.error("parse", f"{s.path}: {exc}")
            return out
        out.data = DesignData(s.path, design)
        return out


__all__ = ["DesignSource"]
