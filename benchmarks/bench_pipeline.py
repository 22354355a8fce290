"""Pipeline mode: the spec's heuristic, the exact DP and the CP-SAT model side by side.

    python -m benchmarks.bench_pipeline [--time-limit 60] [--workers 2] [--no-resnet]
                                        [--models NAME ...] [--parts abc]

(a) every example model and ResNet-18 (224×224), with and without weight replication:
    period of each solver (model value and after packing/placement), CP-SAT status and
    bound with and without the DP's value as a bound, seconds; CP-SAT ≤ heuristic and
    DP = CP-SAT where both prove are checked and printed.
(b) ResNet-18 in detail: period, throughput, stages, crossbars, shared-memory service,
    seconds of each step of the heuristic.
(c) random layered graphs of G groups on P cores, the NOTES' CP-SAT frontier.

Prints markdown tables (docs/pipeline.md records them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx

from raptor.driver import compile_model
from raptor.gc_pause import collector_paused
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.generate import random_layered_dag
from raptor.solver.pipeline import (
    CpSatPipelineOptions,
    PipelineProblem,
    PipelineResult,
    build_problem,
    cpsat_pipeline,
    dp_pipeline,
    heuristic_pipeline,
    validate_pipeline,
)
from raptor.solver.pipeline.heuristic import run_heuristic
from raptor.solver.pipeline.result import build_result
from raptor.target import Target, load_target

ROOT = Path(__file__).resolve().parents[1]


def load(model: Path, target: Target) -> tuple[PipelineProblem, float, float]:
    t0 = time.perf_counter()
    build = build_compute_graph(compile_model(model, target).module.main(), target)
    t1 = time.perf_counter()
    problem = build_problem(build.graph, target, build=build)
    return problem, t1 - t0, time.perf_counter() - t1


def fmt(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def row_for(name: str, pr: PipelineProblem, replication: bool, opts: CpSatPipelineOptions
            ) -> tuple[str, dict[str, PipelineResult]]:
    g, t = pr.graph, pr.target
    heur = heuristic_pipeline(pr, replication)
    dp = dp_pipeline(pr, replication)
    alone = cpsat_pipeline(pr, replication, CpSatPipelineOptions(
        time_limit=opts.time_limit, num_workers=opts.num_workers, seed=opts.seed,
        dp_bound=False), initial=heur)
    bounded = cpsat_pipeline(pr, replication, opts, initial=heur)
    for r in (heur, dp, alone, bounded):
        errs = validate_pipeline(g, t, r, pr)
        if errs:
            raise SystemExit(f"{name} {r.solver}: {errs[0]}")
    assert alone.objective_ns is not None and bounded.objective_ns is not None
    le = alone.objective_ns <= heur.model_period_ns and alone.period_ns <= heur.period_ns
    both = alone.status == "OPTIMAL"
    eq = "yes" if both and alone.objective_ns == dp.objective_ns else (
        "n/a (CP-SAT unproven)" if not both else "NO")
    line = (f"| {name} | {'on' if replication else 'off'} | {pr.num_groups} | "
            f"{fmt(heur.model_period_ns)} / {fmt(heur.period_ns)} | {heur.solve_seconds:.2f} | "
            f"{fmt(dp.objective_ns)} / {fmt(dp.period_ns)} | {dp.solve_seconds:.2f} | "
            f"{alone.status} {fmt(alone.objective_ns)} (bound {fmt(alone.bound_ns)}) | "
            f"{alone.solve_seconds:.2f} | {bounded.status} | {bounded.solve_seconds:.2f} | "
            f"{'yes' if le else 'NO'} | {eq} | {len(heur.stages)} | {fmt(heur.wave_period_ns)} |")
    return line, {"heuristic": heur, "dp": dp, "cpsat": alone}


def section_a(models: list[tuple[str, Path]], target: Target, opts: CpSatPipelineOptions
              ) -> dict[str, dict[bool, dict[str, PipelineResult]]]:
    print("| model | replication | groups | heuristic model / realized ns | heur s | "
          "DP model / realized ns | DP s | CP-SAT alone | CP-SAT s | CP-SAT with DP bound | "
          "s | CP-SAT ≤ heur | DP = CP-SAT | stages | heur wave ns |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---|---:|---|---|---:|---:|")
    out: dict[str, dict[bool, dict[str, PipelineResult]]] = {}
    for name, path in models:
        pr, _, _ = load(path, target)
        out[name] = {}
        for replication in (False, True):
            line, res = row_for(name, pr, replication, opts)
            out[name][replication] = res
            print(line, flush=True)
    return out


def section_b(path: Path, target: Target) -> None:
    t0 = time.perf_counter()
    build = build_compute_graph(compile_model(path, target).module.main(), target)
    t1, c1 = time.perf_counter(), time.process_time()
    pr = build_problem(build.graph, target, build=build)
    t2, c2 = time.perf_counter(), time.process_time()
    print(f"\nResNet-18 224: {build.graph.num_tasks} tasks, {len(build.graph.edges)} edges, "
          f"{len(build.graph.distinct_weights())} distinct tiles, {pr.num_groups} groups; "
          f"compile + ComputeGraph {t1 - t0:.1f} s; problem (groups, tables) {t2 - t1:.2f} s "
          f"wall / {c2 - c1:.2f} s CPU\n")
    print("| replication | period ns | throughput /s | model ns | memory service ns | "
          "max load ns | max path ns | wave ns | stages | cores | crossbars (+copies) | "
          "replicated groups | heuristic s wall / CPU | result s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for replication in (False, True):
        h0, p0 = time.perf_counter(), time.process_time()
        out = run_heuristic(pr, replication)
        h1, p1 = time.perf_counter(), time.process_time()
        res = build_result(pr, out.placement, solver="pipeline", status="HEURISTIC",
                           model_period=out.model_period)
        h2 = time.perf_counter()
        extra = sum(r.extra_crossbars for r in res.replicated)
        print(f"| {'on' if replication else 'off'} | {fmt(res.period_ns)} | "
              f"{res.throughput_per_s:.1f} | {fmt(res.model_period_ns)} | "
              f"{fmt(res.memory_service_ns)} | {fmt(max(s.load_ns for s in res.stages))} | "
              f"{fmt(max(s.path_ns for s in res.stages))} | {fmt(res.wave_period_ns)} | "
              f"{len(res.stages)} | {sum(len(s.cores) for s in res.stages)} | "
              f"{res.crossbars_used} (+{extra}) | {len(res.replicated)} | "
              f"{h1 - h0:.2f} / {p1 - p0:.2f} | {h2 - h1:.2f} |", flush=True)


def section_c(opts: CpSatPipelineOptions) -> None:
    print("\n| groups × cores | seed | DP ns | DP s | heuristic ns | CP-SAT alone | s | "
          "CP-SAT with DP bound | s |")
    print("|---|---:|---:|---:|---:|---|---:|---|---:|")
    for G, rows, cols, seed in [(32, 4, 4, 1), (32, 4, 4, 2), (64, 4, 4, 1), (64, 8, 8, 1),
                                (64, 8, 8, 2)]:
        g = random_layered_dag(G * 6, seed, width=8, max_lanes=6, tiles_per_batch=(0, 3),
                               cost_range=(100, 5000), bytes_range=(8, 256))
        t = Target(mesh_rows=rows, mesh_cols=cols)
        pr = build_problem(g, t, max_groups=G)
        dp = dp_pipeline(pr)
        heur = heuristic_pipeline(pr)
        cells = []
        for dpb in (False, True):
            cp = cpsat_pipeline(pr, True, CpSatPipelineOptions(
                time_limit=opts.time_limit, num_workers=opts.num_workers, dp_bound=dpb),
                initial=heur)
            cells.append(f"{cp.status} {fmt(cp.objective_ns)} (bound {fmt(cp.bound_ns)}) | "
                         f"{cp.solve_seconds:.1f}")
        print(f"| {pr.num_groups} × {t.num_cores} | {seed} | {fmt(dp.objective_ns)} | "
              f"{dp.solve_seconds:.2f} | {fmt(heur.model_period_ns)} | {cells[0]} | "
              f"{cells[1]} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-resnet", action="store_true")
    ap.add_argument("--models", nargs="*", help="example names (default: all)")
    ap.add_argument("--parts", default="ab", help="a: every model, b: ResNet-18 detail, "
                    "c: CP-SAT frontier on random graphs (default ab)")
    args = ap.parse_args(argv)
    target = load_target("default")
    opts = CpSatPipelineOptions(time_limit=args.time_limit, num_workers=args.workers)
    models = [(p.stem, p) for p in sorted((ROOT / "examples").glob("*.onnx"))
              if not args.models or p.stem in args.models]
    resnet = not args.no_resnet and ("a" in args.parts or "b" in args.parts)
    with collector_paused(), tempfile.TemporaryDirectory() as tmp:
        r18 = Path(tmp) / "resnet18.onnx"
        if resnet:
            from benchmarks.models import resnet18

            onnx.save(resnet18(), r18)
            models.append(("resnet18", r18))
        if "a" in args.parts:
            section_a(models, target, opts)
        if resnet and "b" in args.parts:
            section_b(r18, target)
        if "c" in args.parts:
            section_c(opts)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
