"""Result rows: one per point, built from its report.json (ARCHITECTURE.md §9), written to
results.json and results.csv whole (temp file + rename) each time a point finishes.

Status: `ok` (valid schedule, simulated, numerics match), `failed` (it ran, but the schedule
is invalid, the simulation failed or the numbers differ), `error` (the pipeline raised:
rejected target, unsupported operator...), `lost` (the cluster could not finish the task:
its worker died more often than Dask allows). `--resume` reruns `lost` points only; the
others are deterministic in their inputs hash.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raptor.fileio import write_text_atomic
from raptor.sweep.point import Outcome
from raptor.sweep.spec import Point, SweepError

FINISHED = ("ok", "failed", "error")

METRICS = (
    "status", "estimate_ns", "simulated_ns", "ideal_simulated_ns", "period_ns",
    "simulated_period_ns", "throughput_per_s", "lower_bound_ns", "bound_ns", "solver_status",
    "crossbars", "max_core_crossbars", "cores_used", "cores", "bytes_moved", "messages", "tasks",
    "solve_seconds", "wall_seconds", "cpu_seconds", "compile_reused", "numerics_ok",
    "max_abs_error", "error", "worker",
)
"""Per-point figures after the model and grid columns. `throughput_per_s` in latency mode is
one inference at a time (1e9 / simulated_ns); `bytes_moved` counts NoC messages and
shared-memory reads and writes (inputs read inside bodies included); `max_core_crossbars` is
the most weight tiles one core holds (how close the schedule came to `crossbars_per_core`)."""


def columns(grid_keys: Iterable[str]) -> list[str]:
    keys = [k for k in grid_keys if k not in ("mode", "solver")]
    return ["point", "model", *keys, "mode", "solver", *METRICS, "model_path", "inputs_hash"]


def _failure(sched: dict[str, Any]) -> str | None:
    """Why a schedule that ran is not `ok`, or None."""
    if not sched.get("valid", True):
        return "invalid schedule: " + "; ".join(sched.get("violations", [])[:3])
    if sched.get("simulation_error"):
        return "simulation failed: " + str(sched["simulation_error"])
    numerics = sched.get("numerics")
    if numerics is None:
        return "not simulated"
    if not numerics["ok"]:
        return f"outputs differ from the reference (max abs error {numerics['max_abs_error']:.3g})"
    return None


def make_row(point: Point, outcome: Outcome | None, lost: str | None = None) -> dict[str, Any]:
    """The results row of `point` from its task's outcome (or the reason it was lost)."""
    row: dict[str, Any] = {
        "point": point.id, "model": point.model.label, **dict(point.values),
        "mode": point.option("mode"), "solver": point.option("solver"), **dict.fromkeys(METRICS),
        "model_path": str(point.model.path), "inputs_hash": point.inputs_hash,
        "cores": point.target.num_cores, "target": point.target.to_dict()}
    if outcome is None:
        row.update(status="lost", error=lost)
        return row
    row.update(wall_seconds=round(outcome.wall_seconds, 3),
               cpu_seconds=round(outcome.cpu_seconds, 3), worker=outcome.worker,
               compile_reused=outcome.compile_reused)
    rep = outcome.report
    if rep is None:
        row.update(status="error", error=outcome.error)
        return row
    sched = rep["schedules"][point.option("solver")]
    sim = sched.get("simulation") or {}
    simulated = sched.get("simulated_ns")
    throughput = sched.get("throughput_per_s")
    if throughput is None and rep["mode"] == "latency" and simulated:
        throughput = round(1e9 / simulated, 3)
    stages = sched.get("stages")
    numerics = sched.get("numerics")
    failure = _failure(sched)
    row.update(
        status="failed" if failure else "ok", error=failure,
        estimate_ns=sched["estimate_ns"], simulated_ns=simulated,
        ideal_simulated_ns=sched.get("ideal_simulated_ns"), period_ns=sched.get("period_ns"),
        simulated_period_ns=sched.get("simulated_period_ns"), throughput_per_s=throughput,
        lower_bound_ns=rep["lower_bound_ns"], bound_ns=sched.get("bound_ns"),
        solver_status=sched["status"].split()[0],  # the full text is in report.json
        crossbars=sum(s["crossbars"] for s in stages) if stages else rep["crossbars"],
        max_core_crossbars=max((c["crossbars"] for c in sim["cores"]), default=0)
        if sim else None,
        cores_used=sched["cores_used"],
        bytes_moved=(sim["message_bytes"] + sim["shared_read_bytes"] + sim["shared_write_bytes"]
                     + sim["input_read_bytes"]) if sim else None,
        messages=sim.get("messages"), tasks=rep["tasks"],
        solve_seconds=sched["solve_seconds"],
        numerics_ok=None if numerics is None else numerics["ok"],
        max_abs_error=None if numerics is None else numerics["max_abs_error"])
    return row


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        return "x".join(map(str, value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def write_results(out: Path, cols: list[str], rows: list[dict[str, Any]]) -> None:
    """results.json (a list of rows, each with its whole target) and results.csv (the
    columns), each replaced whole."""
    write_text_atomic(out / "results.json", json.dumps(rows, indent=1) + "\n")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in cols})
    write_text_atomic(out / "results.csv", buf.getvalue())


def read_finished(out: Path) -> dict[str, dict[str, Any]]:
    """Finished rows of an earlier run in `out`, by inputs hash (empty when there is none).
    Raises SweepError when results.json exists but cannot be read."""
    path = out / "results.json"
    if not path.exists():
        return {}
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise ValueError("not a list of rows")
        return {r["inputs_hash"]: r for r in rows if r.get("status") in FINISHED}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SweepError(f"cannot resume from {path}: {e}") from None
