"""The state directory's stores (`paths.state_dir`): what a daemon learns and keeps across restarts, one
file each, written atomically and read back whole; a store that cannot be read or written costs only what
it holds (said once), never a verdict.

learned         the learned inventory (ports, peers), shared with `fabricmon check` and `inventory accept`
optics_baseline each lane's learned receive power; JsonStateFile, the learned-state file the baselines use
nccl_baseline   each job's learned NCCL bus bandwidth
cable_ledger    which module (serial) was in which port, insertions, swaps and the troubles each had

The pipeline owns them (it loads them at start and saves them after a build); the checks read the records
they hold (fabricmon.model), never the files."""
