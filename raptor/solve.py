"""`raptor solve`: compile, schedule with the heuristic and CP-SAT side by side, materialize,
simulate, check the numbers, and assemble the report (docs/spec/ARCHITECTURE.md §9).

Two modes. `latency` schedules one inference (PEFT and CP-SAT). `pipeline` partitions the
graph into stages for a stream of inferences (the spec's heuristic and the CP-SAT pipeline
model, `raptor.solver.pipeline`), materializes a stream program (`raptor.passes.stream`),
estimates its period (`raptor.solver.pipeline.stream`), simulates `stream` inferences with
distinct inputs and checks every one of them against the reference."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar

import numpy as np

from raptor.driver import (
    MODES,
    Compiled,
    CompileOptions,
    IRHook,
    ModelFeeds,
    compile_model,
    ir_inputs,
)
from raptor.frontend.oracle import compare, reference_outputs, reference_stream
from raptor.frontend.plan import PlanGraph
from raptor.ir.module import Module
from raptor.ir.ops import ScheduledComputeBatchOp, ScheduledComputeOp
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.materialize import Flow, ScheduleView, materialize
from raptor.passes.memory import MemoryPlan, plan_memory
from raptor.passes.stream import RING, StreamInfo, StreamView, materialize_stream
from raptor.sim import SimError, SimOptions, SimReport, SimResult, Simulator
from raptor.sim.program import SEND
from raptor.solver.comm import START, Replay, replay
from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.evaluate import LowerBounds, lower_bounds, validate_schedule
from raptor.solver.from_ir import GraphBuild, build_compute_graph
from raptor.solver.peft import peft_schedule
from raptor.solver.pipeline import (
    CpSatPipelineOptions,
    PipelineProblem,
    PipelineResult,
    build_problem,
    cpsat_pipeline,
    follow_producers,
    heuristic_pipeline,
    validate_pipeline,
)
from raptor.solver.pipeline.stream import StreamEstimate, stream_estimate
from raptor.solver.schedule import MergeScheduleResult
from raptor.solver.watch import SearchReport
from raptor.target import Target

P = ParamSpec("P")
T = TypeVar("T")


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
    allow_memory_overflow: bool = False
    """A program over the target's local or shared memory is a failure unless this is set
    (then `ScheduleRun.memory_warnings` says so)."""
    mode: str = "latency"
    stream: int = 8
    """Pipeline mode: inferences simulated (inference 0 the given inputs, then seeded
    variations)."""
    replication: bool = True
    """Pipeline mode: let bottleneck groups copy their crossbar tiles onto spare crossbars."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; valid: {', '.join(MODES)}")
        if self.solver not in MODES[self.mode]:
            raise ValueError(f"--mode {self.mode} has no solver {self.solver!r}; valid: "
                             f"{', '.join(MODES[self.mode])}")
        if self.stream < 1:
            raise ValueError(f"--stream must be at least 1, got {self.stream}")


@dataclass
class ScheduleRun:
    """One schedule through materialization and simulation."""

    name: str
    result: MergeScheduleResult
    estimate_ns: int
    """The communication-aware estimate (`raptor.solver.comm`): what the default simulation
    should show."""
    violations: list[str]
    scheduled: Module
    scheduled_errors: list[str]
    ideal_estimate_ns: int = 0
    """The same order with free links and memory: the ideal simulation of the unmerged
    program equals it."""
    sim: SimResult | None = None
    link_busy_ns: list[int] | None = None
    """Per directed mesh link, the time the simulated messages occupied it."""
    ideal_ns: int | None = None
    """The simulated latency with buffered sends and free links and shared memory."""
    sim_error: str | None = None
    numerics: dict[str, tuple[float, float, bool]] | None = None
    memory: MemoryPlan | None = None
    """Local-memory allocation of the scheduled program (None when it does not verify)."""
    memory_errors: list[str] = field(default_factory=list)
    memory_warnings: list[str] = field(default_factory=list)
    pipeline: PipelineResult | None = None
    """Pipeline mode: the solver's stages, period model, bound and replication."""
    stream: StreamInfo | None = None
    """Pipeline mode: the boundary plan of the stream program."""
    stream_estimate: StreamEstimate | None = None
    ideal: SimReport | None = None
    """Pipeline mode: the ideal simulation's timing (period, per-inference ends)."""
    inference_numerics: list[dict[str, tuple[float, float, bool]]] | None = None
    """Pipeline mode: the numerics of every inference of the stream."""
    flow: Replay | None = None
    """The communication model's run that placed the receives and sends (its makespan is
    `estimate_ns`)."""
    materializations: int = 1
    """How many times the program was built to fit local memory (`MEMORY_ROUNDS`)."""
    memory_summary: list[str] = field(default_factory=list)
    """`memory_errors` (or warnings) in one line for local memory, with what stands in the
    way, and one for shared memory."""

    @property
    def ok(self) -> bool:
        numerics_ok = self.numerics is None or all(ok for _, _, ok in self.numerics.values())
        return not self.violations and not self.scheduled_errors and self.sim_error is None \
            and numerics_ok and not self.memory_errors

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
    bound_inputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Compile notes, then run notes (e.g. that no reference could check the numerics)."""
    mode: str = "latency"
    problem: PipelineProblem | None = None
    """Pipeline mode: the partitioning problem (groups, period lower bound)."""
    stream: int = 0
    """Pipeline mode: inferences simulated."""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)


class Progress(Protocol):
    """A live display's hook: a call with a new `msg` starts a phase, a call with the same
    `msg` updates it (its timer and limit carry on). `limit_s` is the phase's time limit; a
    solver that reports while it searches passes its incumbent and proven bound
    (`incumbent_ns`, `bound_ns`), e.g. from a CP-SAT solution callback."""

    def __call__(self, msg: str, /, *, limit_s: float | None = None,
                 incumbent_ns: int | None = None, bound_ns: int | None = None) -> None: ...


def _searching(say: Progress, phase: str) -> SearchReport:
    """A CP-SAT search's incumbent and bound, shown in its progress phase."""
    return lambda incumbent, bound: say(phase, incumbent_ns=incumbent, bound_ns=bound)


