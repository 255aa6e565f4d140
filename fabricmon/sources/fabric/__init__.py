"""The fabric collector's sources (`fabricmon fabric`), registered with collector="fabric":
discovery (ibnetdiscover, cached, on its own interval), sweep (every switch port's
counters from the cached topology, in two batched ibqueryerrors passes), routing (every
switch's forwarding table, one dump_fts run) and sm (the subnet manager, sminfo).

Importing this package registers them; the order here is the order they are listed in."""

from fabricmon.sources.fabric import discovery, routing, sm, sweep  # noqa: F401 - imported to register
