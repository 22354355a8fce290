"""Discrete-event simulator of scheduled IR on a crossbar PIM many-core chip (ARCHITECTURE §8).

`simulate` runs every core's program with the target's costs (the same table the scheduler
estimates with), moves messages over the XY mesh, serves shared memory, computes the real
tensors with numpy, and reports latency, per-core time, traffic and a Chrome trace.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence

import numpy as np

from raptor.ir.module import Module
from raptor.sim.engine import Engine, SimOptions
from raptor.sim.errors import Deadlock, SimError
from raptor.sim.numerics import execute
from raptor.sim.program import compile_program
from raptor.sim.report import CoreStats, SimReport, SimResult, Trace
from raptor.target import Target

__all__ = ["CoreStats", "Deadlock", "SimError", "SimOptions", "SimReport", "SimResult", "Trace",
           "simulate"]


def simulate(module: Module, target: Target,
             inputs: Mapping[str | int, np.ndarray] | Sequence[np.ndarray],
             options: SimOptions | None = None) -> SimResult:
    """Run `module`'s main function. Inputs bind by argument name (`x` or `%x`) or position
    (an int key or a sequence). Raises `SimError` for programs that cannot run (capacity,
    unmatched channels, non-scheduled ops) and `Deadlock` when cores wait on each other."""
    opts = options if options is not None else SimOptions()
    start = time.perf_counter()
    bound: Mapping[str, np.ndarray] | Sequence[np.ndarray] = (
        {str(k): v for k, v in inputs.items()} if isinstance(inputs, Mapping) else inputs)
    # The simulator allocates no reference cycles worth collecting, but every allocation
    # counts towards a full collection that rescans the whole parsed IR: pausing the cyclic
    # collector makes compilation several times faster on large programs.
    collecting = gc.isenabled()
    gc.disable()
    try:
        program = compile_program(module, target, bound)
        engine = Engine(program, target, opts)
        engine.report.compile_time_s = time.perf_counter() - start
        try:
            engine.run()
            execute(program, engine.order)
        finally:
            engine.report.wall_time_s = time.perf_counter() - start
        outputs = program.output_data()
        names = [v.name or f"out{i}" for i, v in enumerate(program.outputs)]
        report, trace = engine.report, engine.trace
        # Free the compiled program (closures, instructions, every core's values) while the
        # collector is still paused: what is left when it resumes is what its first
        # collection scans, and the program is millions of objects on a large model.
        del program, engine
    finally:
        if collecting:
            gc.enable()
    return SimResult(outputs, names, report, trace)