def _timed(seconds: dict[str, float], key: str, f: Callable[P, T], *args: P.args,
           **kwargs: P.kwargs) -> T:
    """`f(*args, **kwargs)`, its wall time recorded in `seconds[key]` (report.json)."""
    t0 = time.perf_counter()
    result = f(*args, **kwargs)
    seconds[key] = time.perf_counter() - t0
    return result


def _quiet(msg: str, /, *, limit_s: float | None = None, incumbent_ns: int | None = None,
           bound_ns: int | None = None) -> None:
    """The default `Progress`: says nothing."""


MEMORY_ROUNDS = 3
"""Materializations tried per schedule: when a core's allocated footprint exceeds its
local memory, the communication model is replayed with that core's budget cut by the
overshoot, and the program is built again."""


def _run_schedule(name: str, res: MergeScheduleResult, solved_build: GraphBuild, comp: Compiled,
                  target: Target, print_ir: IRHook | None = None) -> ScheduleRun:
    """Validate and materialize a schedule in its plan's order (the order and send priorities
    its communication estimate assumed), with receives and sends where the communication
    model placed them to stay within local memory (`MEMORY_ROUNDS`)."""
    violations = validate_schedule(solved_build.graph, target, res)
    fit = _fit_memory(solved_build, target, res, lambda flow: materialize(
        comp.module, solved_build.projection, solved_build.outputs,
        ScheduleView(res.core_of, res.start_ns, res.end_ns), flow=flow), print_ir=print_ir)
    return ScheduleRun(name, res, fit.flow.makespan_ns, violations, fit.scheduled, fit.errors,
                       ideal_estimate_ns=res.summary["completion_ns"], memory=fit.memory,
                       flow=fit.flow, materializations=fit.rounds)


@dataclass
class _Fitted:
    """A program built to fit local memory (`_fit_memory`)."""

    scheduled: Module
    errors: list[str]
    memory: MemoryPlan | None
    flow: Replay
    rounds: int


def _fit_memory(build: GraphBuild, target: Target, res: MergeScheduleResult,
                make: Callable[[Flow], Module], first: Replay | None = None,
                print_ir: IRHook | None = None) -> _Fitted:
    """Build a program with `make` from the communication model's receive and send points
    (`raptor.solver.comm.replay` within a per-core budget), verify it and plan its local
    memory; while a core's footprint exceeds its memory and a tighter budget can help (its
    tasks alone need less), cut that core's budget by the overshoot and build again, at most
    `MEMORY_ROUNDS` times. `first`: the first round's replay, if the caller has it;
    `print_ir` sees the program kept."""
    g = build.graph
    budget: list[int] | None = None
    rounds = 0
    while True:
        rounds += 1
        rep = first if rounds == 1 and first is not None else \
            replay(g, target, res.core_of, res.core_tasks, res.start_ns, budget=budget)
        scheduled = make(message_flow(build, rep))
        # the first build is verified before its memory is planned; a rebuild (the same
        # materialization, receives and sends elsewhere) once it is kept
        errors = [str(d) for d in verify_module(scheduled)] if rounds == 1 else []
        memory = plan_memory(scheduled, target) if not errors else None
        over = {c.core: c.peak_bytes for c in memory.cores.values()
                if c.peak_bytes > target.local_memory_bytes
                and rep.needed_bytes[c.core] < target.local_memory_bytes} \
            if memory is not None and g.memory is not None else {}
        if not over or rounds == MEMORY_ROUNDS:
            if rounds > 1:
                errors = [str(d) for d in verify_module(scheduled)]
                memory = memory if not errors else None
            if print_ir is not None:
                print_ir("materialize", scheduled)
            return _Fitted(scheduled, errors, memory, rep, rounds)
        budget = list(rep.budget)
        for core, peak in over.items():  # cut by the overshoot and 3 % more
            budget[core] = budget[core] * target.local_memory_bytes * 97 // (peak * 100)


