"""`raptor sweep SWEEP.toml`: validate, run on Dask, write results and plots, print a table.
Exit codes as for every command: 0 every point ok, 1 a point failed, 2 bad input."""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from raptor.sweep.spec import Sweep, SweepError, load_sweep
from raptor.ui.interrupt import EXIT_INTERRUPTED

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"
    if isinstance(v, list):
        return "x".join(map(str, v))
    return str(v)


def _values(sweep: Sweep, row: dict[str, Any]) -> str:
    return " ".join(f"{name}={_group_value(keys, row)}" for name, keys in sweep.groups.items())


def _group_value(keys: list[str], row: dict[str, Any]) -> str:
    """A grid entry's value in a row: linked keys joined with '/'."""
    return "/".join(_fmt(row.get(k)) for k in keys)


def _linked(sweep: Sweep) -> str:
    return "; ".join(f"{name} = {'/'.join(keys)}" for name, keys in sweep.groups.items()
                     if keys != [name])


def _points_table(sweep: Sweep) -> Table:
    linked = _linked(sweep)
    table = Table(title=f"{len(sweep.points)} points of {sweep.path}"
                  + (f" ({linked})" if linked else ""))
    for c in ("point", "model", *sweep.groups):
        table.add_column(c)
    for p in sweep.points:
        values = dict(p.values)
        table.add_row(p.id, p.model.label,
                      *(_group_value(keys, values) for keys in sweep.groups.values()))
    return table


def _results_table(sweep: Sweep, rows: list[dict[str, Any]]) -> Table:
    """One line per point: the grid values that vary, then the figures."""
    fixed = [f"{k} {rows[0][k]}" for k in ("mode", "solver") if k not in sweep.grid_keys and rows]
    period = any(r["period_ns"] is not None for r in rows)
    searched = any(r["solver"] == "cpsat" for r in rows)
    contended = all(p.option("contention") for p in sweep.points)
    notes = [*fixed, _linked(sweep), "simulated: with link contention" if contended else "",
             "inferences/s in latency mode: one at a time"]
    table = Table(title=f"sweep results ({'; '.join(n for n in notes if n)})")
    cols = ["model", *sweep.groups, "status", *(["solver status"] if searched else []),
            "estimate ns", "simulated ns",
            *(["period ns"] if period else []), "inferences/s", "cores", "crossbars",
            "compile", "solve s", "wall s"]
    for c in cols:
        table.add_column(c, justify="right" if c.endswith((" ns", "/s", " s")) or c in (
            "cores", "crossbars") else "left")
    for r in rows:
        compile_ = {True: "shared", False: "ran", None: "-"}[r["compile_reused"]]
        table.add_row(r["model"], *(_group_value(keys, r) for keys in sweep.groups.values()),
                      r["status"], *([_fmt(r["solver_status"]).split(" ")[0]] if searched else []),
                      _fmt(r["estimate_ns"]), _fmt(r["simulated_ns"]),
                      *([_fmt(r["simulated_period_ns"] or r["period_ns"])] if period else []),
                      _fmt(r["throughput_per_s"]), _fmt(r["cores_used"]),
                      _fmt(r["crossbars"]), compile_, _fmt(r["solve_seconds"]),
                      _fmt(r["wall_seconds"]))
    return table


@contextlib.contextmanager
def _client(scheduler: str | None, workers: int | None, needed: bool, err: Console
            ) -> Iterator[Any]:
    from distributed import Client

    from raptor.sweep.runner import local_cluster, profiling_workers
    if not needed:  # every point finished earlier: no cluster to start
        yield None
        return
    if scheduler is None:
        with local_cluster(workers) as cluster, Client(cluster) as local:
            yield local
        return
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as e:
        raise SweepError(f"cannot connect to the Dask scheduler at {scheduler}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    with client:
        profiling = profiling_workers(client)
        if profiling:
            err.print(f"note: {len(profiling)} worker(s) run Dask's profiler, which can free "
                      "egglog e-graphs on the wrong thread (an error message and a leak); "
                      "start workers with DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False",
                      markup=False)
        yield client


def sweep_command(path: str, scheduler: str | None, workers: int | None, out_dir: str,
                  resume: bool, dry_run: bool, out: Console, err: Console) -> int:
    if scheduler is not None and workers is not None:
        err.print("--workers sizes the local cluster; the size of a --scheduler cluster is "
                  "set where its workers start", markup=False)
        return EXIT_USAGE
    try:
        sweep = load_sweep(path)
    except SweepError as e:
        err.print(str(e), markup=False)
        return EXIT_USAGE
    out.print(f"sweep {path}: {len(sweep.models)} model(s), {len(sweep.points)} points",
              markup=False)
    for note in sweep.notes:
        err.print(f"note: {note}", markup=False)
    if dry_run:
        out.print(_points_table(sweep))
        return EXIT_OK

    from raptor.sweep.results import read_finished
    from raptor.sweep.runner import run_sweep

    terminal = sys.stdout.isatty()
    started = time.perf_counter()

    def on_row(row: dict[str, Any], done: int, total: int) -> None:
        what = row["error"] if row["status"] != "ok" else \
            f"simulated {_fmt(row['simulated_ns'])} ns"
        out.print(f"[{done}/{total}] {row['model']} {_values(sweep, row)}: {row['status']} "
                  f"({what}) {_fmt(row['wall_seconds'])} s", markup=False)

    try:
        finished = read_finished(Path(out_dir)) if resume else {}
        needed = any(p.inputs_hash not in finished for p in sweep.points)
        with _client(scheduler, workers, needed, err) as client:
            run = run_sweep(sweep, client, out_dir, resume, None if terminal else on_row,
                            progress_bar=terminal)
    except SweepError as e:  # no scheduler there, an unreadable results.json to resume
        err.print(str(e), markup=False)
        return EXIT_USAGE
    except OSError as e:
        err.print(f"cannot write to {out_dir}: {e.strerror or e}", markup=False)
        return EXIT_USAGE
    except KeyboardInterrupt:
        saved = Path(out_dir) / "results.json"
        err.print("raptor: interrupted" + (f": finished points are in {saved}; run again with "
                                           "--resume to finish the others" if saved.exists()
                                           else ""), markup=False)
        return EXIT_INTERRUPTED
    wall = time.perf_counter() - started
    out.print(_results_table(sweep, run.rows))
    counts = Counter(r["status"] for r in run.rows)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    resumed = f", {run.reused} finished earlier" if resume else ""
    dropped = f", {run.dropped} earlier rows of other points dropped" if run.dropped else ""
    out.print(f"{len(run.rows)} points: {summary} ({run.ran} run in {wall:.1f} s{resumed}"
              f"{dropped})", markup=False)
    out.print(f"wrote {out_dir}/: results.csv, results.json, points/*/report.json"
              + (", " + ", ".join(sorted({p.stem for p in run.plots})) + " (.svg, .png)"
                 if run.plots else ""), markup=False)
    folders = {p.inputs_hash: p.folder for p in sweep.points}
    for r in run.rows:
        if r["status"] != "ok":
            err.print(f"{r['model']} {_values(sweep, r)}: {r['status']}: "
                      f"{r['error']} (points/{folders[r['inputs_hash']]}/)", markup=False)
    return EXIT_OK if run.ok else EXIT_FAIL
