"""The `fabric` section: the fabric collector's own keys (its port, intervals, shard, cache, the
InfiniBand sweep's MAD settings), composed with the sections its parts declare beside their code:
the fabric checks' thresholds (`fabric.thresholds` from checks/fabric_ecmp.py, `fabric.pfc_storm`
from checks/fabric_pfc.py), the fabric sources' keys (the source registry) and `fabric.ethernet`
(sources/ethernet/settings.py, imported only for an Ethernet fabric). fabricmon/config/__init__.py composes it
into `Config.fabric`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

from fabricmon.checks import fabric_pfc
from fabricmon.checks.fabric_ecmp import THRESHOLDS, FabricThresholds
from fabricmon.checks.fabric_pfc import PfcStormSettings
from fabricmon.host.mad import MadSettings
from fabricmon.registry import FABRIC_KINDS, SourceConfig, load_sources
from fabricmon.sources.settings import FabricScope
from fabricmon.schema import (ConfigError, Context, Schema, choice, custom, integer, number, section, string,
                              values)

if TYPE_CHECKING:
    from fabricmon.sources.ethernet.settings import EthernetConfig

DEFAULT_FABRIC_PORT = 9881      # the fabric collector (9880 is fluentd's in_http default)


def _ethernet_schema() -> Schema[EthernetConfig]:
    """fabric.ethernet's schema: the Ethernet package (and so its sources) is imported only for an
    Ethernet fabric."""
    from fabricmon.sources.ethernet.settings import SCHEMA
    return SCHEMA


def import_sources(kind: str) -> None:
    """Register the sources of `kind`'s collector, by importing its package's settings module."""
    if kind == "ethernet":
        _ethernet_schema()
    else:
        import fabricmon.sources.infiniband.settings  # noqa: F401 - imported to register


@functools.lru_cache(maxsize=1)
def _ethernet_defaults() -> EthernetConfig:
    return _ethernet_schema().default_object()


@dataclass(frozen=True, slots=True)
class FabricConfig:
    """The fabric collector (`fabricmon fabric`)."""
    port: int = DEFAULT_FABRIC_PORT
    sweep_interval: float = 15.0
    discovery_interval: float = 300.0
    concurrency: int = 2                 # ibqueryerrors passes in flight at once (1 or 2)
    shard: tuple[int, int] = (0, 1)      # (index, count): sweep the switches whose GUID hash % count == index
    cache_dir: str = "/var/lib/fabricmon/fabric"
    # fabric.mad_timeout_ms (ibqueryerrors/ibroute/sminfo -t, and the engine's per MAD), fabric.mad_window,
    # fabric.mad_window_per_switch, fabric.mad_retries: the MAD engine's settings
    mad: MadSettings = field(default_factory=MadSettings)
    thresholds: FabricThresholds = field(default_factory=FabricThresholds)     # the ecmp check's
    pfc_storm: PfcStormSettings = field(default_factory=PfcStormSettings)     # the pfc_storm check's
    routing_interval: float = 300.0      # seconds between forwarding-table reads (routes change on SM sweeps)
    sm_interval: float = 30.0            # seconds between subnet manager polls
    routing_imbalance_threshold: float = 1.5     # route imbalance (max/mean over active uplinks) above which a switch is flagged
    sm_stalled_polls: int = 2            # polls in a row with the master's activity count unchanged: a hung SM
    down_port_max_age: float | None = 604800.0   # seconds a cabled port that went down stays reported; None: until restart
    link_state_max_ports: int = 512      # PortInfo SMP reads per sweep when the SM's records do not cover the ports (0: none)
    unresponsive_sweeps: int = 5         # a switch that did not answer in this many ...
    unresponsive_window: int = 7         # ... of its last this many sweeps is unresponsive (OpenSM's rule)
    sweep_method: str = "auto"           # InfiniBand sweep: mad (in process), tools (infiniband-diags), auto (mad where a umad port opens)
    uplinks_critical_fraction: float = 0.5   # share of a switch's expected uplinks down from which its uplinks check is CRITICAL
    sources: dict[str, SourceConfig] = field(default_factory=dict)
    kind: str = "infiniband"             # or "ethernet": which sources the collector runs
    name: str | None = None              # what the fabric map's title calls the fabric; None: the collector's host
    # fabric.ethernet as configured (kind: ethernet), else None: read it as `ethernet`
    _ethernet: EthernetConfig | None = None

    @property
    def ethernet(self) -> EthernetConfig:
        """fabric.ethernet: as configured with kind: ethernet, else its defaults; the Ethernet package
        is imported only when this is read."""
        return self._ethernet if self._ethernet is not None else _ethernet_defaults()


# a fabric source's interval is set once, by the fabric key; slurm_jobs runs once per sweep, slurm_topology
# (the configured topology.conf) once per discovery
SOURCE_INTERVALS = {"sweep": "sweep_interval", "discovery": "discovery_interval", "routing": "routing_interval",
                    "sm": "sm_interval", "slurm_jobs": "sweep_interval", "slurm_topology": "discovery_interval"}
_TIMED = ("sweep", "discovery", "routing", "sm")


def parse_shard(value: Any, key: str, ctx: Context | None = None) -> tuple[int, int]:
    """`i/n` (0 <= i < n): this collector sweeps the switches whose GUID hash % n == i."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    m = re.fullmatch(r"(\d+)\s*/\s*(\d+)", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise ConfigError(key, f"expected 'i/n' with 0 <= i < n (e.g. '0/4'), got {value!r}")
    return int(m.group(1)), int(m.group(2))


