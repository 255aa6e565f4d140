#!/bin/sh
# fabricmon as Slurm's HealthCheckProgram: drain the node on CRITICAL, never on anything else.
#
#   fabricmon install --print wrappers DIR     (this version's copy of this file)
#   install -m 755 DIR/fabricmon-healthcheck.sh /usr/local/sbin/fabricmon-healthcheck
#   slurm.conf:  HealthCheckProgram=/usr/local/sbin/fabricmon-healthcheck
#                HealthCheckInterval=300
#
# What it does with `fabricmon check`'s exit code:
#   0 OK        nothing; a node that this script drained earlier (reason "fabricmon: ...") is resumed
#   1 WARNING   nothing (a ticket, not a drain: Prometheus alerts carry warnings); logged
#   2 CRITICAL  scontrol update state=drain reason="fabricmon: <the first CRITICAL line>"
#   3 UNKNOWN   nothing: fabricmon could not check (config error, internal error) or found
#               nothing to check (no RDMA device, none expected or learned); logged
#   other       (not installed, killed by the timeout) the same as UNKNOWN
# A node is never drained because fabricmon itself is broken or slow: that is fabricmon's own
# alert (FabricmonDown, FabricmonSourceFailing), not the node's fault.
#
# It asks the running daemon first (milliseconds); when the daemon does not answer within
# 2 seconds, `fabricmon check` polls by itself. Slurm runs this as root, so the local poll can
# keep its state file (rate checks between runs). Settings, from the environment or
# /etc/default/fabricmon-healthcheck (shell syntax):
#   FABRICMON             the fabricmon program        (/opt/fabricmon/bin/fabricmon)
#   FABRICMON_CONFIG      its config                    (/etc/fabricmon/fabricmon.yml)
#   FABRICMON_DAEMON_URL  the daemon, "" for none       (http://127.0.0.1:9879)
#   FABRICMON_TIMEOUT     seconds for the whole check   (25: inside Slurm's and NHC's budgets)
#   FABRICMON_ARGS        more arguments for `check`    (e.g. --no-state)
#   FABRICMON_RESUME      1: resume nodes this script drained once they are OK (1)
#   FABRICMON_NODENAME    the Slurm node name           ($SLURMD_NODENAME, else hostname -s)
#   SCONTROL              the scontrol program          (scontrol)
# Always exits 0: Slurm acts on the drain, not on the exit code.

[ -r /etc/default/fabricmon-healthcheck ] && . /etc/default/fabricmon-healthcheck

FABRICMON=${FABRICMON:-/opt/fabricmon/bin/fabricmon}
FABRICMON_CONFIG=${FABRICMON_CONFIG:-/etc/fabricmon/fabricmon.yml}
FABRICMON_DAEMON_URL=${FABRICMON_DAEMON_URL-http://127.0.0.1:9879}
FABRICMON_TIMEOUT=${FABRICMON_TIMEOUT:-25}
FABRICMON_RESUME=${FABRICMON_RESUME:-1}
SCONTROL=${SCONTROL:-scontrol}
node=${FABRICMON_NODENAME:-${SLURMD_NODENAME:-$(hostname -s)}}

say() {
    logger -t fabricmon-healthcheck -- "$*" 2>/dev/null
    printf '%s\n' "fabricmon-healthcheck: $*" >&2
}

set -- check --config "$FABRICMON_CONFIG"
[ -n "$FABRICMON_DAEMON_URL" ] && set -- "$@" --daemon "$FABRICMON_DAEMON_URL"
# shellcheck disable=SC2086  # FABRICMON_ARGS is a list of words on purpose
out=$(timeout -k 5 "$FABRICMON_TIMEOUT" "$FABRICMON" "$@" $FABRICMON_ARGS 2>/dev/null)
rc=$?
summary=$(printf '%s\n' "$out" | head -n 1)

case $rc in
0|1)
    [ "$rc" -eq 1 ] && say "$summary"
    if [ "$FABRICMON_RESUME" = 1 ]; then
        show=$("$SCONTROL" show node -o "$node" 2>/dev/null)
        case $show in
        *" Reason=fabricmon: "*)
            case $show in *State=*DRAIN*)
                say "resuming $node: $summary"
                "$SCONTROL" update nodename="$node" state=resume
                ;;
            esac
            ;;
        esac
    fi
    ;;
2)
    first=$(printf '%s\n' "$out" | grep -m 1 '^CRITICAL ' || true)
    reason=$(printf 'fabricmon: %s' "${first:-$summary}" | tr -d '\r' | cut -c1-200)
    say "draining $node: $reason"
    "$SCONTROL" update nodename="$node" state=drain reason="$reason"
    ;;
124|137)
    say "UNKNOWN: fabricmon check did not finish within ${FABRICMON_TIMEOUT}s; not draining"
    ;;
*)
    say "UNKNOWN (exit $rc): ${summary:-no output}; not draining"
    ;;
esac
exit 0
