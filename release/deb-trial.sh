#!/usr/bin/env bash
# The Debian package on a clean Debian 12, as an operator installs it (docs/install-offline.md):
#   release/deb-trial.sh dist/fabricmon_VERSION_all.deb         (as root; make deb-trial)
# In a fresh chroot: `apt install ./fabricmon_*.deb` (the python3-* dependencies from Debian's mirror),
# every file in its Debian place, the user and group made, `fabricmon check` run as the service user,
# `systemd-analyze verify` on the installed units; `apt remove` keeps only the conffiles and the user;
# `apt purge` leaves the file tree as it was before fabricmon (with what its install pulls in).
# The clean root is a tarball made once with mmdebstrap from Debian's mirror and cached outside the
# repository in $FABRICMON_TRIAL_CACHE (default /var/cache/fabricmon-trial); every trial unpacks a new copy.
# Prints one line per step and "deb-trial: N passed, 0 failed" at the end; exits 1 on the first failure.
set -euo pipefail

deb=$(realpath "${1:?usage: $0 dist/fabricmon_VERSION_all.deb}")
[ "$(id -u)" = 0 ] || { echo "deb-trial: needs root (chroot, mount)" >&2; exit 2; }
cache=${FABRICMON_TRIAL_CACHE:-/var/cache/fabricmon-trial}
mirror=${FABRICMON_TRIAL_MIRROR:-http://deb.debian.org/debian}
security=${FABRICMON_TRIAL_SECURITY:-http://deb.debian.org/debian-security}
base=$cache/bookworm.tar
passed=0
t0=$(date +%s)

say() { printf 'deb-trial: %s\n' "$*"; }
ok() { passed=$((passed + 1)); say "ok: $*"; }
fail() { say "FAILED: $*"; say "$passed passed, 1 failed"; exit 1; }

if [ ! -s "$base" ]; then
    command -v mmdebstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
    mkdir -p "$cache"
    say "making the clean Debian 12 root once: $base"
    mmdebstrap --quiet --mode=root --format=tar bookworm "$base.part" \
        "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"
    mv "$base.part" "$base"
fi

root=$(mktemp -d /var/tmp/fabricmon-deb-trial.XXXXXX)
cleanup() {
    for m in sys dev/pts dev proc; do mountpoint -q "$root/$m" && umount -l "$root/$m"; done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT
tar -xf "$base" -C "$root"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -o bind,ro /sys "$root/sys"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"
pkg=/tmp/$(basename "$deb")
say "clean root ready in $(( $(date +%s) - t0 )) s"

in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"; }
# every path with its type, mode and owner (numeric: the chroot's), less the mounts and scratch, what apt,
# dpkg and the logs keep for themselves, and the account files (compared line by line below)
tree() {
    (cd "$root" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./tmp -o -path ./run \
        -o -path ./var/lib/apt -o -path ./var/cache -o -path ./var/lib/dpkg -o -path ./var/log \
        -o -path ./etc/ld.so.cache \) -prune \
        -o -printf '%y %m %U:%G %p\n' | grep -vE ' \./etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$' | sort)
}

in_root apt-get update -qq
# what `apt install ./fabricmon_*.deb` pulls in from the mirror (the python3-* packages, the recommended
# infiniband-diags) goes in first, so that the file tree before fabricmon is the one purge must give back
t=$(date +%s)
pulled=$(in_root apt-get install -s "$pkg" | awk '$1 == "Inst" && $2 != "fabricmon" {print $2}')
[ -n "$pulled" ] || fail "apt install -s $pkg pulls in nothing: no python3-* packages?"
in_root apt-get install -y -qq $pulled >"$root/tmp/deps.log" 2>&1 || { tail -30 "$root/tmp/deps.log"; fail "apt install the dependencies"; }
ok "the $(printf '%s\n' $pulled | wc -l) packages apt install ./$(basename "$deb") pulls in, from the mirror, in $(( $(date +%s) - t )) s"
before=$(tree)
accounts_before=$(cat "$root/etc/passwd" "$root/etc/group")

t=$(date +%s)
in_root apt-get install -y -qq "$pkg" >"$root/tmp/install.log" 2>&1 || { tail -30 "$root/tmp/install.log"; fail "apt install $pkg"; }
ok "apt install ./$(basename "$deb") in $(( $(date +%s) - t )) s"

for f in /usr/bin/fabricmon /lib/systemd/system/fabricmon.service /lib/systemd/system/fabricmon-fabric.service \
         /lib/udev/rules.d/90-fabricmon-umad.rules /usr/lib/sysusers.d/fabricmon.conf /etc/fabricmon/fabricmon.yml \
         /etc/default/fabricmon /etc/default/fabricmon-fabric /usr/share/fabricmon/prometheus/fabricmon.rules.yml \
         /usr/share/fabricmon/alertmanager/fabricmon.alertmanager.yml /usr/share/fabricmon/grafana/fabricmon-node.json \
         /usr/share/fabricmon/grafana/fabricmon-fabric.json /usr/libexec/fabricmon/fabricmon-healthcheck \
         /usr/share/fabricmon/nhc/fabricmon.nhc; do
    [ -f "$root$f" ] || fail "$f is not installed"
done
[ -x "$root/usr/libexec/fabricmon/fabricmon-healthcheck" ] || fail "the Slurm wrapper is not executable"
grep -q '^ExecStart=/usr/bin/fabricmon run ' "$root/lib/systemd/system/fabricmon.service" || fail "ExecStart is not /usr/bin/fabricmon"
grep -q '/opt/fabricmon' "$root/lib/systemd/system/"fabricmon*.service "$root/usr/libexec/fabricmon/fabricmon-healthcheck" \
    "$root/usr/share/fabricmon/nhc/fabricmon.nhc" && fail "a packaged file still names /opt/fabricmon"
conffiles=$(in_root dpkg-query -W -f '${Conffiles}' fabricmon | awk '{print $1}' | sort | tr '\n' ' ')
[ "$conffiles" = "/etc/default/fabricmon /etc/default/fabricmon-fabric /etc/fabricmon/fabricmon.yml " ] || fail "conffiles: $conffiles"
ok "every file in its Debian place; conffiles: $conffiles"

in_root getent passwd fabricmon >/dev/null || fail "no user fabricmon"
in_root getent group rdma >/dev/null || fail "no group rdma"
[ "$(in_root stat -c '%U:%G %a' /var/lib/fabricmon)" = "fabricmon:fabricmon 750" ] || fail "/var/lib/fabricmon: $(in_root stat -c '%U:%G %a' /var/lib/fabricmon)"
[ -L "$root/etc/systemd/system/multi-user.target.wants/fabricmon.service" ] || fail "fabricmon.service is not enabled"
[ -e "$root/etc/systemd/system/multi-user.target.wants/fabricmon-fabric.service" ] && fail "fabricmon-fabric.service is enabled"
ok "user fabricmon and group rdma made by systemd-sysusers, /var/lib/fabricmon by systemd-tmpfiles; fabricmon.service enabled, fabricmon-fabric.service not"

# the packaged python3-* versions, as imported by the installed program
versions=$(in_root python3 -c 'import importlib.metadata as m; print(" ".join(f"{d}={m.version(d)}" for d in ("prometheus-client", "structlog", "psutil", "PyYAML", "bcrypt", "cryptography")))')
ok "Debian's python3-* packages: $versions"

set +e
out=$(in_root runuser -u fabricmon -- fabricmon check --config /etc/fabricmon/fabricmon.yml 2>&1)
rc=$?
set -e
printf '%s\n' "$out" | sed 's/^/    /' | head -20
case $rc in 0|1|2|3) ;; *) fail "fabricmon check as user fabricmon exited $rc";; esac
printf '%s' "$out" | grep -q 'no state kept' && fail "fabricmon check as user fabricmon could not keep its state"
[ -f "$root/var/lib/fabricmon/check-state.json" ] || fail "fabricmon check as user fabricmon wrote no check-state.json"
printf '%s' "$out" | grep -q Traceback && fail "fabricmon check as user fabricmon raised"
printf '%s' "$out" | grep -qE '^FABRICMON (OK|WARNING|CRITICAL|UNKNOWN)' || fail "fabricmon check said no status line"
ok "fabricmon check as user fabricmon: exit $rc (Nagios), a status line, its state kept in /var/lib/fabricmon, no traceback"

