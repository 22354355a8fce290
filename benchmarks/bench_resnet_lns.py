"""ResNet-18 and ResNet-50 (224×224): PEFT and the CP-SAT large-neighbourhood search against
the problem's lower bound at a fixed budget (issue #26).

For each network (``benchmarks/models.py``) on the default target: compile, build the task
graph, the lower bound and its parts, PEFT, then the search that ``--solver cpsat`` runs on
graphs beyond ``CpSatOptions.max_full_pairs`` (both ResNets are: windows only), from PEFT's
schedule with ``--time-limit``'s deterministic units, seed 0. Latencies are the
communication model's replay (``estimate_ns``, what the search judges by; the simulator is
not run on these graphs here). Also reported: windows solved and kept, where the search's
wall time went (building windows' models, CP-SAT, replaying candidates) and the process's
peak memory.

    PYTHONPATH=$PWD python benchmarks/bench_resnet_lns.py [--models resnet18,resnet50]
        [--time-limit 120]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import onnx

from benchmarks.models import resnet18, resnet50
from raptor.driver import compile_model
from raptor.solver.cpsat import DET_PER_SECOND, CpSatOptions
from raptor.solver.evaluate import lower_bounds, validate_schedule
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.lns import lns_schedule
from raptor.solver.peft import peft_schedule
from raptor.target import Target

MODELS = {"resnet18": resnet18, "resnet50": resnet50}


def row(name: str, limit: float) -> str:
    target = Target()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(MODELS[name](), path)
        comp = compile_model(path, target)
    graph = build_compute_graph(comp.module.main(), target).graph
    t_build = time.perf_counter() - t0
    lb = lower_bounds(graph, target)
    t0 = time.perf_counter()
    peft = peft_schedule(graph, target)
    t_peft = time.perf_counter() - t0
    opts = CpSatOptions(time_limit=limit)
    if graph.num_tasks * target.num_cores <= opts.max_full_pairs:
        raise SystemExit(f"{name}: small enough for the whole-problem model; use raptor solve")
    t0 = time.perf_counter()
    best, stats = lns_schedule(graph, target, peft, limit * DET_PER_SECOND, opts.seed,
                               limit * opts.wall_factor, bound=lb.makespan_ns)
    t_lns = time.perf_counter() - t0
    errors = validate_schedule(graph, target, best)
    if errors:
        raise SystemExit(f"{name}: invalid schedule: {errors[0]}")
    bound = lb.makespan_ns
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    p, c = peft.estimate_ns, best.estimate_ns
    return (f"| {name} | {graph.num_tasks:,} | {bound:,} (work/cores {lb.work_per_core_ns:,}, "
            f"fan-in {lb.fan_in_ns:,}, layer load {lb.layer_load_ns:,}) | {p:,} | "
            f"{100 * (p - bound) / bound:.1f}% | {c:,} | {100 * (c - bound) / bound:.1f}% | "
            f"{100 * (p - c) / p:.2f}% | {stats.windows} / {stats.kept} | "
            f"{stats.units:.2f} | {t_build:.0f} / {t_peft:.0f} / {t_lns:.0f} | "
            f"{stats.build_s:.0f} / {stats.solve_s:.0f} / {stats.replay_s:.0f} | {rss:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--time-limit", type=float, default=120.0)
    args = ap.parse_args()
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model {unknown[0]!r}; known: {', '.join(MODELS)}", file=sys.stderr)
        raise SystemExit(2)
    print(f"LNS budget: {args.time_limit:g} s x {DET_PER_SECOND:g} = "
          f"{args.time_limit * DET_PER_SECOND:g} deterministic units\n")
    print("| model | tasks | lower bound ns | PEFT ns | PEFT gap | CP-SAT/LNS ns | LNS gap | "
          "gain | windows / kept | units | s: graph / PEFT / LNS | LNS s: models / CP-SAT / "
          "replays | peak GiB |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        print(row(name, args.time_limit), flush=True)


if __name__ == "__main__":
    main()