def message_flow(build: GraphBuild, rep: Replay) -> Flow:
    """Where materialization posts each receive and makes each send: where the
    communication model did (within the local-memory budget, see
    `raptor.solver.comm.replay`), keyed as materialization keys messages."""
    keys = build.fragment_keys
    return Flow({(keys[f][0], keys[f][1], q, keys[f][3]): at for (f, q), at in rep.posts.items()},
                {(keys[f][0], keys[f][1], q, keys[f][3]): at for (f, q), at in rep.sends.items()},
                frozenset(rep.tight))


def solve(model: str | Path, target: Target, opts: SolveOptions,
          progress: Progress | None = None, compiled: Compiled | None = None,
          imported: tuple[PlanGraph, ModelFeeds] | None = None) -> Solved:
    """`compiled`: this model's compilation for this target and `opts.compile`, made
    earlier (a sweep shares it between points that differ in solver options only); it is
    read, never changed. `imported`: the model and its checked inputs
    (`import_with_inputs`), when the caller validated them first."""
    say = progress or _quiet
    seconds: dict[str, float] = {}
    say("compiling")
    comp = _timed(seconds, "compile", lambda: compiled if compiled is not None else
                  compile_model(model, target, opts.compile, imported))
    # what the other layout selectors would have cost on the same rule tables
    layout_costs = {comp.selection.selector: comp.selection.cost}
    for selector in ("exact", "iterative", "disabled"):
        if selector not in layout_costs:
            layout_costs[selector] = select_layouts(comp.graph, selector,
                                                    opts.compile.rules_dir)[0].cost
    say("building the task graph")
    build = _timed(seconds, "graph", build_compute_graph, comp.module.main(), target)
    bounds = lower_bounds(build.graph, target)
    if opts.mode == "pipeline":
        return _solve_pipeline(model, target, opts, say, comp, build, bounds, seconds, layout_costs)
    runs = []
    say(f"PEFT: {build.graph.num_tasks:,} tasks on {target.num_cores} cores")
    heuristic = _timed(seconds, "peft", peft_schedule, build.graph, target)
    if opts.solver in ("peft", "both"):
        say("materializing the peft schedule")
        runs.append(_run_schedule("peft", heuristic, build, comp, target, opts.compile.print_ir))
    if opts.solver in ("cpsat", "both"):
        phase = (f"CP-SAT: {build.graph.num_tasks:,} tasks on {target.num_cores} cores, "
                 f"{opts.workers} workers")
        say(phase, limit_s=opts.time_limit)
        cp = _timed(seconds, "cpsat", cpsat_schedule, build.graph, target, CpSatOptions(
            time_limit=opts.time_limit, num_workers=opts.workers, seed=opts.seed,
            on_progress=_searching(say, phase)), initial=heuristic)
        same = runs and cp.core_of == heuristic.core_of and cp.core_tasks == heuristic.core_tasks
        if same:  # the heuristic schedule came back (time-out or not run): reuse its program
            runs.append(dataclasses.replace(runs[0], name="cpsat", result=cp))
        else:
            say("materializing the cpsat schedule")
            runs.append(_run_schedule("cpsat", cp, build, comp, target, opts.compile.print_ir))
    _memory_verdict(runs, opts, target)
    assert comp.feeds is not None
    inputs, source = comp.feeds.data, comp.feeds.source
    notes = list(comp.notes)
    oracle = None
    if opts.simulate:
        say("running the ONNX reference")
        want, oracle, note = reference_outputs(model, comp.feeds.reference())
        if note is not None:
            notes.append(note)

        def check(run: ScheduleRun, ideal: SimReport) -> None:
            assert run.sim is not None
            run.ideal_ns = ideal.latency_ns
            got = {v.name: o for v, o in zip(comp.graph.outputs, run.sim.outputs, strict=True)}
            if want is not None:
                run.numerics = compare(got, want, opts.rtol, opts.atol)

        _simulate(runs, ir_inputs(comp.graph, inputs), target, opts, say, seconds,
                  "simulating the {} schedule", check)
        _judge_by_simulation(runs)
    return Solved(str(model), target, comp, build, bounds, runs, inputs, source, oracle,
                  seconds, layout_costs, list(comp.feeds.bound), notes)