# the whole pipeline on Debian's python3-* packages: a recorded DGX H100 node (tests/fixtures/bundles/dgx-h100)
# replayed as the service user; the exposition passes promtool where the host has it
bundle=$(dirname "$0")/../tests/fixtures/bundles/dgx-h100
if [ -d "$bundle" ]; then
    cp -r "$bundle" "$root/tmp/dgx-h100" && chmod -R a+rX "$root/tmp/dgx-h100"
    in_root runuser -u fabricmon -- fabricmon once --replay /tmp/dgx-h100 >"$root/tmp/dgx-h100.prom" 2>"$root/tmp/once.err" \
        || { cat "$root/tmp/once.err"; fail "fabricmon once --replay as user fabricmon"; }
    series=$(grep -c '^fabricmon_' "$root/tmp/dgx-h100.prom" || true)
    [ "$series" -gt 100 ] || fail "fabricmon once --replay wrote $series series"
    lint=""
    if command -v promtool >/dev/null; then
        promtool check metrics <"$root/tmp/dgx-h100.prom" || fail "promtool check metrics on the replayed exposition"
        lint=", promtool check metrics accepts it"
    fi
    # the recorded node is healthy: eight NDR ports, nothing to report
    verdict=$(in_root runuser -u fabricmon -- fabricmon check --replay /tmp/dgx-h100 --no-state 2>/dev/null) \
        || fail "fabricmon check --replay of a healthy recorded node exited $?: $verdict"
    [ "$verdict" = "FABRICMON OK - 0 critical, 0 warning on 8 port(s)" ] || fail "fabricmon check --replay said: $verdict"
    ok "a recorded DGX H100 replayed as user fabricmon: once wrote $series series$lint; check: $verdict"
