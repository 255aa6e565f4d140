"""Checks turn merged records and their deltas into findings. Every check yields one Finding
per port it evaluates, OK included, so `fabricmon_check_status` is always present.

The Finding type and the statuses live in the model (fabricmon.model.finding): types flow down
the layers, so the snapshot holds findings without importing a check."""

from __future__ import annotations

from fabricmon.model.finding import CRITICAL, OK, STATUS_NAMES, WARNING, Finding, worst

__all__ = ["CRITICAL", "OK", "STATUS_NAMES", "WARNING", "Finding", "worst"]
