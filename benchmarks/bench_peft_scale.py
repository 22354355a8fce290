"""PEFT at scale (issue #27): seconds against tasks on tile-free random layered DAGs.

Graphs are ``random_layered_dag(n, seed 1, width 16, no tiles)``; targets a 16×16 mesh
(256 cores) for 1k..100k tasks and an 8×8 mesh for 1,000 tasks × 64 cores. Each point is
the best wall time of ``--repeat`` runs of ``peft_schedule`` (graph building excluded),
the schedule checked by ``validate_schedule``; the makespan column is the schedule's
communication-aware estimate (a plain makespan on versions that have none), so two
versions can be compared for quality too.

    PYTHONPATH=$PWD python benchmarks/bench_peft_scale.py [--sizes 1000,3000,...] [--repeat N]
        [--small-repeat N] [--baseline DIR ...]

``--baseline DIR`` times the 1,000 × 64 point of the checkout at DIR (in a subprocess with
DIR first on PYTHONPATH), alternating with this checkout's runs so that both see the same
machine load. Run the whole script with another checkout on PYTHONPATH to time that
version's curve.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from raptor.solver import peft_schedule, validate_schedule
from raptor.solver.generate import random_layered_dag
from raptor.target import Target

SIZES = (1000, 3000, 10000, 30000, 100000)


def point(n: int, rows: int, cols: int, repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` PEFT runs and the schedule's makespan."""
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
        makespan = getattr(res, "estimate_ns", res.makespan_ns)
    return best, makespan


def small_in(checkout: str) -> tuple[float, int]:
    """One run of the 1,000 × 64 point by the checkout at ``checkout``."""
    env = dict(os.environ, PYTHONPATH=checkout)
    out = subprocess.run([sys.executable, __file__, "--small-only"], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="task counts on the 16x16 mesh (comma-separated)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per 16x16 point (best kept)")
    ap.add_argument("--small-repeat", type=int, default=5,
                    help="runs of the 1,000 tasks x 64 cores point (best kept)")
    ap.add_argument("--baseline", action="append", default=[], metavar="DIR",
                    help="also time the 1,000 x 64 point of the checkout at DIR")
    ap.add_argument("--small-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.small_only:
        s, m = point(1000, 8, 8, 1)
        print(s, m)
        return
    print("| tasks | cores | PEFT s | makespan ns | version |")
    print("|---:|---:|---:|---:|---|")
    ours = (float("inf"), 0)
    base = {d: (float("inf"), 0) for d in args.baseline}
    for _ in range(args.small_repeat):
        s, m = point(1000, 8, 8, 1)
        ours = (min(ours[0], s), m)
        for d in args.baseline:
            s, m = small_in(d)
            base[d] = (min(base[d][0], s), m)
    print(f"| 1000 | 64 | {ours[0]:.3f} | {ours[1]} | this |", flush=True)
    for d, (s, m) in base.items():
        print(f"| 1000 | 64 | {s:.3f} | {m} | {d} ({s and ours[0] / s:.2f}x) |", flush=True)
    for n in (int(x) for x in args.sizes.split(",") if x):
        s, m = point(n, 16, 16, args.repeat)
        print(f"| {n} | 256 | {s:.2f} | {m} | this |", flush=True)


if __name__ == "__main__":
    main()
