"""Run a sweep's points as Dask tasks and write each result the moment it arrives.

Dask does the distribution and the fault tolerance: a worker that dies has its tasks
rescheduled on the others (up to `distributed.scheduler.allowed-failures`, 3 by default);
beyond that the point is recorded as `lost`. This process only submits, collects and writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
from distributed import Client, Future, LocalCluster, as_completed
from distributed.diagnostics.progressbar import TextProgressBar

from raptor.fileio import write_text_atomic
from raptor.sweep.plots import write_plots
from raptor.sweep.point import Outcome, run_point
from raptor.sweep.results import columns, make_row, read_finished, write_results
from raptor.sweep.spec import Point, Sweep

OnRow = Callable[[dict[str, Any], int, int], None]
"""Called with each new row, the number of rows so far and the number of points."""


@dataclass
class SweepRun:
    rows: list[dict[str, Any]]
    """Every point's row in grid order."""
    ran: int
    """Points computed in this run (the others were finished rows of an earlier run)."""
    reused: int
    """Finished rows of an earlier run kept for points of this sweep (`resume`)."""
    dropped: int
    """Rows of the earlier run that are not points of this sweep."""
    plots: list[Path]

    @property
    def ok(self) -> bool:
        return all(r["status"] == "ok" for r in self.rows)


WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
"""Dask's statistical profiler holds the task thread's frames from the worker's event-loop
thread; when it drops the last reference to a finished frame, the egglog e-graphs in its
locals are freed on the wrong thread, which egglog refuses ("EGraph is unsendable, but is
being dropped on another thread", seen on the example sweep). Workers run without it."""


def profiling_workers(client: Client) -> list[str]:
    """Workers of an existing cluster that run Dask's profiler (see WORKER_CONFIG)."""
    key = next(iter(WORKER_CONFIG))
    enabled = client.run(lambda: bool(dask.config.get(key)))
    return sorted(address for address, on in enabled.items() if on)


@contextlib.contextmanager
def local_cluster(workers: int | None = None, processes: bool = True) -> Iterator[LocalCluster]:
    """A LocalCluster sized to the machine: one single-threaded worker per core, each its own
    process (the pipeline is mostly Python: threads would share one interpreter lock), or
    threads of this process with `processes=False` (fast to start: the tests). Its HTTP
    endpoint takes any free port: several sweeps may share a machine.

    Ctrl-C is held back in this process while the cluster starts and acted on as soon as it
    is up: interrupting Dask half-way leaves a cluster that its exit handler cannot close
    (an assertion and pages of tracebacks)."""
    n = workers or os.cpu_count() or 1
    hold = threading.current_thread() is threading.main_thread()
    cluster: LocalCluster | None = None
    try:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hold else None
        try:
            with dask.config.set(WORKER_CONFIG):
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=processes,
                                       dashboard_address=":0")
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held Ctrl-C lands here
        yield cluster
    finally:
        if cluster is not None:
            cluster.close()


def _write_point(out: Path, point: Point, outcome: Outcome | None) -> None:
    folder = out / "points" / point.folder
    if outcome is not None and outcome.report is not None:
        write_text_atomic(folder / "report.json", json.dumps(outcome.report, indent=2) + "\n")
    elif outcome is not None and outcome.traceback:
        write_text_atomic(folder / "error.txt", outcome.traceback)


def run_sweep(sweep: Sweep, client: Client | None, out: str | Path, resume: bool = False,
              on_row: OnRow | None = None, progress_bar: bool = False, plots: bool = True
              ) -> SweepRun:
    """Run every point not finished in `out` (with `resume`); results are rewritten after
    each point, so an interrupted sweep loses only the points still running. The plots
    are drawn at the end, from every row. `client` may be None when no point is left."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cols = columns(sweep.grid_keys)
    earlier = read_finished(out) if resume else {}
    current = {p.inputs_hash for p in sweep.points}
    rows: dict[str, dict[str, Any]] = {h: r for h, r in earlier.items() if h in current}
    todo = [p for p in sweep.points if p.inputs_hash not in rows]
    reused = len(rows)
    order = {p.inputs_hash: p.index for p in sweep.points}

    def flush() -> None:
        write_results(out, cols, sorted(rows.values(), key=lambda r: order[r["inputs_hash"]]))

    flush()
    futures: list[Future] = []
    if todo:
        if client is None:
            raise ValueError("run_sweep: points to run but no Dask client")
        # grouped by compilation, so that a worker's next point usually reuses its last one
        todo.sort(key=lambda p: (p.compile_key, p.index))
        futures = [client.submit(run_point, p, key=f"raptor-point-{p.inputs_hash}",
                                 pure=False) for p in todo]
    by_key = {f.key: p for f, p in zip(futures, todo, strict=True)}
    if progress_bar and futures:  # Dask's text bar, drawn from its own thread
        threading.Thread(target=TextProgressBar, args=(futures,), daemon=True,
                         name="raptor-sweep-progress").start()
    try:
        for future in as_completed(futures) if futures else []:
            point = by_key[future.key]
            outcome: Outcome | None = None
            lost = None
            try:
                outcome = future.result()
            except Exception as e:  # KilledWorker, or the task could not be run at all
                lost = f"{type(e).__name__}: {e}".splitlines()[0][:500]
            future.release()
            _write_point(out, point, outcome)
            row = make_row(point, outcome, lost)
            rows[point.inputs_hash] = row
            flush()
            if on_row is not None:
                on_row(row, len(rows), len(sweep.points))
    finally:
        if client is not None:
            client.cancel([f for f in futures if not f.done()])
        if progress_bar:
            sys.stdout.write("\33[2K\r")
            sys.stdout.flush()
    final = sorted(rows.values(), key=lambda r: order[r["inputs_hash"]])
    return SweepRun(final, len(todo), reused, len(set(earlier) - current),
                    write_plots(final, out) if plots else [])
