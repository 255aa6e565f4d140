"""The host boundary: HostIO (live, recording, replay), the command runner and NVML."""

from fabricmon.host.bundle import BUNDLE_VERSION, BundleError, RecordingIO, ReplayIO
from fabricmon.host.io import HostIO, LiveIO
from fabricmon.host.runner import CommandResult, run_command

__all__ = ["BUNDLE_VERSION", "BundleError", "CommandResult", "HostIO", "LiveIO", "RecordingIO", "ReplayIO",
           "run_command"]