def _judge_by_simulation(runs: list[ScheduleRun]) -> None:
    """The status contract, with the simulator as judge: CP-SAT's schedule is OPTIMAL only
    when it simulates at the objective of its model of the whole problem, and a CP-SAT
    schedule that simulates slower than the heuristic's is replaced by it (as one that the
    communication model judges slower is, in `raptor.solver.cpsat`)."""
    peft = next((r for r in runs if r.name == "peft" and r.sim is not None), None)
    peft_ns = peft.sim.report.latency_ns if peft is not None and peft.sim is not None else None
    for i, run in enumerate(runs):
        if run.name != "cpsat" or run.sim is None:
            continue
        res, simulated = run.result, run.sim.report.latency_ns
        if peft is not None and peft_ns is not None and simulated > peft_ns:
            note = (f"its schedule simulated at {simulated:,} ns, the PEFT schedule's at "
                    f"{peft_ns:,} ns, which is returned")
            runs[i] = dataclasses.replace(peft, name="cpsat", result=dataclasses.replace(
                peft.result, solver="cpsat", status=f"{res.status.split()[0]} ({note})",
                bound_ns=res.bound_ns, objective_ns=res.objective_ns,
                solve_seconds=res.solve_seconds, model=res.model,
                notes=[*res.notes, res.status]))
        elif res.status.startswith("OPTIMAL") and simulated != res.objective_ns:
            res.status = (f"FEASIBLE (simulated at {simulated:,} ns, the model's optimum is "
                          f"{res.objective_ns:,} ns): {res.status}")


def _simulate(runs: list[ScheduleRun], inputs: dict[str, np.ndarray], target: Target,
              opts: SolveOptions, say: Progress, seconds: dict[str, float], what: str,
              check: Callable[[ScheduleRun, SimReport], None]) -> None:
    """Simulate every valid run and time its ideal run; `check` records the ideal timing
    and the numerics. A simulation error (deadlock, capacity...) is that run's alone."""
    feeds: dict[str | int, np.ndarray] = {}
    feeds.update(inputs)
    for run in runs:
        if run.violations or run.scheduled_errors:
            continue
        twin = next((r for r in runs if r is not run and r.scheduled is run.scheduled
                     and r.sim is not None), None)
        if twin is not None:  # same program already simulated
            for name in ("sim", "ideal", "ideal_ns", "link_busy_ns", "numerics",
                         "inference_numerics"):
                setattr(run, name, getattr(twin, name))
            continue
        say(what.format(run.name))
        t0 = time.perf_counter()
        try:
            sim = Simulator(run.scheduled, target)
            with np.errstate(all="ignore"):  # NaN/Inf inputs propagate quietly
                run.sim = sim.run(feeds, opts.sim)
            ideal = sim.timing(SimOptions.ideal(trace=False))
            run.link_busy_ns = _link_busy(sim, target)
        except SimError as e:
            run.sim_error = str(e)
            continue
        finally:
            seconds[f"sim.{run.name}"] = time.perf_counter() - t0
        check(run, ideal)


def stream_inputs(data: dict[str, np.ndarray], count: int, seed: int = 0
                  ) -> list[dict[str, np.ndarray]]:
    """A stream's inputs: inference 0 is `data`; inference n > 0 adds seeded noise (half the
    input's standard deviation, generator seed `seed + n`) so that every inference differs."""
    out = [dict(data)]
    for n in range(1, count):
        rng = np.random.default_rng(seed + n)
        varied = {}
        for name, x in data.items():
            scale = float(np.std(x)) if x.size and np.all(np.isfinite(x)) else 0.0
            noise = rng.standard_normal(x.shape) * (0.5 * (scale or 1.0))
            varied[name] = (x + noise).astype(x.dtype)
        out.append(varied)
    return out