TIMEOUTS: Schema[dict[str, float | None]] = Schema(fields=tuple(
    number(n, None, f"seconds: a `{n}` run still going then is killed (its process group) and counted; "
           f"the same setting as `fabric.sources.{n}.timeout`", lo=0.1,
           default_doc="the source's (below)")
    for n in _TIMED), build=values)


def _fabric_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    kind = values["kind"]
    if values["unresponsive_sweeps"] > values["unresponsive_window"]:
        raise ConfigError(f"{key}.unresponsive_sweeps", f"{values['unresponsive_sweeps']} is more than "
                          f"{key}.unresponsive_window ({values['unresponsive_window']})")
    if values["cache_dir"] is None:
        values["cache_dir"] = f"{ctx.built['state_dir'].rstrip('/')}/fabric"
    values["mad"] = MadSettings(window=values.pop("mad_window"), per_target=values.pop("mad_window_per_switch"),
                                timeout_ms=values.pop("mad_timeout_ms"), retries=values.pop("mad_retries"))
    eth = m.get("ethernet")
    for old, new in (("pfc_storm_rate", "rate"), ("pfc_storm_sweeps", "sweeps")):
        if isinstance(eth, dict) and old in eth:
            raise ConfigError(f"{key}.ethernet.{old}", f"moved to {key}.pfc_storm.{new} (the pfc_storm check's, "
                              "for whatever fabric reads pause frames)")
    if kind == "ethernet":
        values["_ethernet"] = _ethernet_schema().load(eth, f"{key}.ethernet", ctx)
        ctx.provide(values["_ethernet"])
    elif eth:
        raise ConfigError(f"{key}.ethernet", "set fabric.kind: ethernet to use it")
    # what the fabric sources read of this section, built into their settings as they load
    ctx.provide(FabricScope(shard=values["shard"], mad=values["mad"], sweep_method=values["sweep_method"],
                            concurrency=values["concurrency"], link_state_max_ports=values["link_state_max_ports"],
                            cache_dir=values["cache_dir"]))
    import_sources(kind)
    sources, given = load_sources(m.get("sources"), f"{key}.sources", kind, ctx)      # fabric.kind names its collector
    timeouts = values.pop("timeouts")
    for name, sc in sources.items():
        given_own = given.get(name)
        own: dict[str, Any] = given_own if isinstance(given_own, dict) else {}
        if name in SOURCE_INTERVALS:        # one key per setting: the fabric key
            fkey = SOURCE_INTERVALS[name]
            want = values[fkey]
            if "interval" in own and sc.interval != want:
                raise ConfigError(f"{key}.sources.{name}.interval",
                                  f"{sc.interval:g} contradicts {key}.{fkey} ({want:g}): set it once, "
                                  f"as {key}.{fkey}")
            if sc.interval != want:
                sc = replace(sc, interval=want)
        if timeouts.get(name) is not None and sc.timeout != timeouts[name]:
            if "timeout" in own and sc.timeout != timeouts[name]:
                raise ConfigError(f"{key}.sources.{name}.timeout",
                                  f"{sc.timeout:g} contradicts {key}.timeouts.{name} ({timeouts[name]:g}): "
                                  f"set it once")
            sc = replace(sc, timeout=timeouts[name])
        sources[name] = sc
    values["sources"] = sources


