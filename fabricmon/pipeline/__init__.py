"""One pipeline for every collector: registered sources on their own schedules, a typed
snapshot rebuilt when any completes. The node daemon and the fabric collector are two
configurations of it."""

from fabricmon.pipeline.scheduler import Pipeline

__all__ = ["Pipeline"]