def _solve_pipeline(model: str | Path, target: Target, opts: SolveOptions, say: Progress,
                    comp: Compiled, build: GraphBuild, bounds: LowerBounds,
                    seconds: dict[str, float], layout_costs: dict[str, int]) -> Solved:
    """Pipeline mode (see the module docstring). Raises `PipelineCapacityError` when the
    target cannot hold the model's weights even with every stage on its own cores."""
    g = build.graph
    say(f"pipeline groups: {g.num_tasks:,} tasks on {target.num_cores} cores")
    problem = _timed(seconds, "pipeline_problem", build_problem, g, target, build=build)
    say(f"pipeline heuristic: {problem.num_groups} groups on {target.num_cores} cores")
    heuristic = _timed(seconds, "pipeline", heuristic_pipeline, problem, opts.replication)
    followed, flow = _timed(seconds, "pipeline_follow", _follow, problem, heuristic, target,
                            opts.replication)
    runs: list[ScheduleRun] = []
    if opts.solver in ("pipeline", "both"):
        say("materializing the pipeline stream")
        runs.append(_timed(seconds, "stream.pipeline", _run_stream, "pipeline", followed,
                           problem, build, comp, target, opts, flow))
    if opts.solver in ("cpsat", "both"):
        phase = f"CP-SAT pipeline model: {problem.num_groups} groups, {opts.workers} workers"
        say(phase, limit_s=opts.time_limit)
        cp = _timed(seconds, "cpsat", cpsat_pipeline, problem, opts.replication,
                    CpSatPipelineOptions(time_limit=opts.time_limit, num_workers=opts.workers,
                                         seed=opts.seed, on_progress=_searching(say, phase)),
                    initial=heuristic)
        same = cp.schedule.core_of == heuristic.schedule.core_of and \
            cp.schedule.core_tasks == heuristic.schedule.core_tasks
        cp_flow = flow
        if not same:
            cp, cp_flow = _follow(problem, cp, target, opts.replication)
        elif followed is not heuristic:  # the same placement refined: the same result
            refined = followed.notes[-1]
            cp = dataclasses.replace(
                followed, solver=cp.solver, status=cp.status, bound_ns=cp.bound_ns,
                objective_ns=cp.objective_ns, model_period_ns=cp.model_period_ns,
                solve_seconds=cp.solve_seconds, notes=[*cp.notes, refined],
                schedule=dataclasses.replace(
                    followed.schedule, solver=cp.schedule.solver, status=cp.schedule.status,
                    bound_ns=cp.schedule.bound_ns, objective_ns=cp.schedule.objective_ns,
                    solve_seconds=cp.schedule.solve_seconds,
                    notes=[*cp.schedule.notes, refined]))
        if same and runs:  # the same placement: reuse its program (and its simulation)
            runs.append(dataclasses.replace(runs[0], name="cpsat", pipeline=cp, result=cp.schedule))
        else:
            say("materializing the cpsat stream")
            runs.append(_timed(seconds, "stream.cpsat", _run_stream, "cpsat", cp, problem,
                               build, comp, target, opts, cp_flow))
    _memory_verdict(runs, opts, target)
    assert comp.feeds is not None
    notes = list(comp.notes)
    oracle = None
    if opts.simulate:
        say(f"running the ONNX reference on {opts.stream} inferences")
        # the variations of a stream follow the seed of its inputs
        data = stream_inputs(comp.feeds.data, opts.stream, opts.compile.inputs.seed)
        wants, oracle, note = reference_stream(model, [{**comp.feeds.bound, **d} for d in data])
        if note is not None:
            notes.append(note)
        stacked = {v.name: np.stack([d[v.name] for d in data]) for v in comp.graph.inputs}

        def check(run: ScheduleRun, ideal: SimReport) -> None:
            assert run.sim is not None
            run.ideal, run.ideal_ns = ideal, ideal.inference_end_ns[0]
            if wants is not None:
                outs = [v.name for v in comp.graph.outputs]
                per = [compare({k: o[n] for k, o in zip(outs, run.sim.outputs, strict=True)},
                               want, opts.rtol, opts.atol) for n, want in enumerate(wants)]
                run.inference_numerics = per
                run.numerics = {k: (max(p[k][0] for p in per), max(p[k][1] for p in per),
                                    all(p[k][2] for p in per)) for k in per[0]}

        _simulate(runs, ir_inputs(comp.graph, stacked), target, opts, say, seconds,
                  f"simulating {opts.stream} inferences of the {{}} stream", check)
    return Solved(str(model), target, comp, build, bounds, runs, comp.feeds.data,
                  comp.feeds.source, oracle, seconds, layout_costs, list(comp.feeds.bound),
                  notes, mode="pipeline", problem=problem, stream=opts.stream)


def _follow(problem: PipelineProblem, pr: PipelineResult, target: Target,
            replication: bool) -> tuple[PipelineResult, Replay | None]:
    """`pr`, or its partition with tasks without crossbars after their last producer
    (`follow_producers`) when local memory is tight (the communication model cannot post
    every receive at the start on some core) and that replays faster under the flow
    control, as latency mode's PEFT refinement does; and the kept one's replay (the first
    round of `_fit_memory`)."""
    g = problem.graph
    if g.memory is None:
        return pr, None
    sch = pr.schedule
    before = replay(g, target, sch.core_of, sch.core_tasks, sch.start_ns)
    if not before.tight:
        return pr, before
    moved = follow_producers(problem, pr, replication)
    ms = moved.schedule
    after = replay(g, target, ms.core_of, ms.core_tasks, ms.start_ns)
    return (moved, after) if after.makespan_ns < before.makespan_ns else (pr, before)


