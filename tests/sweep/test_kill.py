"""A worker process killed (SIGKILL) in the middle of a point: Dask's nanny restarts it, the
scheduler reruns the point, and every point ends with a row. Worker processes take seconds
to start, so this runs only with RAPTOR_SLOW_TESTS=1 (CI covers the same path in-process:
test_run.py closes a worker mid-task)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.bench_sweep import kill_run

from .util import write_sweep

pytestmark = pytest.mark.skipif(not os.environ.get("RAPTOR_SLOW_TESTS"),
                                reason="starts worker processes; set RAPTOR_SLOW_TESTS=1")


def test_killed_worker_process_loses_no_point(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, 'models = ["{examples}/lenet.onnx"]\n[grid]\n'
                       'crossbars_per_core = [16, 24, 32, 48, 64]\nmesh = [[4, 4], [8, 8]]\n')
    res = kill_run(path, tmp_path / "out")
    assert res["killed"] is not None
    assert res["rows"] == res["points"] == 10
    assert res["statuses"] == {"ok": 10}
