"""One pipeline for every collector: registered sources on their own schedules, a typed
snapshot rebuilt when any completes (fabricmon.pipeline.scheduler.Pipeline). The node daemon and
the fabric collector are two configurations of it.

The package imports nothing itself: the sources import fabricmon.pipeline.source, and the config
imports the sources (to validate their keys), so the scheduler, which reads the config, is imported
only where it runs."""
