"""The HTTP(S) endpoint and the daemon that serves the pipeline's snapshots."""
