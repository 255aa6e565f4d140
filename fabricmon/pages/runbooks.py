"""The runbooks page (`/runbooks`): docs/runbooks.md as shipped in the wheel (pages/runbooks.md, a copy
prometheus/build_rules.py writes and tests/ship keeps equal), rendered to one HTML document with one
anchor per heading, GitHub's (the alert name lower-cased: `/runbooks#fabricmonportdown`), so every
alert's default `runbook_url` (`http://<instance>/runbooks#<alert>`) opens on the daemon that raised it.

It depends on no snapshot: rendered once, on the first request, and kept (one document of a fixed
size). The renderer knows the Markdown the runbooks use (headings, paragraphs, lists, fenced code,
`code`, **bold**, links) and escapes everything else; a link to another document of the repository
becomes its text (the daemon serves the runbooks only)."""

from __future__ import annotations

import re
import threading
from importlib import resources

from fabricmon import __version__
from fabricmon.pages.html import esc

_lock = threading.Lock()
_page: bytes | None = None


def anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def _inline(text: str) -> str:
    out, pos = [], 0
    for m in re.finditer(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)", text):
        out.append(esc(text[pos:m.start()]))
        code, bold, label, url = m.groups()
        if code is not None:
            out.append(f"<code>{esc(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{_inline(bold)}</strong>")
        elif url.startswith("#"):
            out.append(f'<a href="{esc(url)}">{_inline(label)}</a>')
        elif url.startswith(("https://", "http://")):
            out.append(f'<a href="{esc(url)}" rel="noreferrer">{_inline(label)}</a>')
        else:
            out.append(_inline(label))          # a repository path: not served here
        pos = m.end()
    out.append(esc(text[pos:]))
    return "".join(out)


def render(markdown: str) -> str:
    """The runbooks' Markdown as the body of an HTML document."""
    html: list[str] = []
    para: list[str] = []
    items: list[str] = []
    list_tag = ""
    lines = markdown.splitlines()

    def flush() -> None:
        nonlocal list_tag
        if para:
            html.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if items:
            html.append(f"<{list_tag}>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + f"</{list_tag}>")
            items.clear()
            list_tag = ""

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            html.append(f"<pre><code>{esc(chr(10).join(lines[i + 1:j]))}</code></pre>")
            i = j + 1
            continue
        m = re.match(r"^(#{1,6}) (.+)$", line)
        li = re.match(r"^(?:- |\d+\. )(.*)$", line)
        if m:
            flush()
            level, text = len(m.group(1)), m.group(2).strip()
            html.append(f'<h{level} id="{esc(anchor(text))}">{_inline(text)}'
                        f'<a class="anchor" href="#{esc(anchor(text))}">#</a></h{level}>')
        elif li:
            tag = "ul" if line.startswith("- ") else "ol"
            if para or (items and tag != list_tag):
                flush()
            list_tag = tag
            items.append(li.group(1))
        elif not line.strip():
            flush()
        elif items and line.startswith(" "):
            items[-1] += " " + line.strip()
        else:
            if items:
                flush()
            para.append(line.strip())
        i += 1
    flush()
    return "\n".join(html)


def source() -> str:
    return resources.files("fabricmon.pages").joinpath("runbooks.md").read_text(encoding="utf-8")


def page() -> bytes:
    """The whole document, rendered once."""
    global _page
    with _lock:
        if _page is None:
            _page = ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                     "<title>fabricmon runbooks</title><link rel=\"stylesheet\" href=\"/static/page.css\"></head>"
                     "<body data-page=\"runbooks\"><header><h1>fabricmon runbooks</h1>"
                     f"<span class=\"sub\">fabricmon {esc(__version__)}</span>"
                     "<nav><a href=\"/\">status</a> <a href=\"/metrics\">/metrics</a></nav></header>"
                     f"<main class=\"runbooks\">{render(source())}</main></body></html>\n").encode()
        return _page


__all__ = ["anchor", "page", "render", "source"]