def _run_stream(name: str, pr: PipelineResult, problem: PipelineProblem, build: GraphBuild,
                comp: Compiled, target: Target, opts: SolveOptions,
                first: Replay | None = None) -> ScheduleRun:
    """Validate a pipeline result, materialize its stream program with the stage-internal
    receives and sends where the communication model placed them to fit local memory
    (`_fit_memory`, as in latency mode), verify it, plan its local memory and estimate its
    period."""
    g = build.graph
    sch = pr.schedule
    violations = validate_pipeline(g, target, pr, problem)
    view = StreamView(sch.core_of, sch.start_ns, sch.end_ns, pr.stage_of_task)
    infos: list[StreamInfo] = []

    def make(flow: Flow) -> Module:
        scheduled, info = materialize_stream(comp.module, build.projection, build.outputs,
                                             view, opts.stream, flow=flow)
        infos.append(info)
        return scheduled

    fit = _fit_memory(build, target, sch, make, first, opts.compile.print_ir)
    est = stream_estimate(g, target, sch.core_of, sch.start_ns, pr.stage_of_task, infos[-1],
                          opts.stream, RING, len(pr.stages), fit.flow.sends)
    return ScheduleRun(name, sch, est.ends[0] - est.starts[0], violations, fit.scheduled,
                       fit.errors, ideal_estimate_ns=est.ends[0] - est.starts[0],
                       pipeline=pr, stream=infos[-1], stream_estimate=est, memory=fit.memory,
                       flow=fit.flow, materializations=fit.rounds)


def _memory_verdict(runs: list[ScheduleRun], opts: SolveOptions, target: Target) -> None:
    """Over local or shared memory: an error, or a warning with --allow-memory-overflow."""
    for run in runs:
        if run.memory is not None:
            over = run.memory.over_capacity()
            if opts.allow_memory_overflow:
                run.memory_warnings = over
            else:
                run.memory_errors = over
            run.memory_summary = _memory_summary(run, target)


def _link_busy(sim: Simulator, target: Target) -> list[int]:
    """Busy time of every directed mesh link in the simulated run: each message holds each
    link of its route for its serialisation time."""
    busy: Counter[int] = Counter()
    for prog in sim.program.cores.values():
        for _, ser, links in (ins.route for ins in prog if ins.kind == SEND):
            busy.update(dict.fromkeys(links, ser))
    rows, cols, n = target.mesh_rows, target.mesh_cols, target.num_cores
    return [busy[a * n + (r + dr) * cols + c + dc] for a in range(n) for r, c in [divmod(a, cols)]
            for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0))
            if 0 <= r + dr < rows and 0 <= c + dc < cols]


def _communication(run: ScheduleRun) -> dict[str, Any]:
    """Bytes, messages and link utilization of a schedule: estimated (the communication
    model) and, when simulated, what the simulator moved."""
    summ = run.result.summary
    if "messages" in summ:
        est = {"bytes_moved": summ["bytes_moved"], "messages": summ["messages"],
               "link_utilization": {"max": summ["link_util_max_permille"] / 1000,
                                    "mean": summ["link_util_mean_permille"] / 1000}}
    else:  # a pipeline schedule: the model run its program follows (one inference)
        assert run.flow is not None
        util_max, util_mean = run.flow.link_utilization()
        est = {"bytes_moved": run.flow.bytes_moved, "messages": run.flow.messages,
               "link_utilization": {"max": round(util_max, 3), "mean": round(util_mean, 3)}}
    out: dict[str, Any] = {"estimated": est, "simulated": None}
    if run.sim is not None and run.link_busy_ns is not None:
        span = max(run.sim.report.latency_ns, 1)
        busy = run.link_busy_ns
        out["simulated"] = {
            "bytes_moved": run.sim.report.message_bytes, "messages": run.sim.report.messages,
            "link_utilization": {"max": round(max(busy, default=0) / span, 4),
                                 "mean": round(sum(busy) / max(len(busy), 1) / span, 4)}}
    return out