_D_FABRIC = FabricConfig()
FABRIC: Schema[FabricConfig] = Schema(
    fields=(
        choice("kind", "infiniband", "`infiniband` (MADs, infiniband-diags) or `ethernet` (a RoCE fabric's switches "
               "over SNMP, [ethernet.md](ethernet.md))", FABRIC_KINDS,
               reason="expected infiniband or ethernet"),
        string("name", None, "what the fabric map's title calls this fabric (`compute-ib`, `storage-roce`: tells "
               "two collectors' maps apart); `null`: the collector's host name", null=True),
        integer("port", DEFAULT_FABRIC_PORT, "the collector's port (`server.address` and `server.tls` apply; "
                "`--listen` overrides both)", lo=0, hi=65535),
        number("sweep_interval", _D_FABRIC.sweep_interval, "seconds between sweeps of every switch port's counters "
               "(the `sweep` and `slurm_jobs` sources' interval)", lo=0.1),
        number("discovery_interval", _D_FABRIC.discovery_interval, "seconds between discoveries (the `discovery` "
               "source's interval)", lo=0.1),
        number("routing_interval", _D_FABRIC.routing_interval, "seconds between forwarding-table reads (the "
               "`routing` source's interval)", lo=0.1),
        number("sm_interval", _D_FABRIC.sm_interval, "seconds between subnet manager polls (the `sm` source's "
               "interval)", lo=0.1),
        section("timeouts", TIMEOUTS, ""),
        integer("concurrency", _D_FABRIC.concurrency, "the two ibqueryerrors passes in parallel (2) or one after the "
                "other (1)", lo=1, hi=2),
        custom("shard", _D_FABRIC.shard, "`i/n`: sweep only the switches whose GUID hash % n == i (`--shard` "
               "overrides)", parse_shard, "`i/n`", default_doc='`"0/1"`'),
        string("cache_dir", None, "where the topology cache lives (created on start)", kind="directory",
               default_doc="`<paths.state_dir>/fabric`"),
        integer("mad_timeout_ms", _D_FABRIC.mad.timeout_ms, "ibqueryerrors/dump_fts/sminfo `-t`, and the MAD "
                "engine's timeout per MAD: what a switch that does not answer costs per query", lo=10, hi=60000),
        section("thresholds", THRESHOLDS, ""),
        section("pfc_storm", fabric_pfc.SCHEMA, "the `pfc_storm` check (pause frames, any fabric kind)"),
        number("routing_imbalance_threshold", _D_FABRIC.routing_imbalance_threshold, "route imbalance (max/mean "
               "remote destinations over active uplinks) above which a switch is flagged", lo=1.0),
        integer("sm_stalled_polls", _D_FABRIC.sm_stalled_polls, "SM polls in a row with the master's activity count "
                "unchanged: a hung SM", lo=1),
        number("down_port_max_age", _D_FABRIC.down_port_max_age, "seconds a cabled port that went down stays "
               "reported down; `null`: until the collector restarts", lo=1, null=True),
        integer("link_state_max_ports", _D_FABRIC.link_state_max_ports, "PortInfo reads per sweep of ports a lossy "
                "state pass did not reach; 0: no per-sweep link state", lo=0),
        integer("unresponsive_sweeps", _D_FABRIC.unresponsive_sweeps, "a switch that did not answer in this many "
                "of its last `unresponsive_window` sweeps is unresponsive (OpenSM's rule: 5 of 7)", lo=1),
        integer("unresponsive_window", _D_FABRIC.unresponsive_window, "the sweeps `unresponsive_sweeps` counts in",
                lo=1),
        choice("sweep_method", _D_FABRIC.sweep_method, "`mad`: the in-process [MAD engine](mad-engine.md); `tools`: "
               "the infiniband-diags processes; `auto`: the engine where the collector's process opens a umad port, "
               "else the tools (`fabricmon_fabric_sweep_method` says which ran)", ("auto", "mad", "tools"),
               reason="expected auto, mad or tools"),
        integer("mad_window", _D_FABRIC.mad.window, "MADs in flight at once (the MAD engine's global window)",
                lo=1, hi=1024),
        integer("mad_window_per_switch", _D_FABRIC.mad.per_target, "MADs in flight to one switch at once "
                "(the MAD engine)", lo=1, hi=64),
        integer("mad_retries", _D_FABRIC.mad.retries, "further tries of a MAD left unanswered (each "
                "`mad_timeout_ms`), while the sweep's deadline allows", lo=0, hi=10),
        number("uplinks_critical_fraction", _D_FABRIC.uplinks_critical_fraction, "share of a switch's expected "
               "uplinks missing from which its `uplinks` check is CRITICAL (fewer missing: WARNING)", lo=0.0, hi=1.0),
    ),
    extra=("sources", "ethernet"),
    extra_doc=(
        ("sources.<name>.{enabled,timeout,command}", "see `sources.<name>`", "below",
         "the fabric sources (table below), validated like `sources.*`; their interval is the `fabric.*_interval` "
         "key (a `fabric.sources.<name>.interval` that differs from it is an error naming both), and "
         "`fabric.timeouts.<name>` and `fabric.sources.<name>.timeout` are one setting"),
        ("ethernet", "mapping", "unset", "only with `kind: ethernet`: the switches and SNMP (below)"),
    ),
    check=_fabric_check,
    build=lambda v, key, ctx: FabricConfig(**v),
    pure=False,         # cache_dir follows paths.state_dir; the sources follow the fabric keys
    doc="The fabric collector (`fabricmon fabric`, [fabric-collector.md](fabric-collector.md)); the node daemon "
        "ignores this section.",
)
