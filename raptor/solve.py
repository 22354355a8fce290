"""`raptor solve`: compile, schedule with the heuristic and CP-SAT side by side, materialize,
simulate, check the numbers, and assemble the report (docs/spec/ARCHITECTURE.md §9)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from raptor.driver import Compiled, CompileOptions, IRHook, compile_model, ir_inputs, model_inputs
from raptor.frontend.oracle import compare, oracle_name, run_reference
from raptor.ir.module import Module
from raptor.ir.ops import ScheduledComputeBatchOp, ScheduledComputeOp
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import SimError, SimOptions, SimResult, Simulator
from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.evaluate import LowerBounds, lower_bounds, retime, validate_schedule
from raptor.solver.from_ir import GraphBuild, build_compute_graph
from raptor.solver.peft import peft_schedule
from raptor.solver.schedule import MergeScheduleResult
from raptor.target import Target

SOLVERS = ("peft", "cpsat", "both")


@dataclass
class SolveOptions:
    solver: str = "both"
    time_limit: float = 10.0
    workers: int = 2
    seed: int = 0
    simulate: bool = True
    sim: SimOptions = field(default_factory=SimOptions)
    rtol: float = 1e-4
    atol: float = 1e-5
    compile: CompileOptions = field(default_factory=CompileOptions)


@dataclass
class ScheduleRun:
    """One schedule through materialization and simulation."""

    name: str
    result: MergeScheduleResult
    estimate_ns: int
    violations: list[str]
    scheduled: Module
    scheduled_errors: list[str]
    sim: SimResult | None = None
    ideal_ns: int | None = None
    """The simulated latency with buffered sends and free links and shared memory."""
    sim_error: str | None = None
    numerics: dict[str, tuple[float, float, bool]] | None = None

    @property
    def ok(self) -> bool:
        numerics_ok = self.numerics is None or all(ok for _, _, ok in self.numerics.values())
        return not self.violations and not self.scheduled_errors and self.sim_error is None \
            and numerics_ok

    @property
    def cores_used(self) -> int:
        return sum(1 for tasks in self.result.core_tasks if tasks)


@dataclass
class Solved:
    model: str
    target: Target
    compiled: Compiled
    build: GraphBuild
    bounds: LowerBounds
    runs: list[ScheduleRun]
    inputs: dict[str, np.ndarray]
    input_source: str
    oracle: str | None
    seconds: dict[str, float]
    layout_costs: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)


Progress = Callable[[str], None]


def _run_schedule(name: str, res: MergeScheduleResult, solved_build: GraphBuild, comp: Compiled,
                  target: Target, print_ir: IRHook | None = None) -> ScheduleRun:
    g = solved_build.graph
    start = retime(g, target, res.core_of, res.core_tasks)
    end = [start[t] + g.tasks[t].cost_ns for t in range(g.num_tasks)]
    violations = validate_schedule(g, target, res)
    scheduled = materialize(comp.module, solved_build.projection, solved_build.outputs,
                            ScheduleView(res.core_of, start, end))
    errors = [str(d) for d in verify_module(scheduled)]
    if print_ir is not None:
        print_ir("materialize", scheduled)
    return ScheduleRun(name, res, max(end, default=0), violations, scheduled, errors)


def solve(model: str | Path, target: Target, opts: SolveOptions,
          given_inputs: dict[str, np.ndarray] | None = None,
          progress: Progress | None = None) -> Solved:
    say = progress or (lambda _msg: None)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    comp = compile_model(model, target, opts.compile)
    seconds["compile"] = time.perf_counter() - t0
    # what the other layout selectors would have cost on the same rule tables
    layout_costs = {comp.selection.selector: comp.selection.cost}
    for selector in ("exact", "iterative", "disabled"):
        if selector not in layout_costs:
            layout_costs[selector] = select_layouts(comp.graph, selector,
                                                    opts.compile.rules_dir)[0].cost
    t0 = time.perf_counter()
    build = build_compute_graph(comp.module.main(), target)
    seconds["graph"] = time.perf_counter() - t0
    bounds = lower_bounds(build.graph, target)
    runs = []
    t0 = time.perf_counter()
    heuristic = peft_schedule(build.graph, target)
    seconds["peft"] = time.perf_counter() - t0
    if opts.solver in ("peft", "both"):
        runs.append(_run_schedule("peft", heuristic, build, comp, target,
                                  opts.compile.print_ir))
    if opts.solver in ("cpsat", "both"):
        say(f"CP-SAT: {build.graph.num_tasks} tasks on {target.num_cores} cores, time limit "
            f"{opts.time_limit:g} s, {opts.workers} workers")
        t0 = time.perf_counter()
        cp = cpsat_schedule(build.graph, target, CpSatOptions(
            time_limit=opts.time_limit, num_workers=opts.workers, seed=opts.seed),
            initial=heuristic)
        seconds["cpsat"] = time.perf_counter() - t0
        same = runs and cp.core_of == heuristic.core_of and cp.core_tasks == heuristic.core_tasks
        if same:  # the heuristic schedule came back (time-out or not run): reuse its program
            runs.append(dataclasses.replace(runs[0], name="cpsat", result=cp))
        else:
            runs.append(_run_schedule("cpsat", cp, build, comp, target, opts.compile.print_ir))
    inputs, source = model_inputs(comp.graph, model, given_inputs)
    oracle = None
    if opts.simulate:
        oracle = oracle_name()
        want = run_reference(model, inputs, oracle)
        feeds: dict[str | int, np.ndarray] = {}
        feeds.update(ir_inputs(comp.graph, inputs))
        for run in runs:
            if run.violations or run.scheduled_errors:
                continue
            twin = next((r for r in runs if r is not run and r.scheduled is run.scheduled
                         and r.sim is not None), None)
            if twin is not None:  # same program already simulated
                run.sim, run.numerics, run.ideal_ns = twin.sim, twin.numerics, twin.ideal_ns
                continue
            say(f"simulating the {run.name} schedule")
            t0 = time.perf_counter()
            try:
                sim = Simulator(run.scheduled, target)
                run.sim = sim.run(feeds, opts.sim)
                run.ideal_ns = sim.timing(SimOptions.ideal(trace=False)).latency_ns
            except SimError as e:  # deadlock, capacity, unmatched channels: per schedule
                run.sim_error = str(e)
                continue
            finally:
                seconds[f"sim.{run.name}"] = time.perf_counter() - t0
            got = {v.name: o for v, o in zip(comp.graph.outputs, run.sim.outputs, strict=True)}
            run.numerics = compare(got, want, opts.rtol, opts.atol)
    return Solved(str(model), target, comp, build, bounds, runs, inputs, source, oracle,
                  seconds, layout_costs)


def report(s: Solved) -> dict[str, Any]:
    """report.json (docs/spec/ARCHITECTURE.md §9 plus layouts, rules and per-schedule detail)."""
    g = s.build.graph
    sel = s.compiled.selection
    schedules: dict[str, Any] = {}
    for run in s.runs:
        res = run.result
        numerics = None
        if run.numerics is not None:
            numerics = {"max_abs_error": max((a for a, _, _ in run.numerics.values()),
                                             default=0.0),
                        "ok": all(ok for _, _, ok in run.numerics.values()),
                        "outputs": {k: {"max_abs_error": a, "max_rel_error": r, "ok": ok}
                                    for k, (a, r, ok) in run.numerics.items()}}
        schedules[run.name] = {
            "estimate_ns": run.estimate_ns,
            "simulated_ns": run.sim.report.latency_ns if run.sim else None,
            "ideal_simulated_ns": run.ideal_ns,
            "period_ns": None,
            "solve_seconds": round(res.solve_seconds, 4),
            "status": res.status,
            "bound_ns": res.bound_ns,
            "model": res.model,
            "cores_used": run.cores_used,
            "scheduled_computes": sum(1 for op in run.scheduled.walk()
                                      if isinstance(op, ScheduledComputeOp)),
            "scheduled_batches": sum(1 for op in run.scheduled.walk()
                                     if isinstance(op, ScheduledComputeBatchOp)),
            "numerics": numerics,
            "valid": not run.violations and not run.scheduled_errors,
            "violations": run.violations + run.scheduled_errors,
            "simulation_error": run.sim_error,
            "notes": list(res.notes),
            "simulation": run.sim.report.to_dict() if run.sim else None,
        }
    return {
        "model": s.model,
        "target": s.target.name,
        "mode": "latency",
        "tasks": g.num_tasks,
        "edges": len(g.edges),
        "crossbars": len(g.distinct_weights()),
        "lower_bound_ns": s.bounds.makespan_ns,
        "lower_bounds": {"critical_path_ns": s.bounds.critical_path_ns,
                         "work_per_core_ns": s.bounds.work_per_core_ns,
                         "min_cores": s.bounds.min_cores},
        "mvms": s.build.mvms,
        "inputs": s.input_source,
        "oracle": s.oracle,
        "layouts": dict(sel.counts),
        "layout_selector": sel.selector,
        "layout_costs": s.layout_costs,
        "rules": {"dir": str(s.compiled.rules_dir), "fired": s.compiled.fired},
        "notes": s.compiled.notes,
        "seconds": {k: round(v, 4) for k, v in s.seconds.items()},
        "schedules": schedules,
    }
