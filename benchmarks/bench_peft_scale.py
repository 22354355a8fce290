"""PEFT at scale (issue #27): seconds against tasks on tile-free random layered DAGs.

Graphs are ``random_layered_dag(n, seed 1, width 16, no tiles)``; targets a 16×16 mesh
(256 cores) for 1k..100k tasks and an 8×8 mesh for 1,000 tasks × 64 cores. Each point is
the best of ``--repeat`` runs of ``peft_schedule`` (wall time, graph building excluded) with
the schedule checked by ``validate_schedule``; the makespan column is the schedule's
communication-aware estimate, so runs of two versions can be compared for quality too.

    PYTHONPATH=$PWD python benchmarks/bench_peft_scale.py [--sizes 1000,3000,...] [--repeat N]

Run it with another checkout first on PYTHONPATH to time that version's PEFT.
"""

from __future__ import annotations

import argparse
import time

from raptor.solver import peft_schedule, validate_schedule
from raptor.solver.generate import random_layered_dag
from raptor.target import Target

SIZES = (1000, 3000, 10000, 30000, 100000)


def point(n: int, rows: int, cols: int, repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` PEFT runs and the schedule's estimated makespan."""
    graph = random_layered_dag(n, 1, width=16, tiles_per_batch=(0, 0))
    target = Target(name=f"{rows}x{cols}", mesh_rows=rows, mesh_cols=cols)
    best = float("inf")
    makespan = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = peft_schedule(graph, target)
        best = min(best, time.perf_counter() - t0)
        errors = validate_schedule(graph, target, res)
        if errors:
            raise SystemExit(f"invalid schedule at {n} tasks: {errors[0]}")
        makespan = res.estimate_ns
    return best, makespan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="task counts on the 16x16 mesh (comma-separated)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per point (best is kept)")
    ap.add_argument("--small-repeat", type=int, default=5,
                    help="runs of the 1,000 tasks x 64 cores point")
    args = ap.parse_args()
    print("| tasks | cores | PEFT s | makespan ns |")
    print("|---:|---:|---:|---:|")
    s, m = point(1000, 8, 8, args.small_repeat)
    print(f"| 1000 | 64 | {s:.3f} | {m} |", flush=True)
    for n in (int(x) for x in args.sizes.split(",") if x):
        s, m = point(n, 16, 16, args.repeat)
        print(f"| {n} | 256 | {s:.2f} | {m} |", flush=True)


if __name__ == "__main__":
    main()
