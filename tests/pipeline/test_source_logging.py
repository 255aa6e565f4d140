"""A source that starts or stops failing is logged once each way, not every poll, even when the
error's numbers (durations, device indexes) change between polls."""

from __future__ import annotations

from structlog.testing import capture_logs

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.pipeline import Pipeline
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
