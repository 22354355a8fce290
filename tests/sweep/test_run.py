"""Sweeps on an in-process Dask cluster: rows equal `raptor solve` on the same points, the
files are written, `--resume` runs only unfinished points, a failing point is a row and not
the end of the sweep, and a worker that goes away mid-task loses no point."""

from __future__ import annotations

import csv
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from distributed import Client

from raptor.cli import main
from raptor.sweep.plots import pareto, write_plots
from raptor.sweep.point import run_point
from raptor.sweep.runner import local_cluster, run_sweep
from raptor.sweep.spec import load_sweep

from .util import EXAMPLES, write_sweep

TWO_BY_TWO = """
models = ["{examples}/mlp.onnx"]
[grid]
mesh = [[1, 2], [2, 2]]
solver = ["peft", "cpsat"]
[solve]
crossbars_per_core = 16
array_group_max = 1
time_limit = 20
workers = 1
"""
"""One crossbar per array group: mlp's column tiles run on cores of their own, so the two
meshes schedule differently."""


def test_two_by_two_rows_equal_raptor_solve(tmp_path: Path, client: Client,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    sweep = load_sweep(write_sweep(tmp_path, TWO_BY_TWO))
    out = tmp_path / "out"
    run = run_sweep(sweep, client, out)
    assert run.ok and run.ran == 4 and len(run.rows) == 4
    assert [(r["mesh"], r["solver"]) for r in run.rows] == [
        ([1, 2], "peft"), ([1, 2], "cpsat"), ([2, 2], "peft"), ([2, 2], "cpsat")]
    for row in run.rows:
        rows, cols = row["mesh"]
        target = tmp_path / f"t{rows}{cols}.toml"
        target.write_text(f"mesh = [{rows}, {cols}]\ncrossbars_per_core = 16\n"
                          "array_group_max = 1\n")
        code = main(["solve", str(EXAMPLES / "mlp.onnx"), "--target", str(target), "--solver",
                     row["solver"], "--time-limit", "20", "--workers", "1", "--json",
                     "--out", str(tmp_path / "solve")])
        assert code == 0
        rep = json.loads(capsys.readouterr().out)
        sched = rep["schedules"][row["solver"]]
        assert (row["estimate_ns"], row["simulated_ns"], row["ideal_simulated_ns"],
                row["cores_used"], row["crossbars"], row["bound_ns"], row["solver_status"],
                row["lower_bound_ns"], row["tasks"], row["max_abs_error"]) == (
            sched["estimate_ns"], sched["simulated_ns"], sched["ideal_simulated_ns"],
            sched["cores_used"], rep["crossbars"], sched["bound_ns"], sched["status"].split()[0],
            rep["lower_bound_ns"], rep["tasks"], sched["numerics"]["max_abs_error"])
        assert row["status"] == "ok" and row["numerics_ok"] is True
        assert row["throughput_per_s"] == pytest.approx(1e9 / row["simulated_ns"], rel=1e-6)
        assert row["cores"] == rows * cols and row["bytes_moved"] > 0
        assert 1 <= row["max_core_crossbars"] <= 10
        # the point's whole report is kept beside the results
        kept = json.loads((out / "points" / f"mlp-{row['point']}" / "report.json").read_text())
        assert kept["schedules"][row["solver"]]["simulated_ns"] == row["simulated_ns"]
    assert {r["solver_status"] for r in run.rows if r["solver"] == "cpsat"} == {"OPTIMAL"}
    # the two meshes schedule differently: the grid is not a no-op
    assert run.rows[0]["cores_used"] <= 2 < run.rows[2]["cores_used"]
    # peft and cpsat of one target share one compilation
    for mesh in ([1, 2], [2, 2]):
        assert sorted(r["compile_reused"] for r in run.rows if r["mesh"] == mesh) == [
            False, True]
    # results.csv holds the same rows as results.json
    with (out / "results.csv").open() as f:
        table = list(csv.DictReader(f))
    saved = json.loads((out / "results.json").read_text())
    assert [r["point"] for r in table] == [r["point"] for r in saved] == [
        r["point"] for r in run.rows]
    assert [int(r["simulated_ns"]) for r in table] == [r["simulated_ns"] for r in run.rows]
    assert table[0]["mesh"] == "1x2" and table[0]["error"] == ""
    for name in ("pareto_latency_crossbars", "throughput_cores", "estimate_vs_simulated"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")


def test_resume_runs_only_unfinished_points(tmp_path: Path, client: Client) -> None:
    text = ('models = ["{examples}/mlp.onnx"]\n[grid]\ncrossbars_per_core = [16, 64]\n'
            '[solve]\nmesh = [2, 2]\n')
    out = tmp_path / "out"
    first = run_sweep(load_sweep(write_sweep(tmp_path, text)), client, out, plots=False)
    assert first.ran == 2 and first.ok
    again = run_sweep(load_sweep(write_sweep(tmp_path, text)), client, out, resume=True,
                      plots=False)
    assert again.ran == 0 and again.reused == 2 and again.rows == first.rows
    # nothing left to run: no cluster needed
    assert run_sweep(load_sweep(write_sweep(tmp_path, text)), None, out, resume=True,
                     plots=False).rows == first.rows
    # one more value: only the new point runs; the earlier rows are kept as they were
    wider = text.replace("[16, 64]", "[16, 32, 64]")
    grown = run_sweep(load_sweep(write_sweep(tmp_path, wider)), client, out, resume=True,
                      plots=False)
    assert grown.ran == 1 and grown.reused == 2
    assert [r["crossbars_per_core"] for r in grown.rows] == [16, 32, 64]
    assert grown.rows[0] == first.rows[0] and grown.rows[2] == first.rows[1]
    # a lost point (its worker kept dying) is run again; without --resume everything runs
    saved = json.loads((out / "results.json").read_text())
    saved[1]["status"] = "lost"
    (out / "results.json").write_text(json.dumps(saved))
    healed = run_sweep(load_sweep(write_sweep(tmp_path, wider)), client, out, resume=True,
                      plots=False)
    assert healed.ran == 1 and healed.rows[1]["status"] == "ok"
    assert run_sweep(load_sweep(write_sweep(tmp_path, wider)), client, out,
                     plots=False).ran == 3


def test_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path, client: Client,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    # 2 cores x 4 crossbars cannot hold the MLP's 10 weight tiles: rejected by compilation
    text = ('models = ["{examples}/mlp.onnx", "{examples}/lenet.onnx"]\n[grid]\n'
            'crossbars_per_core = [4, 16]\n[solve]\nmesh = [1, 2]\n')
    out = tmp_path / "out"
    run = run_sweep(load_sweep(write_sweep(tmp_path, text)), client, out, plots=False)
    assert not run.ok and len(run.rows) == 4
    status = {(r["model"], r["crossbars_per_core"]): r["status"] for r in run.rows}
    assert status == {("mlp", 4): "error", ("mlp", 16): "ok", ("lenet", 4): "error",
                      ("lenet", 16): "ok"}
    bad = run.rows[0]
    assert bad["error"].startswith("CapacityExceeded: model needs 10 crossbars")
    assert bad["simulated_ns"] is None and bad["estimate_ns"] is None
    trace = (out / "points" / f"mlp-{bad['point']}" / "error.txt").read_text()
    assert "Traceback" in trace and "CapacityExceeded" in trace
    # errors are deterministic in the inputs hash: --resume does not rerun them
    assert run_sweep(load_sweep(out.parent / "sweep.toml"), client, out, resume=True,
                      plots=False).ran == 0
    # plots skip the rows without figures
    assert len(write_plots(run.rows, tmp_path / "plots")) == 6


def test_worker_that_goes_away_mid_task_loses_no_point(tmp_path: Path) -> None:
    """Close a worker while it runs a point: Dask reschedules the point on the other one."""
    text = ('models = ["{examples}/lenet.onnx"]\n[grid]\n'
            'crossbars_per_core = [16, 24, 32, 64]\n')
    sweep = load_sweep(write_sweep(tmp_path, text))
    with local_cluster(2, processes=False) as cluster, Client(cluster) as client:
        closed: list[str] = []

        def close_a_busy_worker() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for worker in list(cluster.workers.values()):
                    if worker.state.executing:
                        closed.append(worker.address)
                        cluster.sync(worker.close, executor_wait=False)
                        return
                time.sleep(0.01)

        closer = threading.Thread(target=close_a_busy_worker)
        closer.start()
        run = run_sweep(sweep, client, tmp_path / "out", plots=False)
        closer.join()
    assert len(closed) == 1
    assert run.ok and len(run.rows) == 4
    assert all(r["worker"] != closed[0] for r in run.rows)


def test_worker_refuses_files_that_differ_from_the_hashed_ones(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    shutil.copy(EXAMPLES / "mlp.onnx", model)
    point = load_sweep(write_sweep(tmp_path, 'models = ["m.onnx"]\n')).points[0]
    model.write_bytes(model.read_bytes() + b"\0")  # edited after the sweep hashed it
    outcome = run_point(point)
    assert outcome.report is None and outcome.error is not None
    assert "differs from the one the sweep hashed" in outcome.error
    model.unlink()
    assert "does not exist on this worker" in str(run_point(point).error)


def test_pareto_front() -> None:
    pts = [(10, 5.0), (2, 9.0), (10, 4.0), (3, 9.5), (5, 6.0), (20, 4.0)]
    assert pareto(pts) == [(2, 9.0), (5, 6.0), (10, 4.0)]
    assert pareto(pts, maximize_y=True) == [(2, 9.0), (3, 9.5)]
    assert pareto([]) == []


def test_pipeline_point_row_reads_period_and_throughput(tmp_path: Path) -> None:
    """A pipeline point runs `raptor solve --mode pipeline` and its row carries the period
    estimate, the simulated period and the throughput of the report."""
    from raptor.sweep.results import make_row

    sweep = load_sweep(write_sweep(tmp_path, 'models = ["{examples}/mlp.onnx"]\n[grid]\n'
                                   'mode = ["pipeline"]\nsolver = ["pipeline"]\n'))
    (point,) = sweep.points
    outcome = run_point(point)
    assert outcome.error is None, outcome.traceback
    assert outcome.report is not None and outcome.report["mode"] == "pipeline"
    sched = outcome.report["schedules"]["pipeline"]
    row = make_row(point, outcome)
    assert row["status"] == "ok" and row["mode"] == "pipeline"
    assert (row["period_ns"], row["simulated_period_ns"], row["throughput_per_s"]) == (
        sched["period_ns"], sched["simulated_period_ns"], sched["throughput_per_s"])
    assert row["throughput_per_s"] == round(1e9 / row["simulated_period_ns"], 3)
    assert row["crossbars"] == sched["crossbars_used"]
