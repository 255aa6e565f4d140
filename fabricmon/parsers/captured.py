"""Tool text as it is captured, not only as the tool wrote it (docs/design.md "Captures that are not clean").

A capture handed over by a site (a design file, a support ticket's attachment) has often passed
through a terminal or another system on the way:

- line endings: CRLF (a Windows editor, a PuTTY or SecureCRT log), or CR alone (a terminal log's
  redraws; old Mac files). `lines` splits on all of them. A CR inside a line of a file with LF
  endings stays where it is (the tools print none there, but a parser that keeps a node description
  whole keeps it whole);
- the tabs between fields: a terminal expands them to runs of spaces, and a session log may keep
  nothing of them at all (PuTTY logged `Switch\\t41 "S-..."` as `Switch41 "S-..."`): each parser
  reads its separators as any whitespace, or none where the fields cannot run into each other;
- what the terminal adds around the output: a session log's banner (`=~=~=~=~= PuTTY log 2021.06.15
  12:06:05 =~=~=~=~=`, `Script started on ...`), the shell prompt and command line before it
  (`[root@mgmt01 ~]# ibnetdiscover`, `admin@ufm01:~$ ibstat`, a switch or UFM appliance's CLI
  `ufm01 [ mgmt-ha-active ] (config) # ibnetdiscover`) and the prompt after it. `terminal_line` tells
  them; a parser that skips lines it does not know skips them anyway, a parser that refuses unknown
  lines (a design's CSV) skips these and still refuses anything else, naming the line.

Pure functions, no records."""

from __future__ import annotations

import re

# what a terminal or a session log adds around a tool's output (each alternative one kind, one example)
_TERMINAL = re.compile(
    r"^(?:"
    r"=~=~=~=.*"                                           # =~=~=~=~=~= PuTTY log 2021.06.15 12:06:05 =~=~=~=~=~=
    r"|Script (?:started|done) on .*"                      # script(1): Script started on 2026-01-05 10:00:00+00:00
    r"|\[[^\[\]\s]+@[^\[\]]+\][#$%>](?:\s.*)?"            # [root@mgmt01 ~]# ibnetdiscover
    r"|[\w.-]+@[\w.-]+:[^\s#$%>]*[#$%>](?:\s.*)?"          # root@mgmt01:~# ibstat, admin@ufm01:/tmp$ ...
    r"|[\w.-]+ \[ [^\]]+ \](?: \([^)]*\))? [#>](?:\s.*)?"  # ufm01 [ mgmt-ha-active ] (config) # ibnetdiscover
    r"|[\w.-]+[#$%>](?:\s.*)?"                             # mgmt01# ibnetdiscover, mgmt01$ ...
    r"|[$%>](?:\s.*)?"                                     # $ ibnetdiscover
    r")$")


def lines(text: str) -> list[str]:
    """The lines of `text` whatever its line endings: LF, CRLF (the CR is dropped), or CR alone in a
    text that has no LF at all. Not str.splitlines(): a node description may hold \\x85, \\u2028 or a
    form feed, which are no line breaks to the tools."""
    if "\n" not in text and "\r" in text:
        return text.split("\r")
    return [ln.rstrip("\r") for ln in text.split("\n")]


def normalised(text: str) -> str:
    """`text` with LF endings (for a parser that reads the whole text with `^...$` patterns)."""
    if "\r" not in text:
        return text
    return "\n".join(lines(text))


def terminal_line(line: str) -> bool:
    """A line a terminal or session log added around a tool's output (a banner, a shell prompt with or
    without its command), never one a fabric tool prints."""
    return bool(_TERMINAL.match(line.strip()))


def first_line(text: str, default: str = "empty output") -> str:
    """The first line of `text` that holds something other than terminal noise, stripped: what an
    error quotes when the text holds nothing the parser knows."""
    return next((s for s in (ln.strip() for ln in lines(text)) if s and not terminal_line(s)), default)


__all__ = ["first_line", "lines", "normalised", "terminal_line"]
