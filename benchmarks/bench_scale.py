"""Seconds against tasks for the stages after scheduling (issue #27): materialization,
simulation and CP-SAT's setup, on ResNet-18 and ResNet-50 (`benchmarks/models.py`) at
several input sizes.

    PYTHONPATH=$PWD python benchmarks/bench_scale.py [--nets resnet18:40,resnet50:224,...]
        [--json FILE]

PEFT's own curve is `bench_peft_scale.py`'s (random DAGs). Here each net and input size is
one real program, compiled and PEFT-scheduled on the default 8×8 target as `raptor solve` does;
then, each timed alone (wall and CPU seconds of the process):

- materialize: `raptor.passes.materialize.materialize` of the schedule with the
  communication model's receive and send points (`raptor.solve.message_flow`), i.e. the
  first round of `raptor solve`'s memory fitting, without its verification and memory plan;
- simulator compile: `Simulator(program, target)` (no capacity check: a large input may
  not fit local memory without spills, which is not what this curve measures);
- simulator run: one `Simulator.run` with the default options (trace on, as `raptor solve`),
  with its executed ops (core-level plus body ops) and ops per second of its wall time;
- CP-SAT setup: `cpsat_schedule` given PEFT's schedule and no search time, i.e. what it
  does before its first window (the capacity check, the lower bounds, the replay and the
  critical chain of the large-neighbourhood search: every graph here exceeds the
  whole-problem model's `max_full_pairs`).
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx

from benchmarks.models import resnet18, resnet50
from raptor.driver import compile_model, ir_inputs
from raptor.ir.module import Module
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import SimOptions, Simulator
from raptor.solve import message_flow
from raptor.solver.comm import replay
from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.peft import peft_schedule
from raptor.target import Target

NETS = ("resnet18:40", "resnet18:96", "resnet18:160", "resnet18:224", "resnet18:320",
        "resnet18:448", "resnet50:224", "resnet18:32", "resnet50:32")
"""From about 1.8k to 117k tasks (at 32×32 the lowering splits the nets into far more
tasks than at 224×224: ResNet-18 66k, ResNet-50 117k)."""
BUILDERS = {"resnet18": resnet18, "resnet50": resnet50}
T = TypeVar("T")


def timed(row: dict[str, float | int | str], key: str, f: Callable[[], T]) -> T:
    """`f()`, its wall and CPU seconds stored in `row` as `key` and `key_cpu`."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    out = f()
    row[key], row[f"{key}_cpu"] = time.perf_counter() - t0, time.process_time() - c0
    return out


def point(net: str, size: int, work: Path) -> dict[str, float | int | str]:
    """Every stage's seconds on `net` at `size` x `size`."""
    path = work / f"{net}_{size}.onnx"
    onnx.save(BUILDERS[net](size), path)
    target = Target()
    row: dict[str, float | int | str] = {"net": f"{net}:{size}"}
    comp = timed(row, "compile", lambda: compile_model(path, target))
    build = timed(row, "graph", lambda: build_compute_graph(comp.module.main(), target))
    g = build.graph
    row["tasks"] = g.num_tasks
    res = timed(row, "peft", lambda: peft_schedule(g, target))
    rep = replay(g, target, res.core_of, res.core_tasks, res.start_ns)
    program = timed(row, "materialize", lambda: materialize(
        comp.module, build.projection, build.outputs,
        ScheduleView(res.core_of, res.start_ns, res.end_ns), flow=message_flow(build, rep)))
    assert comp.feeds is not None
    simulate(row, program, target, ir_inputs(comp.graph, comp.feeds.data))
    del program
    timed(row, "cpsat_setup", lambda: cpsat_schedule(
        g, target, CpSatOptions(time_limit=1e-6), initial=res))
    return row


def simulate(row: dict[str, float | int | str], program: Module, target: Target,
             inputs: dict[str, np.ndarray]) -> None:
    """The simulator's compile and one default run of `program`, into `row`."""
    sim = timed(row, "sim_compile", lambda: Simulator(program, target))
    feeds: dict[str | int, np.ndarray] = {}
    feeds.update(inputs)
    report = timed(row, "sim_run", lambda: sim.run(feeds, SimOptions())).report
    ops = report.ops_executed + report.body_ops_executed
    row["sim_ops"], row["sim_ops_per_s"] = ops, ops / report.wall_time_s
    row["latency_ns"] = report.latency_ns


COLUMNS = (("tasks", "tasks"), ("compile", "compile"), ("graph", "task graph"), ("peft", "PEFT"),
           ("materialize", "materialize"), ("sim_compile", "sim compile"),
           ("sim_run", "sim run"), ("cpsat_setup", "CP-SAT setup"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default=",".join(NETS),
                    help="NET:SIZE (resnet18 or resnet50, input size) comma-separated")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    rows = []
    print("| net:input | " + " | ".join(h for _, h in COLUMNS) + " | sim ops | sim ops/s |")
    print("|---:" * (len(COLUMNS) + 3) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.nets.split(","):
            net, _, size = spec.partition(":")
            if net not in BUILDERS or not size.isdigit():
                ap.error(f"--nets: {spec!r} is not NET:SIZE with NET one of "
                         f"{', '.join(BUILDERS)}")
            row = point(net, int(size), Path(tmp))
            rows.append(row)
            cells = [f"{row['tasks']:,}"] + [
                f"{row[k]:.2f} ({row[f'{k}_cpu']:.2f})" for k, _ in COLUMNS[1:]]
            print(f"| {spec} | " + " | ".join(cells) +
                  f" | {row['sim_ops']:,} | {row['sim_ops_per_s']:,.0f} |", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    print("seconds: wall (CPU)")


if __name__ == "__main__":
    main()