def _pipeline_fields(s: Solved, run: ScheduleRun) -> dict[str, Any]:
    """A pipeline schedule's report fields (docs/spec/ARCHITECTURE.md §9; docs/pipeline.md):
    the period estimate beside the simulated period, throughput, stages, replication and the
    numerics of every inference. `estimate_ns` / `simulated_ns` are inference 0's latency."""
    pr, est, st = run.pipeline, run.stream_estimate, run.stream
    assert pr is not None and est is not None and st is not None
    fill = len(pr.stages)
    rep = run.sim.report if run.sim is not None else None
    period = rep.period_ns(fill) if rep is not None else None
    ideal = run.ideal.period_ns(fill) if run.ideal is not None else None
    lat = rep.inference_latency_ns() if rep is not None else []
    out: dict[str, Any] = {
        "period_ns": est.period_ns,
        "ideal_period_ns": est.ideal_period_ns,
        "memory_service_ns": est.memory_ns,
        "simulated_period_ns": period,
        "ideal_simulated_period_ns": ideal,
        "throughput_per_s": round(1e9 / period, 3) if period else None,
        "estimated_throughput_per_s": round(1e9 / est.period_ns, 3) if est.period_ns else None,
        "latency_in_pipeline_ns": int(np.median(lat)) if lat else None,
        "simulated_ns": rep.inference_end_ns[0] if rep is not None else None,
        "ideal_simulated_ns": run.ideal.inference_end_ns[0] if run.ideal else None,
        "solver_period_ns": pr.period_ns,
        "model_period_ns": pr.model_period_ns,
        "wave_period_ns": pr.wave_period_ns,
        "solver_memory_service_ns": pr.memory_service_ns,
        "objective_ns": pr.objective_ns,
        "bound_ns": pr.bound_ns,
        "bound_of": "the period model (docs/pipeline.md §2)",
        "gap_to_lower_bound": None,
        "stages": [{"groups": st.groups,
                    "cores": [c for c in st.cores if pr.schedule.core_tasks[c]],
                    "span_ns": st.span_ns, "crossbars": st.crossbars, "load_ns": st.load_ns,
                    "path_ns": st.path_ns, "completion_ns": st.completion_ns,
                    "cores_allocated": len(st.cores)} for st in pr.stages],
        "replicated": [dataclasses.asdict(r) for r in pr.replicated],
        "crossbars_used": pr.crossbars_used,
        "crossbars_available": pr.crossbars_available,
        "inferences": s.stream,
        "inference_end_ns": rep.inference_end_ns if rep is not None else None,
        "inference_latency_ns": lat or None,
        "estimated_inference_end_ns": est.ends,
        "boundaries": {"counter_pairs": len(st.pairs), "load_groups": len(st.groups),
                       "buffers": sum(map(len, st.stores.values()))},
        "notes": list(pr.notes),
    }
    if run.inference_numerics is not None and run.numerics is not None:
        out["numerics"] = _numerics(run.numerics, inferences=len(run.inference_numerics))
        out["numerics"]["per_inference"] = [_numerics(p, outputs=False)
                                            for p in run.inference_numerics]
    return out


def _numerics(errors: dict[str, tuple[float, float, bool]], outputs: bool = True,
              **more: Any) -> dict[str, Any]:
    """A report's numerics: the worst absolute error and the verdict, `more`, then (with
    `outputs`) each output's errors."""
    out = {"max_abs_error": max((a for a, _, _ in errors.values()), default=0.0),
           "ok": all(ok for _, _, ok in errors.values()), **more}
    if outputs:
        out["outputs"] = {k: {"max_abs_error": a, "max_rel_error": r, "ok": ok}
                          for k, (a, r, ok) in errors.items()}
    return out


def _memory_summary(run: ScheduleRun, target: Target) -> list[str]:
    """The worst core over local memory in one line (`MemoryPlan.over_summary`) and why:
    its computes alone need more than the memory whatever the order of its receives (the
    communication model's `needed_bytes`), or the receives could not be placed to fit."""
    assert run.memory is not None
    lines = run.memory.over_summary()
    top = run.memory.peak
    if not lines or top is None or top.peak_bytes <= target.local_memory_bytes:
        return lines
    need = run.flow.needed_bytes[top.core] if run.flow and run.flow.needed_bytes else 0
    if need > target.local_memory_bytes:
        why = (f"; its computes alone hold about {need:,} bytes at once there, whatever the "
               "order of its receives (a --target file with more local_memory_bytes fits it)")
    else:
        why = (f"; its receives could not be placed to fit in {run.materializations} builds "
               "of the program (a --target file with more local_memory_bytes fits it)")
    return [lines[0] + why, *lines[1:]]


