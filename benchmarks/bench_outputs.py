"""What the output files of `raptor solve` cost on a large model: layer labels, the Gantt
charts (estimate and simulated), the NoC heatmap and the Chrome trace, against the solve
itself and against printing the scheduled IR (which `raptor solve` always did).

    python benchmarks/bench_outputs.py [--model FILE.onnx] [--repeat 3]

Without --model it builds ResNet-18 at 224x224 (benchmarks/models.py). Schedules with PEFT
and simulates once, then times each output (best of --repeat); prints a Markdown table."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.models import resnet18
from raptor.sim.charts import noc_svg, timeline_svg
from raptor.solve import SolveOptions, solve
from raptor.solver.evaluate import retime
from raptor.solver.gantt import gantt_svg
from raptor.target import load_target
from raptor.ui.labels import legend, span_labels, task_layers


def best(f: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="an ONNX file (default: ResNet-18 at 224x224)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    target = load_target("default")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            model = str(Path(tmp) / "resnet18.onnx")
            onnx.save(resnet18(), model)
        t0 = time.perf_counter()
        solved = solve(model, target, SolveOptions(solver="peft"))
        solve_s = time.perf_counter() - t0
        run = solved.runs[0]
        sim = run.sim
        assert sim is not None
        g = solved.build.graph
        lowered = solved.compiled.lowered
        layers = task_layers(lowered, solved.build)
        names = legend(lowered)
        lanes = [t.lane for t in g.tasks]
        labels = span_labels(run.scheduled, layers, lanes)
        start = retime(g, target, run.result.core_of, run.result.core_tasks)
        keys = [layer.name for layer in layers]
        trace = Path(tmp) / "trace.json"
        rows = [
            ("layer of every task", lambda: task_layers(lowered, solved.build)),
            ("labels of every span", lambda: span_labels(run.scheduled, layers, lanes)),
            ("retimed starts (estimate chart)",
             lambda: retime(g, target, run.result.core_of, run.result.core_tasks)),
            ("Gantt chart, estimate", lambda: gantt_svg(g, run.result, keys=keys,
                                                        legend=names, start=start)),
            ("Gantt chart, simulated", lambda: timeline_svg(sim, labels, title="t",
                                                            legend=names)),
            ("NoC heatmap", lambda: noc_svg(sim, target, title="t")),
            ("trace with labels, flows, counters",
             lambda: sim.write_trace(trace, labels, target.mesh_links)),
            ("trace as before (no labels)", lambda: sim.write_trace(trace)),
            ("print the scheduled IR (for scale)", run.scheduled.print),
        ]
        print(f"{Path(model).name}: {g.num_tasks:,} tasks, {len(sim.trace.spans):,} spans, "
              f"{len(sim.trace.messages):,} messages; solve() {solve_s:.1f} s "
              f"(compile, graph, PEFT, materialize, reference, simulation)\n")
        print("| output | seconds |\n|---|---:|")
        for name, f in rows:
            print(f"| {name} | {best(f, args.repeat):.2f} |")


if __name__ == "__main__":
    main()
