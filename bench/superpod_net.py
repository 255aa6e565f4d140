"""A three-tier HDR fat tree of SuperPOD size as an ibsim net file (ibnetdiscover syntax, tabs).

Pods of `leaves` leaf and `leaves` spine switches (40-port HDR, QM8700-like): each leaf has
`hosts` CA cables down and one uplink to every spine of its pod; each spine has one cable down to
every leaf of its pod and its other ports up to the core; the cores take every spine uplink.
The defaults (13 pods of 20 + 20, 130 cores, 17 hosts a leaf) give 650 switches, 26,000 switch
ports (25,220 cabled) and 4,420 CAs: the size of an NVIDIA SuperPOD-class fabric (GUIDE 13:
~666 switches, ~27,000 switch ports, ~4,300 CAs). Load it with
`ibsim -S 1024 -N 8192 -P 60000 -s NET` (SimFabric does).

    python bench/superpod_net.py [--pods 13] [--leaves 20] [--hosts 17] > superpod.net
"""

from __future__ import annotations

import argparse
import sys

PORTS = 40          # a 40-port HDR switch (QM8700)


def superpod_netfile(pods: int = 13, leaves: int = 20, hosts: int = 17) -> str:
    """The net file text. Every switch has PORTS ports; a leaf's `hosts` host cables come first,
    then one uplink per spine of its pod; a spine's first `leaves` ports go down, the rest up to
    the cores, which spread every spine's uplinks over themselves."""
    if not (1 <= leaves <= PORTS // 2 and 0 <= hosts <= PORTS - leaves and pods >= 1):
        raise ValueError(f"impossible sizes: pods={pods}, leaves={leaves}, hosts={hosts} on {PORTS}-port switches")
    up = PORTS - leaves                       # each spine's uplinks
    spines_total = pods * leaves
    cores = spines_total * up // PORTS
    kind = "4xHDR"

    def leaf(p: int, i: int) -> str:
        return f"pod{p + 1:02d}-leaf{i + 1:02d}"

    def spine(p: int, i: int) -> str:
        return f"pod{p + 1:02d}-spine{i + 1:02d}"

    def core(c: int) -> str:
        return f"core{c + 1:03d}"

    def host(p: int, i: int, h: int) -> str:
        return f"dgx{(p * leaves + i) * hosts + h + 1:05d} mlx5_0"

    def link(port: int, remote: str, rport: int) -> str:
        return f'[{port}]\t"{remote}"[{rport}]\t\t# "{remote}" lid 0 {kind}'

    # spine uplink u of spine (p, s) -> (core, core port): spread round robin over the cores
    core_of: dict[tuple[int, int, int], tuple[int, int]] = {}
    core_next = [0] * cores
    n = 0
    for p in range(pods):
        for s in range(leaves):
            for u in range(up):
                c = n % cores
                core_next[c] += 1
                core_of[(p, s, u)] = (c, core_next[c])
                n += 1
    if max(core_next, default=0) > PORTS:
        raise ValueError("the cores cannot take every spine uplink")
    out = [f"# fabricmon bench: three-tier HDR fat tree, {pods} pods x ({leaves} leaves + {leaves} spines), "
           f"{cores} cores, {hosts} hosts a leaf (bench/superpod_net.py)", ""]
    for c in range(cores):
        out.append(f'Switch\t{PORTS} "{core(c)}"')
        for (p, s, u), (cc, cp) in core_of.items():
            if cc == c:
                out.append(link(cp, spine(p, s), leaves + u + 1))
        out.append("")
    for p in range(pods):
        for s in range(leaves):
            out.append(f'Switch\t{PORTS} "{spine(p, s)}"')
            for i in range(leaves):
                out.append(link(i + 1, leaf(p, i), hosts + s + 1))
            for u in range(up):
                c, cp = core_of[(p, s, u)]
                out.append(link(leaves + u + 1, core(c), cp))
            out.append("")
        for i in range(leaves):
            out.append(f'Switch\t{PORTS} "{leaf(p, i)}"')
            for h in range(hosts):
                out.append(link(h + 1, host(p, i, h), 1))
            for s in range(leaves):
                out.append(link(hosts + s + 1, spine(p, s), i + 1))
            out.append("")
    for p in range(pods):
        for i in range(leaves):
            for h in range(hosts):
                out.append(f'Hca\t1 "{host(p, i, h)}"')
                out.append(link(1, leaf(p, i), h + 1))
                out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=13)
    ap.add_argument("--leaves", type=int, default=20, help="leaves (and spines) a pod")
    ap.add_argument("--hosts", type=int, default=17, help="CAs a leaf")
    args = ap.parse_args()
    sys.stdout.write(superpod_netfile(args.pods, args.leaves, args.hosts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
