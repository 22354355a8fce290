"""Discrete-event simulator of scheduled IR on a crossbar PIM many-core chip
(docs/spec/ARCHITECTURE.md §8).

`simulate` runs every core's program with the target's costs (the same table the scheduler
estimates with), moves messages over the XY mesh, serves shared memory, computes the real
tensors with numpy, and reports latency, per-core time, traffic and a Chrome trace.

Three stages: `program` compiles the module for the target (once per `Simulator`),
`engine` runs the timed event loop (compiled, `loop`, for Raptor's mesh; in Python for
pimsim-nn's protocol), `numerics` computes the values in the order the loop
performed the work, many instances of one body at a time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from raptor.gc_pause import collector_paused
from raptor.ir.core import Operation
from raptor.ir.module import Module
from raptor.passes.memory import MemoryPlan
from raptor.sim.engine import Engine, SimOptions
from raptor.sim.errors import Deadlock, SimError
from raptor.sim.numerics import execute
from raptor.sim.occupancy import check_occupancy
from raptor.sim.program import compile_program
from raptor.sim.report import CoreStats, SimReport, SimResult, Trace
from raptor.sim.timing import OpTiming
from raptor.target import Target

__all__ = ["CoreStats", "Deadlock", "OpTiming", "SimError", "SimOptions", "SimReport",
           "SimResult", "Simulator", "Trace", "simulate"]

Inputs = Mapping[str | int, np.ndarray] | Sequence[np.ndarray]


class Simulator:
    """`module`'s main function compiled once for `target`; `run` simulates it on any
    inputs with any options. Compiling (checks, costs, body templates, routes) is the
    larger part of a single simulation, so repeated runs (several input samples, ideal
    and contended timing) should share one Simulator."""

    def __init__(self, module: Module, target: Target,
                 timings: Mapping[tuple[int, Operation], OpTiming] | None = None,
                 check_memory: bool = False, memory: MemoryPlan | None = None) -> None:
        """`timings` replaces the cost of the top-level ops it names, per (core, op): an
        exporter's figures for another machine (run them with `SimOptions.pimsim()`).
        `check_memory`: refuse a program that exceeds the target's memory at any instant
        (`raptor.sim.occupancy`), by `memory` if the caller planned it already."""
        start = time.perf_counter()
        if check_memory:
            check_occupancy(module, target, memory)
        with collector_paused():
            self.program = compile_program(module, target)
        if timings:
            for core, prog in self.program.cores.items():
                for ins in prog:
                    tm = timings.get((core, ins.op))
                    if tm is not None:
                        ins.timing = tm
                        ins.cost = target.ns(tm.total)
        self.target = target
        self.compile_time_s = time.perf_counter() - start

    def run(self, inputs: Inputs, options: SimOptions | None = None) -> SimResult:
        """Inputs bind by argument name (`x` or `%x`) or position (an int key or a
        sequence). Raises `SimError` for programs that cannot run and `Deadlock` when
        cores wait on each other."""
        start = time.perf_counter()
        bound: Mapping[str, np.ndarray] | Sequence[np.ndarray] = (
            {str(k): v for k, v in inputs.items()} if isinstance(inputs, Mapping) else inputs)
        program = self.program
        with collector_paused():
            program.bind(bound)
            engine = self._timed(options, start)
            execute(program, engine.order)
            engine.report.wall_time_s = time.perf_counter() - start
            outputs = program.output_data()
            report, trace = engine.report, engine.trace
            # Drop this run's values while the collector is still paused: what is left
            # when it resumes is what its first collection scans.
            program.values = []
            del engine
        names = [v.name or f"out{i}" for i, v in enumerate(program.outputs)]
        return SimResult(outputs, names, report, trace)

    def timing(self, options: SimOptions | None = None) -> SimReport:
        """The timed run alone, without computing values (they never change the timing):
        a what-if under other options costs only the event loop."""
        with collector_paused():
            return self._timed(options, time.perf_counter()).report

    def traced(self, options: SimOptions | None = None) -> tuple[SimReport, Trace]:
        """The timed run alone, with its trace (`options.trace` must be on)."""
        with collector_paused():
            engine = self._timed(options, time.perf_counter())
        return engine.report, engine.trace

    def _timed(self, options: SimOptions | None, start: float) -> Engine:
        engine = Engine(self.program, self.target, options if options is not None else SimOptions())
        try:
            engine.run()
        finally:
            engine.report.wall_time_s = time.perf_counter() - start
        return engine


def simulate(module: Module, target: Target, inputs: Inputs,
             options: SimOptions | None = None) -> SimResult:
    """Compile and run `module` once (see `Simulator`); the report's wall time includes
    the compilation."""
    with collector_paused():
        sim = Simulator(module, target)
        result = sim.run(inputs, options)
        result.report.compile_time_s = sim.compile_time_s
        result.report.wall_time_s += sim.compile_time_s
        # Free the compiled program (closures, instructions) before the collector
        # resumes: it is millions of objects on a large model.
        del sim
    return result
