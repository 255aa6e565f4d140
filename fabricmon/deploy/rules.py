"""The shipped Prometheus rules, fitted to a site at print time (`fabricmon install --print rules DIR
--runbook-base URL --selector 'job="..."' --fabric-selector '...'`): one source file (prometheus/fabricmon.rules.yml,
valid as shipped), rewritten here rather than edited by hand, as monitoring-mixins do with their
selectors and runbookURLPattern.

- every runbook_url becomes `<base>#<alert>` (by default the daemon that raised the alert serves the
  runbooks at `http://<instance>/runbooks`);
- every `job="fabricmon"` matcher (the node daemons) becomes the selector, every `job="fabricmon-fabric"`
  matcher (the fabric collectors) the fabric selector, and the state jobs' (`job="fabricmon-state"`,
  `job="fabricmon-fabric-state"`: the same targets scraped for `collect[]=state`, the port-down alerts' fast
  path) the state selectors, in expressions and in the queries of annotations.

The rules are read as YAML, rewritten string by string and dumped again, so a selector with any
characters stays one YAML string."""

from __future__ import annotations

import re

import yaml

from fabricmon.deploy import RULES

SELECTOR = 'job="fabricmon"'
FABRIC_SELECTOR = 'job="fabricmon-fabric"'
STATE_SELECTOR = 'job="fabricmon-state"'
FABRIC_STATE_SELECTOR = 'job="fabricmon-fabric-state"'
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR_RE = re.compile(rf"^{_MATCHER}(?:,{_MATCHER})*$")


class RulesError(ValueError):
    """An option that cannot make valid rules (the message names it)."""


def check_selector(value: str, option: str) -> str:
    """A PromQL label-matcher list such as `job="ib-nodes"` or `cluster="a",job=~"fabricmon.*"`."""
    if not _SELECTOR_RE.match(value or ""):
        raise RulesError(f"{option}: expected PromQL label matchers such as 'job=\"fabricmon\"', got {value!r}")
    return value.strip()


def check_base(value: str) -> str:
    if not re.match(r"^https?://[^\s#]+$", value or ""):
        raise RulesError(f"--runbook-base: expected an absolute http(s) URL without a fragment, got {value!r}")
    return value.rstrip("/")


def _swap(text: str, old: str, new: str) -> str:
    # the matcher only where it stands alone inside {...}: `{job="fabricmon",` and `,job="fabricmon"}`
    return re.sub(r"(?<=[{,])" + re.escape(old) + r"(?=[,}])", lambda _: new, text)


def render(text: str | None = None, runbook_base: str | None = None, selector: str | None = None,
           fabric_selector: str | None = None, state_selector: str | None = None,
           fabric_state_selector: str | None = None) -> str:
    """The rules (the shipped file by default) with the site's runbook base and selectors."""
    text = RULES.read_text() if text is None else text
    if not (runbook_base or selector or fabric_selector or state_selector or fabric_state_selector):
        return text
    base = check_base(runbook_base) if runbook_base else None
    swaps = [(old, check_selector(new, option)) for old, new, option in (
        (FABRIC_STATE_SELECTOR, fabric_state_selector, "--fabric-state-selector"),
        (STATE_SELECTOR, state_selector, "--state-selector"),
        (FABRIC_SELECTOR, fabric_selector, "--fabric-selector"),
        (SELECTOR, selector, "--selector")) if new]
    doc = yaml.safe_load(text)

    def fix(s: str) -> str:
        for old, new in swaps:
            s = _swap(s, old, new)
        return s

    for group in doc["groups"]:
        for rule in group["rules"]:
            rule["expr"] = fix(rule["expr"])
            ann = rule.get("annotations", {})
            for k, v in ann.items():
                ann[k] = fix(v)
            if base and "runbook_url" in ann:
                ann["runbook_url"] = f"{base}#{rule['alert'].lower()}"

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                                  style="|" if "\n" in s else None))
    head = "".join(ln for ln in text.splitlines(True)[:3] if ln.startswith("#"))
    opts = " ".join(f"{o} {v!r}" for o, v in (("--runbook-base", base), ("--selector", selector),
                                               ("--fabric-selector", fabric_selector),
                                               ("--state-selector", state_selector),
                                               ("--fabric-state-selector", fabric_state_selector)) if v)
    return (head + f"# Printed by `fabricmon install --print rules` with {opts}.\n"
            + yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=1_000_000, allow_unicode=True))


__all__ = ["FABRIC_SELECTOR", "FABRIC_STATE_SELECTOR", "RulesError", "SELECTOR", "STATE_SELECTOR", "check_selector",
           "render"]
