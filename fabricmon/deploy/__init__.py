"""The files an operator deploys, shipped in the wheel as package data (one copy: the repository keeps
them here and nowhere else): the systemd units and their defaults files, the udev rule, the example
config, the sysusers.d file (user and group), the Prometheus rules and their promtool tests, the Alertmanager
example (route and inhibit rules), the Grafana dashboards, the Slurm/NHC wrappers and
the reference deployment past one machine (scale/: vmagent, VictoriaMetrics, vmalert, an Alertmanager pair). `fabricmon install` lays them down; `fabricmon install --print KIND DIR` copies them out.

prometheus/build_rules.py and grafana/build_dashboards.py (development tools, not shipped) write the
rules and dashboards here."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

NODE_UNIT = HERE / "systemd" / "fabricmon.service"
NODE_DEFAULTS = HERE / "systemd" / "fabricmon.default"
FABRIC_UNIT = HERE / "systemd" / "fabricmon-fabric.service"
FABRIC_DEFAULTS = HERE / "systemd" / "fabricmon-fabric.default"
UDEV_RULE = HERE / "udev" / "90-fabricmon-umad.rules"
SYSUSERS = HERE / "sysusers" / "fabricmon.conf"
EXAMPLE_CONFIG = HERE / "fabricmon.yml"
RULES = HERE / "prometheus" / "fabricmon.rules.yml"
RULE_TESTS = HERE / "prometheus" / "fabricmon.rules.test.yml"
NODE_DASHBOARD = HERE / "grafana" / "fabricmon-node.json"
FABRIC_DASHBOARD = HERE / "grafana" / "fabricmon-fabric.json"
SLURM_HEALTHCHECK = HERE / "slurm" / "fabricmon-healthcheck.sh"
NHC_CHECK = HERE / "nhc" / "fabricmon.nhc"
ALERTMANAGER = HERE / "alertmanager" / "fabricmon.alertmanager.yml"
# past one machine (docs/scale.md): vmagent's scrape config, its file_sd inventories, every component's flags
SCALE_VMAGENT = HERE / "scale" / "vmagent.yml"
SCALE_FABRIC_TARGETS = HERE / "scale" / "fabricmon-fabric-targets.json"
SCALE_NODE_TARGETS = HERE / "scale" / "fabricmon-targets.json"
SCALE_DEPLOYMENT = HERE / "scale" / "deployment.yml"

# what `fabricmon install --print KIND DIR` copies out
PRINTABLE: dict[str, tuple[Path, ...]] = {
    "rules": (RULES, RULE_TESTS),
    "alertmanager": (ALERTMANAGER,),
    "dashboards": (NODE_DASHBOARD, FABRIC_DASHBOARD),
    "wrappers": (SLURM_HEALTHCHECK, NHC_CHECK),
    "config": (EXAMPLE_CONFIG,),
    "scale": (SCALE_VMAGENT, SCALE_FABRIC_TARGETS, SCALE_NODE_TARGETS, SCALE_DEPLOYMENT),
    "units": (NODE_UNIT, NODE_DEFAULTS, FABRIC_UNIT, FABRIC_DEFAULTS, UDEV_RULE, SYSUSERS),
}

__all__ = ["ALERTMANAGER", "EXAMPLE_CONFIG", "FABRIC_DASHBOARD", "FABRIC_DEFAULTS", "FABRIC_UNIT", "HERE", "NHC_CHECK",
           "NODE_DASHBOARD", "NODE_DEFAULTS", "NODE_UNIT", "PRINTABLE", "RULES", "RULE_TESTS",
           "SCALE_DEPLOYMENT", "SCALE_FABRIC_TARGETS", "SCALE_NODE_TARGETS", "SCALE_VMAGENT", "SLURM_HEALTHCHECK", "SYSUSERS", "UDEV_RULE"]
