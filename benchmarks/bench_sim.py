"""Simulator throughput: simulated ops per second on a synthetic 64-core scheduled program.

    python benchmarks/bench_sim.py [--cores 64] [--steps 64] [--repeat 3]
    python benchmarks/bench_sim.py --spat r18.sched.spat --weights r18.weights.npz \
        --inputs r18.inputs.npz [--repeat 3]     # a saved scheduled model instead
    python benchmarks/bench_sim.py --model examples/yolo_neck.onnx [--repeat 3]
                                                 # compile + PEFT-schedule a model first
    (--trace with --spat or --model: trace on, as `raptor solve` simulates;
     --pimsim-export: the program as exported for pimsim-nn, run under pimsim-nn's model
     with the export's timings and message order, as `raptor solve --export-pimsim` does)

Every core loads one row of the input, then runs `steps` rounds of: post a receive from a
hypercube partner (distance 1, 2, 4, ... cores, so routes share links), a scheduled compute
(MVM on one of its 4 tiles, tanh), a send of the result to the partner, and a vector add of
the partner's value; it ends with a 4-lane scheduled batch and a store. An op is one executed
IR op: a core-level instruction or one lane-body op inside a compute (a batch counts each lane).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from raptor.ir.module import Module
from raptor.ir.parser import parse_module
from raptor.sim import SimOptions, Simulator, simulate
from raptor.target import Target

N = 32
TILES = 4


def program_text(cores: int, steps: int) -> str:
    vec, tile = f"tensor<{N}xf32>", f"tensor<{N}x{N}xf32>"
    lines = [f"func.func @main(%x: tensor<{cores}x{N}xf32>) -> tensor<{cores}x{N}xf32> {{"]
    for c in range(cores):
        lines += [f"  %w{c}_{t} = spat.weight @w{c}_{t} : {tile}" for t in range(TILES)]
    lines.append(f"  %o = pim.alloc_shared : tensor<{cores}x{N}xf32>")
    dims = max(1, (cores - 1).bit_length())
    for c in range(cores):
        lines += [f"  pim.core {c} {{",
                  f"    %a0 = pim.load %x[{c}, 0] [1, {N}] [1, 1] : tensor<{cores}x{N}xf32> "
                  f"to {vec}"]
        for s in range(steps):
            p = c ^ (1 << (s % dims))
            if p >= cores:
                p = c
            w = f"%w{c}_{s % TILES}"
            lines += [
                f"    %r{s} = spat.channel_receive from core({p}) channel({s}) : {vec}",
                f"    %h{s} = spat.scheduled_compute ins(%a{s} : {vec}, {w} : {tile}) -> {vec} {{",
                f"    ^bb0(%in{s}: {vec}, %t{s}: {tile}):",
                f"      %m{s} = pim.mvm %t{s}, %in{s} : {tile}, {vec} -> {vec}",
                f"      %y{s} = pim.tanh %m{s} : {vec}",
                f"      spat.yield %y{s} : {vec}",
                "    }",
                f"    spat.channel_send %h{s} to core({p}) channel({s}) : {vec}",
                f"    %a{s + 1} = pim.vadd %h{s}, %r{s} : {vec}",
            ]
        lines += [
            f"    %q = spat.scheduled_compute_batch lanes(4) ins(%a{steps} : {vec}) -> {vec} {{",
            f"    ^bb0(%l: index, %v: {vec}, %acc: {vec}):",
            f"      %e = tensor.extract_slice %v[{N // 4}*%l] [{N // 4}] [1] : {vec} to "
            f"tensor<{N // 4}xf32>",
            f"      %f = pim.relu %e : tensor<{N // 4}xf32>",
            f"      spat.parallel_insert_slice %f into %acc[{N // 4}*%l] [{N // 4}] [1] : "
            f"tensor<{N // 4}xf32> into {vec}",
            "    }",
            f"    pim.store %q into %o[{c}, 0] [1, {N}] [1, 1] : {vec} into "
            f"tensor<{cores}x{N}xf32>",
            "  }"]
    lines += [f"  return %o : tensor<{cores}x{N}xf32>", "}"]
    return "\n".join(lines) + "\n"


def build(cores: int, steps: int) -> Module:
    module = parse_module(program_text(cores, steps), "bench.spat")
    rng = np.random.default_rng(0)
    scale = np.float32(1 / np.sqrt(N))  # keeps activations O(1): no denormals slowing numpy
    for c in range(cores):
        for t in range(TILES):
            module.constants[f"w{c}_{t}"] = rng.standard_normal((N, N)).astype(np.float32) * scale
    return module


def saved_module(spat: str, weights: str | None, inputs: str | None
                 ) -> tuple[Module, dict[str | int, np.ndarray]]:
    """A scheduled module saved as text, with its constants and inputs from npz files."""
    from raptor.ir.parser import parse_file

    module = parse_file(spat)
    if weights:
        module.constants.update(dict(np.load(weights)))
    feeds: dict[str | int, np.ndarray] = dict(np.load(inputs)) if inputs else {}
    return module, feeds


def model_module(model: str) -> tuple[Module, dict[str | int, np.ndarray]]:
    """Compile an ONNX model and materialize its PEFT schedule (as `raptor solve` does)."""
    from raptor.driver import ir_inputs
    from raptor.solve import SolveOptions, solve

    solved = solve(model, Target(), SolveOptions(solver="peft", simulate=False))
    feeds: dict[str | int, np.ndarray] = {}
    feeds.update(ir_inputs(solved.compiled.graph, solved.inputs))
    return solved.runs[0].scheduled, feeds


def run_module(name: str, module: Module, feeds: dict[str | int, np.ndarray],
               repeat: int, trace: bool = False, pimsim: bool = False) -> None:
    """Time one scheduled module: `simulate` (compile and run, the process's first call
    included), then one `Simulator` running it `repeat` times, as `raptor solve` runs it
    once (`trace` on there): the rate once the program is compiled, by the report's own
    counters over the run's wall time, and over the process's CPU time in the run (the
    figure a loaded machine disturbs least). `pimsim`: only the latter, on the program as
    exported for pimsim-nn under pimsim-nn's model."""
    if pimsim:
        from raptor.export import export_pimsim
        from raptor.export.order import pimsim_order

        ex = export_pimsim(module, Target(), allow_overflow=True)
        with pimsim_order(module, ex.rank):
            sim = Simulator(module, Target(), timings=ex.timings)
            print(f"{name} Simulator (pimsim-nn export): compiled in {sim.compile_time_s:.3f} s")
            run_sim(name, sim, feeds, repeat, SimOptions.pimsim(trace))
        return
    target = Target()
    for i in range(repeat):
        t = time.perf_counter()
        rep = simulate(module, target, feeds, SimOptions(trace=trace)).report
        wall = time.perf_counter() - t
        ops = rep.ops_executed + rep.body_ops_executed
        print(f"{name} simulate {i}: wall {wall:.3f} s (compile {rep.compile_time_s:.3f} s, "
              f"run {wall - rep.compile_time_s:.3f} s), latency {rep.latency_ns} ns, {ops} ops, "
              f"{ops / wall:,.0f} ops/s end to end")
    sim = Simulator(module, target)
    print(f"{name} Simulator: compiled in {sim.compile_time_s:.3f} s")
    run_sim(name, sim, feeds, repeat, SimOptions(trace=trace))


