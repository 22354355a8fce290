"""End-to-end figures on real networks: compile (import, layout, lower, canonicalize),
ComputeGraph, PEFT vs CP-SAT (status, bound, gap), materialization, and simulation (ideal
and with contention), for every example model and ResNet-18 at 224x224.

    python benchmarks/bench_e2e.py [--time-limit 60] [--workers 2] [--models a,b] [--no-resnet]

Prints a Markdown table per section (paste into docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.models import resnet18
from raptor.driver import compile_model, ir_inputs
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import SimOptions, simulate
from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.evaluate import lower_bounds, retime
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.peft import peft_schedule
from raptor.target import load_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(path: Path, time_limit: float, workers: int, cpsat: bool, sim: bool) -> dict[str, object]:
    target = load_target("default")
    row: dict[str, object] = {"model": path.stem}
    t0 = time.perf_counter()
    comp = compile_model(path, target)
    row["compile_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    gb = build_compute_graph(comp.module.main(), target)
    row["graph_s"] = time.perf_counter() - t0
    g = gb.graph
    row.update(tasks=g.num_tasks, edges=len(g.edges), crossbars=comp.lowered.crossbars)
    lb = lower_bounds(g, target)
    row["lower_bound"] = lb.makespan_ns
    t0 = time.perf_counter()
    peft = peft_schedule(g, target)
    row["peft_s"] = time.perf_counter() - t0
    row["peft_ns"] = peft.makespan_ns
    if cpsat:
        cp = cpsat_schedule(g, target, CpSatOptions(time_limit=time_limit, num_workers=workers),
                            initial=peft)
        row.update(cpsat_ns=cp.makespan_ns, cpsat_status=cp.status.split(" ")[0],
                   cpsat_bound=cp.bound_ns, cpsat_model=cp.model, cpsat_s=cp.solve_seconds)
    if sim:
        start = retime(g, target, peft.core_of, peft.core_tasks)
        end = [start[t] + g.tasks[t].cost_ns for t in range(g.num_tasks)]
        t0 = time.perf_counter()
        sm = materialize(comp.module, gb.projection, gb.outputs,
                         ScheduleView(peft.core_of, start, end))
        row["materialize_s"] = time.perf_counter() - t0
        assert comp.feeds is not None
        feeds = ir_inputs(comp.graph, comp.feeds.data)
        ideal = simulate(sm, target, dict(feeds), SimOptions.ideal(trace=False))
        t0 = time.perf_counter()
        full = simulate(sm, target, dict(feeds), SimOptions(trace=False))
        row["sim_s"] = time.perf_counter() - t0
        row.update(estimate_ns=max(end), ideal_ns=ideal.report.latency_ns,
                   simulated_ns=full.report.latency_ns,
                   sim_ops_per_s=(full.report.ops_executed + full.report.body_ops_executed)
                   / max(row["sim_s"], 1e-9))  # type: ignore[arg-type]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", default="mlp,lenet,resnet_block,mobilenet_block,yolo_neck")
    ap.add_argument("--no-resnet", action="store_true")
    args = ap.parse_args()
    rows = []
    for name in args.models.split(","):
        rows.append(run(EXAMPLES / f"{name}.onnx", args.time_limit, args.workers, True, True))
        print(rows[-1], flush=True)
    if not args.no_resnet:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "resnet18.onnx"
            onnx.save(resnet18(), path)
            np.savez(Path(tmp) / "resnet18.npz",
                     input=np.random.default_rng(0).standard_normal((1, 3, 224, 224))
                     .astype(np.float32))
            rows.append(run(path, min(args.time_limit, 30.0), args.workers, True, True))
            print(rows[-1], flush=True)
    print("\n| model | tasks | edges | crossbars | compile s | graph s | lower bound ns | PEFT ns "
          "| PEFT s | CP-SAT ns | CP-SAT bound ns | status (model) | PEFT gap to bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        bound = r.get("cpsat_bound") or r["lower_bound"]
        gap = (r["peft_ns"] - bound) / bound  # type: ignore[operator]
        print(f"| {r['model']} | {r['tasks']} | {r['edges']} | {r['crossbars']} | "
              f"{r['compile_s']:.2f} | {r['graph_s']:.2f} | {r['lower_bound']:,} | "
              f"{r['peft_ns']:,} | {r['peft_s']:.2f} | {r.get('cpsat_ns', 0):,} | "
              f"{r.get('cpsat_bound', 0):,} | {r.get('cpsat_status')} ({r.get('cpsat_model')}) "
              f"| {gap:.1%} |")
    print("\n| model | estimate ns | ideal sim ns | simulated ns (contention) | materialize s | "
          "sim s | sim ops/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['estimate_ns']:,} | {r['ideal_ns']:,} | "
              f"{r['simulated_ns']:,} | {r['materialize_s']:.2f} | {r['sim_s']:.2f} | "
              f"{r['sim_ops_per_s']:,.0f} |")


if __name__ == "__main__":
    main()
