"""A source that starts or stops failing is logged once each way, not every poll, even when the
error's numbers (durations, device indexes) change between polls."""

from __future__ import annotations

from structlog.testing import capture_logs

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.pipeline.source import SourceOutput


def test_failing_and_recovering_are_logged_once(tmp_path) -> None:
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)}})
    pipe = Pipeline(cfg, LiveIO(str(tmp_path), str(tmp_path)))
    try:
        def run(*errors: str) -> None:
            out = SourceOutput(data=None)
            for e in errors:
                out.error("timeout", e)
            pipe._finish("ibstat", out, 0.1)

        with capture_logs() as logs:
            run("ibstat: timed out after 10.0s (process group killed)")
            run("ibstat: timed out after 10.1s (process group killed)")
            run("ibstat: timed out after 9.9s (process group killed)")
            run()
            run()
        events = [(e["event"], e.get("source")) for e in logs]
        assert events == [("source error", "ibstat"), ("source recovered", "ibstat")]
        st = pipe.states["ibstat"]
        assert st.errors_total["timeout"] == 3 and not st.active_errors

        with capture_logs() as logs:       # the same failure on every port: one line
            run(*(f"iblinkinfo -C mlx5_{i} -P 1 -D 0: exit 1: Failed to open mlx5_{i} port 1" for i in range(8)))
            run(*(f"iblinkinfo -C mlx5_{i} -P 1 -D 0: exit 1: Failed to open mlx5_{i} port 1" for i in range(8)))
            run("ibstat: exit 255: ibpanic")
        assert [e["event"] for e in logs] == ["source error", "source error", "source recovered"]
    finally:
        pipe.close()


def test_many_new_errors_at_once_are_logged_up_to_a_limit_then_summarised(tmp_path) -> None:
    """A sweep that loses queries to hundreds of switches logs the first MAX_ERROR_LINES and one summary
    per kind; every error is still counted."""
    from fabricmon.pipeline.scheduler import MAX_ERROR_LINES
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)}})
    pipe = Pipeline(cfg, LiveIO(str(tmp_path), str(tmp_path)))
    try:
        out = SourceOutput(data=None)
        names = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                 "kilo", "lima", "mike", "november", "oscar")
        for n in names:        # letters, not numbers: each its own error (numbers are masked)
            out.error("unanswered", f"switch {n}: queries unanswered; its last known state is kept")
        with capture_logs() as logs:
            pipe._finish("ibstat", out, 0.1)
        assert [e["event"] for e in logs] == ["source error"] * MAX_ERROR_LINES + ["source errors"]
        assert logs[-1]["more"] == len(names) - MAX_ERROR_LINES and logs[-1]["kind"] == "unanswered"
        assert pipe.states["ibstat"].errors_total["unanswered"] == len(names)
    finally:
        pipe.close()