def run_sim(name: str, sim: Simulator, feeds: dict[str | int, np.ndarray], repeat: int,
            options: SimOptions) -> None:
    """`sim` run `repeat` times under `options`, each run's rate and the sustained one."""
    trace = options.trace
    total_ops, total_s, walls, cpus = 0, 0.0, [], []
    for i in range(repeat):
        c = time.process_time()
        rep = sim.run(feeds, options).report
        cpu = time.process_time() - c
        wall = rep.wall_time_s
        ops = rep.ops_executed + rep.body_ops_executed
        total_ops, total_s = total_ops + ops, total_s + wall
        walls.append(ops / wall)
        cpus.append(ops / cpu)
        print(f"{name} run {i}: {wall:.3f} s wall, {cpu:.3f} s CPU, latency {rep.latency_ns} "
              f"ns, {ops} ops: {ops / wall:,.0f} ops/s ({ops / cpu:,.0f} per CPU second)")
    print(f"{name} sustained (trace {'on' if trace else 'off'}): {total_ops} ops in "
          f"{total_s:.3f} s = {total_ops / total_s:,.0f} ops/s over {repeat} runs; best run "
          f"{max(walls):,.0f} ops/s, median {sorted(walls)[len(walls) // 2]:,.0f}; per CPU "
          f"second best {max(cpus):,.0f}, median {sorted(cpus)[len(cpus) // 2]:,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=64)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spat", help="a scheduled module to run instead of the synthetic one")
    ap.add_argument("--weights", help="npz of the module's constants by symbol (with --spat)")
    ap.add_argument("--inputs", help="npz of the inputs by argument name (with --spat)")
    ap.add_argument("--model", help="an ONNX model to compile and PEFT-schedule, then simulate")
    ap.add_argument("--trace", action="store_true", help="--spat/--model: trace on, as "
                    "`raptor solve` simulates")
    ap.add_argument("--pimsim-export", action="store_true", help="--spat/--model: run the "
                    "program as exported for pimsim-nn, under pimsim-nn's model")
    args = ap.parse_args()
    if args.spat or args.model:
        t0 = time.perf_counter()
        module, feeds = (model_module(args.model) if args.model
                         else saved_module(args.spat, args.weights, args.inputs))
        name = args.model or args.spat
        print(f"{name}: prepared in {time.perf_counter() - t0:.1f} s")
        run_module(name, module, feeds, args.repeat, args.trace, args.pimsim_export)
        return
    t0 = time.perf_counter()
    module = build(args.cores, args.steps)
    print(f"program: {args.cores} cores x {args.steps} steps, "
          f"{args.cores * (args.steps + 1)} scheduled computes, "
          f"parsed in {time.perf_counter() - t0:.2f} s")
    x = np.random.default_rng(1).standard_normal((args.cores, N)).astype(np.float32)
    target = Target()
    configs = {
        "default (rendezvous, contention, queueing, trace)": SimOptions(),
        "default, no trace": SimOptions(trace=False),
        "ideal (buffered, free links and memory), no trace": SimOptions.ideal(trace=False),
    }
    sim = Simulator(module, target)
    print(f"compiled once in {sim.compile_time_s:.3f} s; 'run' is the best of {args.repeat} "
          "runs of that compilation, 'simulate' the best of as many compile-and-run calls")
    print(f"{'options':52} {'ops':>7} {'run s':>6} {'run ops/s':>9} {'simulate s':>10} "
          f"{'ops/s':>8} {'latency ns':>10}")
    for label, opts in configs.items():
        runs = [sim.run({"x": x}, opts).report for _ in range(args.repeat)]
        run_s = min(r.wall_time_s for r in runs)
        total_s = min(simulate(module, target, {"x": x}, opts).report.wall_time_s
                      for _ in range(args.repeat))
        rep = runs[0]
        ops = rep.ops_executed + rep.body_ops_executed
        print(f"{label:52} {ops:7d} {run_s:6.3f} {ops / run_s:9.0f} {total_s:10.3f} "
              f"{ops / total_s:8.0f} {rep.latency_ns:10d}")

if __name__ == "__main__":
    main()