fi

# `fabricmon install` (for a venv install) refuses here rather than shadow the packaged units
set +e
said=$(in_root fabricmon install --dry-run 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && printf '%s' "$said" | grep -q "is the Debian package's" || fail "fabricmon install on the packaged host: exit $rc: $said"
[ ! -e "$root/etc/systemd/system/fabricmon.service" ] || fail "fabricmon install wrote a unit under /etc/systemd/system"
ok "fabricmon install refuses on the packaged host (exit 2, one line)"

for unit in fabricmon.service fabricmon-fabric.service; do
    res=$(in_root systemd-analyze verify --man=no "/lib/systemd/system/$unit" 2>&1) || fail "systemd-analyze verify $unit: $res"
    ours=$(printf '%s\n' "$res" | grep fabricmon || true)
    [ -z "$ours" ] || fail "systemd-analyze verify $unit: $ours"
done
ok "systemd-analyze verify accepts both installed units"

# the state check kept (and what the service would add), which purge must take away
in_root runuser -u fabricmon -- sh -c 'echo {} > /var/lib/fabricmon/inventory.json'
echo "# an operator's edit" >> "$root/etc/fabricmon/fabricmon.yml"

in_root apt-get remove -y -qq fabricmon >/dev/null 2>&1 || fail "apt remove fabricmon"
[ ! -e "$root/usr/bin/fabricmon" ] && [ ! -e "$root/lib/systemd/system/fabricmon.service" ] \
    && [ ! -e "$root/lib/udev/rules.d/90-fabricmon-umad.rules" ] || fail "apt remove left the program, a unit or the udev rule"
grep -q "an operator's edit" "$root/etc/fabricmon/fabricmon.yml" || fail "apt remove did not keep the edited config"
ok "apt remove: program, units, udev rule gone; the edited config kept"

t=$(date +%s)
in_root apt-get purge -y -qq fabricmon >/dev/null 2>&1 || fail "apt purge fabricmon"
after=$(tree)
if [ "$before" != "$after" ]; then
    diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") | head -40 || true
    fail "purge left the file tree changed (diff above)"
fi
in_root getent passwd fabricmon >/dev/null && fail "purge left the user fabricmon"
in_root getent group fabricmon >/dev/null && fail "purge left the group fabricmon"
left=$(diff <(printf '%s\n' "$accounts_before") <(cat "$root/etc/passwd" "$root/etc/group") | grep '^>' || true)
[ -z "$left" ] || [ "$left" = "$(printf '%s' "$left" | grep '^> rdma:')" ] || fail "purge left accounts: $left"
ok "apt purge in $(( $(date +%s) - t )) s: the file tree as before the install; no user or group fabricmon${left:+ (group rdma kept, as documented)}"

say "the whole trial took $(( $(date +%s) - t0 )) s"
say "$passed passed, 0 failed"
