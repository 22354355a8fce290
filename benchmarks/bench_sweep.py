"""`raptor sweep` figures: wall time of a whole sweep with 1 and 2 local Dask workers, and a
worker process killed mid-sweep (SIGKILL) to show that Dask reruns its point elsewhere.

    python benchmarks/bench_sweep.py [--sweep examples/sweep.toml] [--workers 1,2] [--kill]

Wall time is measured around the command line itself (`python -m raptor.cli sweep`: start-up,
cluster start, points, plots, shutdown), each run into a fresh output folder. Prints
Markdown (paste into docs/sweep.md)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distributed import Client

from raptor.sweep.runner import local_cluster, run_sweep
from raptor.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]


def timed_sweep(sweep: Path, workers: int, out: Path) -> tuple[float, list[dict[str, object]]]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "raptor.cli", "sweep", str(sweep),
                           "--workers", str(workers), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"raptor sweep failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall, json.loads((out / "results.json").read_text())


def kill_a_busy_worker(client: Client, timeout: float = 120.0) -> tuple[str, int] | None:
    """SIGKILL the process of a worker that is executing a task; returns its address and pid
    (None if no worker was busy before `timeout`). Its nanny starts a fresh process."""
    pids: dict[str, int] = client.run(os.getpid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = client.run(lambda dask_worker: len(dask_worker.state.executing))
        for address, n in busy.items():
            if n:
                os.kill(pids[address], signal.SIGKILL)
                return address, pids[address]
        time.sleep(0.05)
    return None


def kill_run(sweep_path: Path, out: Path) -> dict[str, object]:
    """A sweep on 2 worker processes, one killed while it runs a point."""
    sweep = load_sweep(sweep_path)
    with local_cluster(2, processes=True) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        killed: list[tuple[str, int] | None] = []
        killer = threading.Thread(target=lambda: killed.append(kill_a_busy_worker(client)))
        killer.start()
        start = time.perf_counter()
        run = run_sweep(sweep, client, out, plots=False)
        wall = time.perf_counter() - start
        killer.join()
    statuses: dict[str, int] = {}
    for r in run.rows:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    victim = killed[0]
    return {"points": len(sweep.points), "rows": len(run.rows), "statuses": statuses,
            "killed": victim, "ran_on_killed": sum(1 for r in run.rows
                                                   if victim and r["worker"] == victim[0]),
            "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, default=ROOT / "examples" / "sweep.toml")
    ap.add_argument("--workers", default="1,2", help="local worker counts to time")
    ap.add_argument("--kill", action="store_true", help="also kill a worker mid-sweep")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} before the runs")
    print("\n| workers | points | ok | wall s | sum of point wall s | sum of point CPU s |\n"
          "|---:|---:|---:|---:|---:|---:|")
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.workers.split(",")):
            wall, rows = timed_sweep(args.sweep, n, Path(tmp) / f"w{n}")
            ok = sum(1 for r in rows if r["status"] == "ok")
            busy = sum(float(r["wall_seconds"] or 0) for r in rows)  # type: ignore[arg-type]
            cpu = sum(float(r["cpu_seconds"] or 0) for r in rows)  # type: ignore[arg-type]
            print(f"| {n} | {len(rows)} | {ok} | {wall:.1f} | {busy:.1f} | {cpu:.1f} |",
                  flush=True)
        if args.kill:
            res = kill_run(args.sweep, Path(tmp) / "kill")
            print(f"\nkill: {res['points']} points, {res['rows']} rows, statuses "
                  f"{res['statuses']}, killed worker {res['killed']}, rows finished on the "
                  f"killed worker before it died: {res['ran_on_killed']}, "
                  f"wall {res['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
