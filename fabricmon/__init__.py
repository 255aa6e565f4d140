"""fabricmon: InfiniBand/RoCE fabric health monitor for GPU clusters."""

__version__ = "0.1.0"