def _flow_control(run: ScheduleRun) -> dict[str, Any] | None:
    """How the program keeps within local memory: receives posted after the start,
    sends held to a later point, the time senders waited for a post, receives posted over
    budget to go on, and how many times the program was built (`MEMORY_ROUNDS`)."""
    rep = run.flow
    if rep is None:
        return None
    return {"receives": len(rep.posts),
            "receives_posted_late": sum(1 for p in rep.posts.values() if p != START),
            "held_sends": rep.held_sends, "send_wait_ns": rep.send_wait_ns,
            "forced_posts": rep.forced_posts, "tight_cores": len(rep.tight),
            "materializations": run.materializations}


def _bound_of(res: MergeScheduleResult) -> str:
    """What a schedule's ``bound_ns`` bounds: the problem, always (PEFT and CP-SAT's
    large-neighbourhood search report the problem's lower bound; CP-SAT's whole model
    relaxes the problem: free links)."""
    return "problem"


def _compute_counts(module: Module) -> tuple[int, int]:
    """(scheduled computes, scheduled batches) of a program, not looking inside them (their
    bodies hold most of a program's ops)."""
    computes = batches = 0
    stack = [op for f in module.funcs for op in f.body.ops]
    while stack:
        op = stack.pop()
        if isinstance(op, ScheduledComputeOp):
            computes += 1
        elif isinstance(op, ScheduledComputeBatchOp):
            batches += 1
        else:
            stack.extend(inner for region in op.regions() for inner in region.ops)
    return computes, batches


def report(s: Solved) -> dict[str, Any]:
    """report.json (docs/spec/ARCHITECTURE.md §9 plus layouts, rules and per-schedule detail)."""
    g = s.build.graph
    sel = s.compiled.selection
    lb = s.bounds.makespan_ns
    schedules: dict[str, Any] = {}
    counted: dict[int, tuple[int, int]] = {}
    for run in s.runs:
        res = run.result
        counts = counted.get(id(run.scheduled))
        if counts is None:  # one walk per program (schedules may share one)
            counts = counted[id(run.scheduled)] = _compute_counts(run.scheduled)
        numerics = _numerics(run.numerics) if run.numerics is not None else None
        entry: dict[str, Any] = {
            "estimate_ns": run.estimate_ns,
            "ideal_estimate_ns": run.ideal_estimate_ns,
            "plan_ns": res.makespan_ns,
            "simulated_ns": run.sim.report.latency_ns if run.sim else None,
            "ideal_simulated_ns": run.ideal_ns,
            "communication": _communication(run),
            "period_ns": None,
            "solve_seconds": round(res.solve_seconds, 4),
            "status": res.status,
            "bound_ns": res.bound_ns,
            "bound_of": _bound_of(res),
            "gap_to_lower_bound": round((run.estimate_ns - lb) / lb, 4) if lb else None,
            "model": res.model,
            "cores_used": run.cores_used,
            "scheduled_computes": counts[0],
            "scheduled_batches": counts[1],
            "numerics": numerics,
            "valid": not run.violations and not run.scheduled_errors,
            "violations": run.violations + run.scheduled_errors,
            "simulation_error": run.sim_error,
            "notes": list(res.notes),
            "local_memory": run.memory.to_dict() if run.memory else None,
            "flow_control": _flow_control(run),
            "memory_errors": run.memory_errors,
            "memory_warnings": run.memory_warnings,
            "simulation": run.sim.report.to_dict() if run.sim else None,
        }
        if run.pipeline is not None:
            entry.update(_pipeline_fields(s, run))
        schedules[run.name] = entry
    return {
        "model": s.model,
        "target": s.target.name,
        "mode": s.mode,
        "tasks": g.num_tasks,
        "edges": len(g.edges),
        "crossbars": len(g.distinct_weights()),
        "lower_bound_ns": s.bounds.makespan_ns,
        **({"period_lower_bound_ns": s.problem.lower_bound(True), "inferences": s.stream,
            "pipeline_groups": s.problem.num_groups} if s.problem is not None else {}),
        "lower_bounds": {"critical_path_ns": s.bounds.critical_path_ns,
                         "work_per_core_ns": s.bounds.work_per_core_ns,
                         "fan_in_ns": s.bounds.fan_in_ns,
                         "shared_memory_ns": s.bounds.shared_memory_ns,
                         "layer_load_ns": s.bounds.layer_load_ns,
                         "min_cores": s.bounds.min_cores},
        "mvms": s.build.mvms,
        "inputs": s.input_source,
        "bound_inputs": s.bound_inputs,
        "oracle": s.oracle,
        "layouts": dict(sel.counts),
        "layout_selector": sel.selector,
        "layout_costs": s.layout_costs,
        "rules": {"dir": str(s.compiled.rules_dir),
                  "fired": dict(sorted(s.compiled.fired.items()))},  # reruns print alike
        "notes": s.notes,
        "seconds": {k: round(v, 4) for k, v in s.seconds.items()},
        "schedules": schedules,
    }
