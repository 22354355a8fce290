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
from raptor.export import ExportError, leave_rank, lowered, stream_count, task_costs
from raptor.frontend.oracle import compare, reference_outputs, reference_stream
from raptor.frontend.plan import PlanGraph
from raptor.ir.module import Module
from raptor.ir.ops import ScheduledComputeBatchOp, ScheduledComputeOp, StoreOp
from raptor.ir.verifier import verify_module
from raptor.noc import Network
from raptor.passes.layout import select_layouts
from raptor.passes.materialize import CropKey, Flow, ScheduleView, materialize
from raptor.passes.memory import MemoryPlan, plan_memory
from raptor.passes.spill import Spill, spill
from raptor.passes.stream import RING, StreamInfo, StreamView, materialize_stream
from raptor.sim import SimError, SimOptions, SimReport, SimResult, Simulator
from raptor.sim.program import SEND
from raptor.sim.report import Trace
from raptor.solver.blocking import blocking_makespan
from raptor.solver.comm import START, Replay, deepen, inputs_first, lanes_moved, replay
from raptor.solver.costs import op_cost_ns
from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.evaluate import LowerBounds, lower_bounds, validate_schedule
from raptor.solver.from_ir import GraphBuild, build_compute_graph
from raptor.solver.graph import ComputeGraph
from raptor.solver.peft import peft_schedule
from raptor.solver.pipeline import (
    CpSatPipelineOptions,
    PipelineCapacityError,
    PipelineProblem,
    PipelineResult,
    build_problem,
    cone_stream,
    cpsat_pipeline,
    follow_producers,
    heuristic_pipeline,
    latency_stream,
    layered_stream,
    spread_stream,
    validate_pipeline,
)
from raptor.solver.pipeline.realize import Skew, skew_lags
from raptor.solver.pipeline.solve import (
    LAYERED_KEPT,
    LAYERED_MAX_TASKS,
    defer_sends,
    longest_window,
    ordered_sends,
    wave_cpsat,
    wave_partition,
)
from raptor.solver.pipeline.stream import StreamEstimate, stream_estimate
from raptor.solver.schedule import MergeScheduleResult
from raptor.solver.watch import SearchReport, searches_stopped
from raptor.target import Target
from raptor.ui.table import counted

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
    spread: bool = True
    """Pipeline mode: the one-stage spread placements (`spread_stream`) are judge
    candidates of every row."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; valid: {', '.join(MODES)}")
        if self.solver not in MODES[self.mode]:
            raise ValueError(f"--mode {self.mode} has no solver {self.solver!r}; valid: "
                             f"{', '.join(MODES[self.mode])}")
        if self.stream < 1:
            raise ValueError(f"--stream must be at least 1, got {self.stream}")


STATUSES: dict[str, str] = {
    "OPTIMAL": "the solver proved its schedule optimal (for its model: see bound_of)",
    "FEASIBLE": "the solver's best schedule; its search ended at the limit before a proof",
    "HEURISTIC": "a heuristic's schedule (PEFT, the pipeline heuristic): no search",
    "INTERRUPTED": "Ctrl-C ended the search early: its best schedule so far, or the "
                   "heuristic's when it had none better (status_detail says which)",
    "NOT_USED": "the solver's own schedule was judged slower than another candidate's, which "
                "is used (latency mode: CP-SAT's against PEFT's; pipeline mode: a row's "
                "partition against the heuristic's, the latency schedule run as a stream or a "
                "one-stage spread placement)",
    "NO_SOLUTION": "the search found no schedule of its own within its limit; the "
                   "heuristic's is used",
}
"""report.json's `status` of a schedule, one of these words (docs/report.schema.json);
`status_detail` says what happened in words, with no wall-clock seconds (those are in
`solve_seconds` and `seconds`). When the word is not the solver's own (a search's schedule
`NOT_USED`, or `NO_SOLUTION`), the detail begins with CP-SAT's word for how the search
ended: `after a search that ended OPTIMAL; ...`, `... ended UNKNOWN: ...` (a heuristic's row,
which did not search, says only which candidate is returned)."""

_NO_SOLUTION = ("UNKNOWN", "INFEASIBLE", "MODEL_INVALID")
"""CP-SAT's own words for a search that returned no solution."""


def schedule_status(solver_status: str, notes: list[str], interrupted: bool = False
                    ) -> tuple[str, str]:
    """(`status`, `status_detail`) of a schedule from its solver's status text and notes:
    the one place where the solvers' words become report.json's (`STATUSES`).

    The solvers say it thus: the heuristics `HEURISTIC`; CP-SAT (`raptor.solver.cpsat`)
    `OPTIMAL ...` or `FEASIBLE ...`, `... no solution of its own ...` or a status name of
    `_NO_SOLUTION` when the search returned none, `..., which is returned` when it kept the
    heuristic's schedule; the pipeline model (`raptor.solver.pipeline`) says the latter two
    in its notes ("hint returned", "the hint's realization is kept")."""
    text = " ".join(solver_status.split())
    first = text.split(" ", 1)[0].rstrip(":,;")
    kept = [n for n in notes if "hint returned" in n or "realization is kept" in n]
    if kept:  # the pipeline model says it in a note: the detail names it
        text = f"{text}; {kept[0]}"
    if first in _NO_SOLUTION or "no solution of its own" in text or "hint returned" in text:
        word = "NO_SOLUTION"
    elif "which is returned" in text or "realization is kept" in text:
        word = "NOT_USED"
    elif first in STATUSES:
        word = first
    else:  # a solver's word this function does not know: a bug, said in the detail
        word = "FEASIBLE"
        text = f"(solver said: {text})"
    rest = text.removeprefix(first)
    detail = rest.lstrip(" :") if word == first else _reworded(first, rest, text)
    if interrupted and word != "OPTIMAL":  # (a proof that completed stands)
        detail = "Ctrl-C ended the search" + (f"; {word}" if word != "FEASIBLE" else "") + \
            (f": {detail}" if detail else "")
        word = "INTERRUPTED"
    return word, detail


def _reworded(first: str, rest: str, text: str) -> str:
    """The detail of a status word that is not the solver's own word `first` (`rest`
    follows it in the solver's `text`): the solver's word as how its search ended, so that
    the status line never reads as two verdicts (`NOT_USED OPTIMAL`)."""
    if first == "HEURISTIC":  # no search: only which candidate is returned, and why
        inner = rest.strip()
        return inner[1:-1] if inner[:1] == "(" and inner[-1:] == ")" else inner
    known = first in STATUSES or first in _NO_SOLUTION
    return f"after a search that ended {first}{rest}" if known else text


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
    candidates: list[dict[str, Any]] = field(default_factory=list)
    """Pipeline mode: the row's candidates with their estimated and simulated periods
    (`_judge`)."""
    latency_mode_ns: int | None = None
    """Pipeline mode: the latency schedule's latency, simulated (the first inference of its
    stream)."""
    wave_model: bool = False
    """Pipeline mode: the row returns CP-SAT's own candidate of the wave model
    (`_wave_layered`), so its objective and bound are that model's."""
    materializations: int = 1
    """How many times the program was built to fit local memory (`MEMORY_ROUNDS`)."""
    spill: Spill | None = None
    """What spilling to shared memory stored and loaded to fit local memory."""
    spill_ns: dict[int, int] = field(default_factory=dict)
    """Per core, the shared-memory service its spill stores and loads take."""
    memory_summary: list[str] = field(default_factory=list)
    """`memory_errors` (or warnings) in one line for local memory, with what stands in the
    way, and one for shared memory."""
    interrupted: bool = False
    """Ctrl-C ended this schedule's search early (`raptor.solver.watch.stop_search`)."""
    long_run: SimReport | None = None
    """Pipeline mode: the timed simulation of this program over the longer stream its
    estimate's period settled on (`StreamEstimate.inferences`), when longer than the
    solve's stream (`_simulate_long`)."""

    @property
    def period_ns(self) -> int | None:
        """Pipeline mode: the simulated period (`SimReport.period_ns`), over the stream the
        estimate's period settled on; None when not simulated."""
        rep = self.long_run or (self.sim.report if self.sim is not None else None)
        if rep is None or self.pipeline is None:
            return None
        return rep.period_ns(len(self.pipeline.stages))

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
                  target: Target, print_ir: IRHook | None = None, spills: bool = True
                  ) -> ScheduleRun:
    """Validate and materialize a schedule in its plan's order (the order and send priorities
    its communication estimate assumed), with receives and sends where the communication
    model placed them to stay within local memory (`MEMORY_ROUNDS`)."""
    violations = validate_schedule(solved_build.graph, target, res)
    fit = _fit_memory(solved_build, target, res, lambda flow: materialize(
        comp.module, solved_build.projection, solved_build.outputs,
        ScheduleView(res.core_of, res.start_ns, res.end_ns), flow=flow), res.comm,
        print_ir=print_ir, spills=spills,
        adjust=lambda rep: inputs_first(solved_build.graph, target, res.core_of, res.core_tasks,
                                        deepen(solved_build.graph, target, res.core_of,
                                               res.core_tasks, rep)))
    return ScheduleRun(name, res, fit.estimate_ns, violations, fit.scheduled, fit.errors,
                       ideal_estimate_ns=res.summary["completion_ns"], memory=fit.memory,
                       flow=fit.flow, materializations=fit.rounds, spill=fit.spill,
                       spill_ns=fit.spill_ns)


@dataclass
class _Fitted:
    """A program built to fit local memory (`_fit_memory`)."""

    scheduled: Module
    errors: list[str]
    memory: MemoryPlan | None
    flow: Replay
    rounds: int
    estimate_ns: int
    """The communication model's makespan, spill traffic included."""
    charged: ComputeGraph
    """The graph with the spill traffic charged to its tasks (`_spill_replay`)."""
    spill: Spill | None = None
    spill_ns: dict[int, int] = field(default_factory=dict)


def _fit_memory(build: GraphBuild, target: Target, res: MergeScheduleResult,
                make: Callable[[Flow], Module], first: Replay | None = None,
                print_ir: IRHook | None = None, spills: bool = True,
                adjust: Callable[[Replay], Replay] | None = None, verify: bool = True
                ) -> _Fitted:
    """Build a program with `make` from the communication model's receive and send points
    (`raptor.solver.comm.replay` within a per-core budget), verify it and plan its local
    memory; while a core's footprint exceeds its memory and a tighter budget can help (its
    tasks alone need less), cut that core's budget by the overshoot and build again, at most
    `MEMORY_ROUNDS` times; what still does not fit is spilled to shared memory
    (`raptor.passes.spill`, unless `spills` is off) and the estimate replayed with the spill
    traffic (`_spill_replay`). `first`: the first round's replay, if the caller has it;
    `print_ir` sees the program kept; `adjust` remakes every round's replay (a
    layered stream's sends between ranges, `defer_sends`; under pimsim-nn's protocol the
    latency program's order and posts, `deepen`); `verify` off: the caller
    verifies the program kept once it uses it (`_Candidate.verify`)."""
    g = build.graph
    budget: list[int] | None = None
    rounds = 0
    while True:
        rounds += 1
        rep = first if rounds == 1 and first is not None else \
            replay(g, target, res.core_of, res.core_tasks, res.start_ns, budget=budget)
        if adjust is not None:
            rep = adjust(rep)
        scheduled = make(message_flow(build, rep))
        # the first build is verified before its memory is planned; a rebuild (the same
        # materialization, receives and sends elsewhere) once it is kept
        errors = [str(d) for d in verify_module(scheduled)] if rounds == 1 and verify else []
        memory = plan_memory(scheduled, target) if not errors else None
        over = {c.core: c.peak_bytes for c in memory.cores.values()
                if c.peak_bytes > target.local_memory_bytes
                and rep.needed_bytes[c.core] < target.local_memory_bytes} \
            if memory is not None and g.memory is not None else {}
        if not over or rounds == MEMORY_ROUNDS:
            spilled: Spill | None = None
            estimate, spill_ns, charged = rep.makespan_ns, dict[int, int](), g
            if spills and memory is not None and memory.over_capacity():
                spilled = spill(scheduled, target)
                estimate, spill_ns, charged = _spill_replay(g, target, res, spilled, rep,
                                                            estimate)
            changed = spilled is not None and bool(spilled.cores)
            if rounds > 1 or changed:
                errors = [str(d) for d in verify_module(scheduled)] if verify else []
                memory = None if errors else plan_memory(scheduled, target) if changed \
                    else memory
            if target.protocol == "pimsim-nn" and memory is not None and not errors \
                    and stream_count(scheduled) is None:
                estimate = _pimsim_estimate(g, target, res, rep, scheduled, memory, estimate)
            if print_ir is not None:
                print_ir("materialize", scheduled)
            return _Fitted(scheduled, errors, memory, rep, rounds, estimate, charged, spilled,
                           spill_ns)
        budget = list(rep.budget)
        for core, peak in over.items():  # cut by the overshoot and 3 % more
            budget[core] = budget[core] * target.local_memory_bytes * 97 // (peak * 100)


def _pimsim_estimate(g: ComputeGraph, target: Target, res: MergeScheduleResult, rep: Replay,
                     scheduled: Module, memory: MemoryPlan, estimate: int) -> int:
    """Under pimsim-nn's protocol, the estimate of the program as built (``rep``'s message
    order, posts and merges) with its tasks priced as pimsim-nn runs them
    (`raptor.export.task_costs`), not by the target's op costs, which put the examples'
    estimates up to 1.8 % under Raptor's model of pimsim-nn. ``estimate`` if the program
    cannot be lowered."""
    try:
        ex = lowered(scheduled, target, memory)
        rank = leave_rank(scheduled, target, ex)
    except (ExportError, SimError):
        return estimate
    priced = task_costs(scheduled, ex, res.core_tasks, g.num_tasks)
    # the exporter keeps the faster of the channel order and the order the messages leave
    # in when receives do not block (`raptor.export.leave_rank`): so does the estimate
    channel = {k: r for k, (_, r) in rep.sends.items()}  # channel numbers
    orders = [channel] if rank is None else [channel, {k: rank[c] for k, c in channel.items()
                                                       if c in rank}]
    best = [blocking_makespan(g, target, res.core_of, res.core_tasks, rep.sends, order,
                              rep.posts, rep.merged, priced) for order in orders]
    return min((b for b in best if b is not None), default=estimate)


def _spill_replay(g: ComputeGraph, target: Target, res: MergeScheduleResult, spilled: Spill,
                  built: Replay, unspilled_ns: int
                  ) -> tuple[int, dict[int, int], ComputeGraph]:
    """The communication model's makespan with the spill traffic, per core the
    shared-memory service the spills take, and the graph with the spills charged to its
    tasks (what a stream estimate plays), replayed in the flow of the program ``built``
    was materialized from (its posts and sends stay where they are). A spill store
    follows the compute of the task it comes after on its core and is served by the
    chip's one shared-memory port in request order (`Task.shared_ns`), before that
    point's sends, as materialized; a spill load comes just before the task that reads
    it, after the point's sends, so it is charged to that task's own work (the queue it
    may meet is left out: it would delay the sends too)."""
    tasks = list(g.tasks)
    per_core: dict[int, int] = {}
    for core, cs in spilled.cores.items():
        prog = res.core_tasks[core]
        for op, done in cs.ops:
            ns = op_cost_ns(op, target)
            per_core[core] = per_core.get(core, 0) + ns
            queued = isinstance(op, StoreOp) and done > 0
            t = tasks[prog[done - 1 if queued else min(done, len(prog) - 1)]]
            tasks[t.id] = dataclasses.replace(t, cost_ns=t.cost_ns + ns,
                                              shared_ns=t.shared_ns + ns * queued)
    if not per_core:
        return unspilled_ns, {}, g
    charged = dataclasses.replace(g, tasks=tasks)
    return replay(charged, target, res.core_of, res.core_tasks, res.start_ns,
                  built=built).makespan_ns, per_core, charged


def message_flow(build: GraphBuild, rep: Replay) -> Flow:
    """Where materialization posts each receive and makes each send: where the
    communication model did (within the local-memory budget, see
    `raptor.solver.comm.replay`), keyed as materialization keys messages."""
    keys = build.fragment_keys

    def key(f: int, q: int) -> tuple[int, int, int, CropKey | None]:
        return keys[f][0], keys[f][1], q, keys[f][3]

    return Flow({key(*m): at for m, at in rep.posts.items()},
                {key(*m): at for m, at in rep.sends.items()}, frozenset(rep.tight),
                {key(*m): key(*lead) for m, lead in rep.merged.items()},
                frozenset(key(*m) for m in rep.yx))


def solve(model: str | Path, target: Target, opts: SolveOptions,
          progress: Progress | None = None, compiled: Compiled | None = None,
          imported: tuple[PlanGraph, ModelFeeds] | None = None) -> Solved:
    """`compiled`: this model's compilation for this target and `opts.compile`, made
    earlier (a sweep shares it between points that differ in solver options only); it is
    read, never changed, and compiled again when lowered for the other mode
    (`CompileOptions.pipeline`). `imported`: the model and its checked inputs
    (`import_with_inputs`), when the caller validated them first."""
    say = progress or _quiet
    seconds: dict[str, float] = {}
    say("compiling")
    pipeline = opts.mode == "pipeline"
    comp = _timed(seconds, "compile", lambda: compiled if compiled is not None
                  and compiled.pipeline == pipeline else compile_model(
                      model, target, dataclasses.replace(opts.compile, pipeline=pipeline),
                      imported))
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
    on = f"{counted(build.graph.num_tasks, 'task')} on {counted(target.num_cores, 'core')}"
    say(f"PEFT: {on}")
    heuristic = _timed(seconds, "peft", peft_schedule, build.graph, target)
    if target.protocol != "raptor" and comp.lowered.windowed:
        say("PEFT: the one-pixel lowering, under the blocking protocol")
        comp, build, heuristic = _timed(seconds, "one_pixel", _one_pixel_rival, model, target,
                                        opts, comp, build, heuristic)
        bounds = lower_bounds(build.graph, target)
    if opts.solver in ("peft", "both"):
        say("materializing the peft schedule")
        runs.append(_run_schedule("peft", heuristic, build, comp, target, opts.compile.print_ir,
                                     not opts.allow_memory_overflow))
    if opts.solver in ("cpsat", "both"):
        phase = f"CP-SAT: {on}, {counted(opts.workers, 'worker')}"
        say(phase, limit_s=opts.time_limit)
        stopped = searches_stopped()
        cp = _timed(seconds, "cpsat", cpsat_schedule, build.graph, target, CpSatOptions(
            time_limit=opts.time_limit, num_workers=opts.workers, seed=opts.seed,
            on_progress=_searching(say, phase)), initial=heuristic)
        same = runs and cp.core_of == heuristic.core_of and cp.core_tasks == heuristic.core_tasks
        if same:  # the heuristic schedule came back (time-out or not run): reuse its program
            runs.append(dataclasses.replace(runs[0], name="cpsat", result=cp))
        else:
            say("materializing the cpsat schedule")
            runs.append(_run_schedule("cpsat", cp, build, comp, target, opts.compile.print_ir,
                                     not opts.allow_memory_overflow))
        runs[-1].interrupted = searches_stopped() > stopped
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


def _one_pixel_rival(model: str | Path, target: Target, opts: SolveOptions, comp: Compiled,
                     build: GraphBuild, heuristic: MergeScheduleResult
                     ) -> tuple[Compiled, GraphBuild, MergeScheduleResult]:
    """The windowed lowering or the one-pixel one (`conv_window_max = 1`), whichever PEFT
    schedules faster, with a note saying which. Windows choose their pixels by MVM rounds
    (`raptor.passes.lower.conv_windows`), but under a blocking protocol (pimsim-nn's: a
    core waits in `recv`) their longer lanes and larger messages can cost more than the
    MVMs save, and PEFT's schedule there turns on small changes: ResNet-18 under
    pimsim-nn's protocol, 8,437,697 ns windowed against 6,869,140 at one pixel, where the
    ResNet block and LeNet gain from windows (docs/benchmarks.md, twentieth session)."""
    rival, rival_build = _one_pixel(model, target, opts, comp)
    rival_heuristic = peft_schedule(rival_build.graph, target)
    ns = f"{heuristic.estimate_ns:,} ns windowed, {rival_heuristic.estimate_ns:,} at one pixel"
    if rival_heuristic.estimate_ns < heuristic.estimate_ns:
        note = f"one output pixel per MVM: PEFT under {target.protocol}'s protocol {ns}"
        return dataclasses.replace(rival, notes=[*rival.notes, note]), rival_build, \
            rival_heuristic
    note = f"convolution windows kept: PEFT under {target.protocol}'s protocol {ns}"
    return dataclasses.replace(comp, notes=[*comp.notes, note]), build, heuristic


def _one_pixel(model: str | Path, target: Target, opts: SolveOptions, comp: Compiled
               ) -> tuple[Compiled, GraphBuild]:
    """`comp`'s model compiled again at one output pixel per MVM (`conv_window_max = 1`),
    from its imported graph, and its task graph."""
    one = dataclasses.replace(target, conv_window_max=1)
    rival = compile_model(model, one, dataclasses.replace(opts.compile, pipeline=comp.pipeline),
                          (comp.graph, comp.feeds) if comp.feeds is not None else None)
    return rival, build_compute_graph(rival.module.main(), target)


def _memory_bound_rival(model: str | Path, target: Target, opts: SolveOptions,
                        comp: Compiled, problem: PipelineProblem
                        ) -> tuple[Compiled, GraphBuild, PipelineProblem] | None:
    """The one-pixel lowering when windows buy no period: the windowed problem's period
    bound (`PipelineProblem.lower_bound`) is its shared-memory service, and the pipeline
    heuristic's period model of the one-pixel problem reaches it too. There the stream's
    period sits on that floor either way, and the finer lanes placed the stores better:
    yolo_neck's simulated periods over its floor of 204,800 ns, 207,660 at one pixel,
    230,634 at two, 216,717 at four or eight (docs/benchmarks.md, twentieth session). The
    ResNet block's windows also reach its floor, but at one pixel the model says 32,160 ns
    over 25,600: windows kept. None when windows are kept."""
    floor = problem.baseline_ns
    if not comp.lowered.windowed or problem.lower_bound(opts.replication) > floor:
        return None
    rival, rival_build = _one_pixel(model, target, opts, comp)
    rival_problem = build_problem(rival_build.graph, target, build=rival_build)
    if heuristic_pipeline(rival_problem, opts.replication).model_period_ns > floor:
        return None
    note = (f"one output pixel per MVM: the period is bound by shared-memory service "
            f"({floor:,} ns) with windows or without")
    return dataclasses.replace(rival, notes=[*rival.notes, note]), rival_build, rival_problem


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
            sim = Simulator(run.scheduled, target, check_memory=not (
                opts.allow_memory_overflow or run.memory_errors), memory=run.memory)
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
    target cannot hold the model's weights even with every stage on its own cores.

    The judge chooses (docs/pipeline.md §3, "The judge"): every candidate a solver row has —
    its own partition, the latency schedule run as a stream, the one-stage spreads
    (`SPREADS`, unless `opts.spread` is off), and for CP-SAT the heuristic's choice —
    is materialized and ranked by its stream estimate; candidates are simulated best
    estimate first (one whose contention-free floor cannot beat the best simulated period so
    far is not, nor one whose estimate is over `ESTIMATE_LOSES` times it), and a row
    returns its fastest simulated candidate."""
    say(f"pipeline groups: {counted(build.graph.num_tasks, 'task')} on "
        f"{counted(target.num_cores, 'core')}")
    problem = _timed(seconds, "pipeline_problem", build_problem, build.graph, target,
                     build=build)
    rival = _timed(seconds, "one_pixel", _memory_bound_rival, model, target, opts, comp,
                   problem)
    if rival is not None:
        comp, build, problem = rival
        bounds = lower_bounds(build.graph, target)
    g = build.graph
    say(f"pipeline heuristic: {counted(problem.num_groups, 'group')} on "
        f"{counted(target.num_cores, 'core')}")
    heuristic = _timed(seconds, "pipeline", heuristic_pipeline, problem, opts.replication)
    replays: dict[tuple[Any, ...], Replay] = {}
    followed, flow = _timed(seconds, "pipeline_follow", _follow, problem, heuristic, target,
                            opts.replication, replays=replays)
    say(f"PEFT: {counted(g.num_tasks, 'task')} on {counted(target.num_cores, 'core')} "
        "(the latency candidate)")
    lat_schedule = _timed(seconds, "peft", peft_schedule, g, target, opts.replication)
    latency = latency_stream(problem, lat_schedule)
    # under pimsim-nn's protocol its stream follows PEFT's own communication run (its
    # message order and posts, made with PEFT's times) refined as the latency program's
    # (`deepen`); replayed from the stream's own times (`_one_stage`), ResNet-18's stream
    # took 8.77 ms an inference on pimsim-nn where the latency program took 7.67, and
    # without `deepen` 7.11 where it took 6.97; its stem lanes computed before their
    # sends (`inputs_first`): 6.84 ms a period on pimsim-nn, then 6.71
    deepened = deepen(g, target, lat_schedule.core_of, lat_schedule.core_tasks,
                      lat_schedule.comm) if target.protocol == "pimsim-nn" \
        and lat_schedule.comm is not None else None
    lat_flow = None if deepened is None else inputs_first(
        g, target, lat_schedule.core_of, lat_schedule.core_tasks, deepened)
    # and a stem lane off each core that ends last (`lanes_moved`): ResNet-18's stream
    # 6.71 ms a period on pimsim-nn, then 6.65 (docs/benchmarks.md, wip/pim17)
    moved = None if deepened is None else lanes_moved(
        g, target, lat_schedule.core_of, lat_schedule.core_tasks, deepened)
    lanes: list[tuple[str, PipelineResult | None, Replay | None]] = [] if moved is None else [
        ("lanes", latency_stream(problem, dataclasses.replace(
            lat_schedule, core_of=moved[0], core_tasks=moved[1])),
         inputs_first(g, target, moved[0], moved[1], moved[2]))]
    rows: dict[str, list[tuple[str, PipelineResult | None, Replay | None]]] = {}
    spreads: list[tuple[str, None, None]] = [(name, None, None)
                                             for name in (SPREADS if opts.spread else ())]
    if opts.solver in ("pipeline", "both"):
        rows["pipeline"] = [("heuristic", followed, flow), ("latency", latency, lat_flow),
                            *lanes, *spreads]
    if opts.solver in ("cpsat", "both"):
        phase = (f"CP-SAT pipeline model: {counted(problem.num_groups, 'group')}, "
                 f"{counted(opts.workers, 'worker')}")
        say(phase, limit_s=opts.time_limit)
        stopped = searches_stopped()
        cp = _timed(seconds, "cpsat", cpsat_pipeline, problem, opts.replication,
                    CpSatPipelineOptions(time_limit=opts.time_limit, num_workers=opts.workers,
                                         seed=opts.seed, on_progress=_searching(say, phase)),
                    initial=heuristic)
        cp_interrupted = searches_stopped() > stopped
        cp_flow = flow
        if _same_placement(cp, heuristic):  # the same placement, refined the same way
            cp = _as_solver(followed, cp)
        else:
            cp, cp_flow = _follow(problem, cp, target, opts.replication, replays=replays)
        waves: list[tuple[str, None, None]] = [(name, None, None)
                                               for name in (WAVES if opts.spread else ())]
        rows["cpsat"] = [("cpsat", cp, cp_flow), *waves, ("heuristic", followed, flow),
                         ("latency", latency, lat_flow), *lanes, *spreads]
    cands: list[_Candidate] = []
    notes = list(comp.notes)
    made: dict[str, tuple[PipelineResult, Replay | None] | None] = {}
    layers: dict[bool, list[PipelineResult]] = {}

    def layered(own: bool) -> list[PipelineResult]:
        """`layered_stream`'s candidates, or with `own` the CP-SAT row's (`_wave_layered`),
        each made once."""
        if own not in layers:
            layers[own] = (_wave_layered(problem, opts, layered) if own else
                           layered_stream(problem, opts.replication, opts.stream))
        return layers[own]

    def spread(name: str, lead: int | None) -> tuple[PipelineResult, Replay | None] | None:
        """Spread `name` refined (`_follow`), or None when it gives no placement or, with
        `lead` (the best estimate so far), when its longest window is over twice `lead`: a
        one-stage stream's ideal period measured within 0.8-1.3x its longest window on the
        examples and CNNs, so it cannot win. The window is the realized placement's,
        before the refinement (which moves only tasks without crossbars), so a spread left
        out costs no communication replay."""
        window = name == "windows"
        if name in LAYERED or name in WAVES:  # the search's best, then its steps before
            found = layered(name in WAVES)
            k = (WAVES if name in WAVES else LAYERED).index(name)
            base = found[k] if k < len(found) else None
        elif name == "cones":
            base = cone_stream(problem) if opts.replication else None
        else:
            base = spread_stream(problem, opts.replication, window)
        if base is None:
            return None
        if lead is not None:
            span = longest_window(problem, base.schedule.core_of, base.schedule.core_tasks)
            if span > 2 * lead:
                notes.append(f"{WORDS[name]} not materialized: its longest window "
                             f"{span:,} ns is over twice the best estimate {lead:,} ns")
                return None
        if name in (*LAYERED, *WAVES, "cones"):  # their own placement of tasks without crossbars
            return _follow(problem, base, target, opts.replication, lambda: base, replays)
        return _follow(problem, base, target, opts.replication,
                       lambda: spread_stream(problem, opts.replication, window, follow=True),
                       replays)

    for row in rows.values():
        for k, (name, given, fl) in enumerate(row):
            if given is None:
                if name not in made:
                    lead = min((c.estimate_ns for c in cands), default=None)
                    made[name] = _timed(seconds, name, spread, name, lead)
                spread_made = made[name]
                if spread_made is None:
                    continue
                given, fl = spread_made
                row[k] = (name, given, fl)
            if any(_same_placement(c.result, given) for c in cands):
                continue
            say(f"materializing the {name} stream")
            run = _timed(seconds, f"stream.{name}", _run_stream, name, given, problem, build,
                         comp, target, opts, fl)
            cands.append(_Candidate(name, given, run, fl))
    if target.protocol == "pimsim-nn":
        notes.append("no skewed stream body offered: the pimsim-nn export unrolls a stream "
                     "without lags")
    else:
        skewed = _timed(seconds, "stream.skewed", _skewed, cands, problem, build, comp,
                        target, opts, notes)
        if skewed is not None:
            say("materialized the skewed stream")
            cands.append(skewed)
            for row in rows.values():
                row.append(("skewed", skewed.result, None))
    replays.clear()  # the kept ones are the candidates' flows
    kept: dict[str, list[tuple[str, PipelineResult, Replay | None]]] = {
        name: [(n, pr, fl) for n, pr, fl in entries  # the candidates left out are no row's
               if pr is not None and any(_same_placement(c.result, pr) for c in cands)]
        for name, entries in rows.items()}
    members = {row: [_candidate(cands, pr) for _, pr, _ in entries]
               for row, entries in kept.items()}
    _memory_verdict([c.run for c in cands], opts, target)
    assert comp.feeds is not None
    oracle = None
    if opts.simulate:
        say(f"running the ONNX reference on {counted(opts.stream, 'inference')}")
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

        # the latency candidate always (its first inference is the latency-mode latency
        # beside every row), then the others best estimate first while they can win
        lat = _candidate(cands, latency)
        for c in sorted(cands, key=lambda c: (c is not lat, c.estimate_ns)):
            if c is not lat and not any(_may_win(c, mine) for mine in members.values()
                                        if any(x is c for x in mine)):
                continue
            c.verify(seconds)
            _simulate([c.run], ir_inputs(comp.graph, stacked), target, opts, say, seconds,
                      f"simulating {counted(opts.stream, 'inference')} of the {{}} stream", check)
            _simulate_long(c, problem, build, comp, target, opts, say, seconds)
            _drop_beaten_traces(list(members.values()))
    for mine in members.values():  # what each row returns (`_judge`), verified
        min(mine, key=lambda c: c.rank).verify(seconds)
    runs = [_judge(row, kept[row], members[row], _candidate(cands, latency)) for row in kept]
    if "cpsat" in kept:
        runs[-1].interrupted = cp_interrupted
    return Solved(str(model), target, comp, build, bounds, runs, comp.feeds.data,
                  comp.feeds.source, oracle, seconds, layout_costs, list(comp.feeds.bound),
                  notes, mode="pipeline", problem=problem, stream=opts.stream)


@dataclass
class _Candidate:
    """A stream program a solver row may return (`_solve_pipeline`)."""

    name: str
    """"heuristic", "cpsat", "latency" (the latency schedule as one stage), "lanes" (it with
    stem lanes moved off its late cores, `comm.lanes_moved`), "spread" or
    "windows" (`spread_stream` by loads or by windows), "cones" (`cone_stream`), "layered"
    (`layered_stream`)."""
    result: PipelineResult
    run: ScheduleRun
    first: Replay | None
    """The communication model's run `_run_stream` was given."""
    verified: bool = False

    def verify(self, seconds: dict[str, float]) -> None:
        """Verify the program `_run_stream` built (once), its time counted in its stream's
        `seconds`; the errors make the run not ok (so not simulated)."""
        if not self.verified:
            t0 = time.perf_counter()
            self.run.scheduled_errors = [str(d) for d in verify_module(self.run.scheduled)]
            self.verified = True
            key = f"stream.{self.name}"
            seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - t0

    @property
    def estimate_ns(self) -> int:
        assert self.run.stream_estimate is not None
        return self.run.stream_estimate.period_ns

    @property
    def floor_ns(self) -> int:
        assert self.run.stream_estimate is not None
        return self.run.stream_estimate.floor_ns

    @property
    def simulated_ns(self) -> int | None:
        """The simulated period (default options), None when not simulated (or failed)."""
        if self.run.sim is None or not self.run.ok:
            return None
        return self.run.period_ns

    @property
    def rank(self) -> tuple[int, int]:
        """Simulated candidates first, by simulated period; then by estimate."""
        sim = self.simulated_ns
        return (0, sim) if sim is not None else (1, self.estimate_ns)


ESTIMATE_LOSES = 1.25
"""The judge simulates no candidate whose stream estimate is over this many times the best
simulated period: such a candidate wins only if its estimate is over 1.25 times its own
simulated period, and the largest measured is 1.10 (the ResNet block's windows spread;
most are exact, `tests/test_pipeline_judge.py` checks every simulated candidate). Why: a
stream's simulation costs a minute on ResNet-50, where the heuristic's and the spread's
estimates (4.31 and 4.39 ms against the latency stream's simulated 3.24 ms) were simulated
at exactly their estimates."""
LAYERED = ("layered", *(f"layered{k}" for k in range(2, LAYERED_KEPT + 1)))
"""`layered_stream`'s candidates: the search's best, then the steps before it."""
WAVES = ("wave", *(f"wave{k}" for k in range(2, LAYERED_KEPT + 1)))
"""The CP-SAT row's own candidates (`_wave_layered`): `layered_stream` from CP-SAT's cut set
of the wave model, the search's best, then the steps before it."""
SPREADS = ("spread", "windows", "cones", *LAYERED)
"""The one-stage candidates: `spread_stream` by loads or by windows, `cone_stream`,
`layered_stream` (cores split by layer ranges)."""
WORDS = {"heuristic": "the heuristic's partition", "cpsat": "CP-SAT's partition",
         "latency": "the latency schedule as one stage",
         "lanes": "the latency schedule as one stage, stem lanes moved off its late cores",
         "spread": "one stage spread over every core",
         "windows": "one stage spread over every core by windows",
         "cones": "one stage in dependency-cone order",
         "layered": "one stage split by layers",
         "skewed": "a one-stage stream with a skewed body",
         **{name: f"one stage split by layers (the search's step {k} before its best)"
            for k, name in enumerate(LAYERED[1:], 1)},
         "wave": "one stage split by layers from CP-SAT's wave-model cut set",
         **{name: f"one stage split by layers from CP-SAT's wave-model cut set (the search's "
                  f"step {k} before its best)" for k, name in enumerate(WAVES[1:], 1)}}


def _wave_layered(problem: PipelineProblem, opts: SolveOptions,
                  layered: Callable[[bool], list[PipelineResult]]) -> list[PipelineResult]:
    """The CP-SAT row's own layered candidates: `layered_stream` started from CP-SAT's
    optimum of the wave model (`wave_cpsat`; `layered(False)`, the DP's candidates, when it
    is the DP's cut set: the same realization and search), each with CP-SAT's status,
    objective and bound on that model (`_judge` reports them when it returns one). None
    above `LAYERED_MAX_TASKS` tasks (no layered candidate there)."""
    if problem.graph.num_tasks > LAYERED_MAX_TASKS:
        return []
    try:
        out, dp = wave_cpsat(problem, opts.replication, CpSatPipelineOptions(
            time_limit=opts.time_limit, num_workers=opts.workers, seed=opts.seed))
    except PipelineCapacityError:
        return []
    if out.wave is None:
        return []
    # the DP's cut set again (its cores may differ): the DP's candidates, not a second search
    # (on MTCNN R-net the cores alone differed; its search took 224 s again, loaded, and
    # returned the same period)
    found = (layered(False) if out.wave.cuts == dp.cuts else
             layered_stream(problem, opts.replication, opts.stream,
                            wave=wave_partition(out.wave)))
    note = (f"CP-SAT on the wave model ({out.variables} variables, {out.constraints} "
            f"constraints): {out.status} at {out.wave.period_ns:,} ns (the DP's optimum "
            f"{dp.period_ns:,} ns), ranges from groups {list(out.wave.cuts)} on "
            f"{list(out.wave.cores)} cores, the first cut set the layered search realizes")
    return [dataclasses.replace(res, solver="cpsat", status=out.status,
                                objective_ns=out.wave.period_ns, bound_ns=out.bound_ns,
                                model_period_ns=out.wave.period_ns, notes=[note, *res.notes])
            for res in found]


def _judge(row: str, entries: list[tuple[str, PipelineResult, Replay | None]],
           mine: list[_Candidate], latency: _Candidate) -> ScheduleRun:
    """Row `row`'s run: the fastest of its candidates `mine` (one per entry, the first its
    own; ties keep the earlier) under the row's name and solver figures, the status saying
    when another candidate's placement is returned and why; every candidate's figures go to
    the report (`ScheduleRun.candidates`); `latency` is the latency schedule's."""
    k = min(range(len(mine)), key=lambda i: mine[i].rank)
    best, own = mine[k], entries[0][1]
    wave = entries[k][0] in WAVES  # CP-SAT's own on the wave model (`_wave_layered`)
    status = None
    if wave:
        own = entries[k][1]
        assert own.objective_ns is not None
        if own.status.startswith("OPTIMAL") and _period_of(best) != own.objective_ns:
            status = (f"FEASIBLE (simulated at {_period_of(best):,} ns, the wave model's "
                      f"optimum is {own.objective_ns:,} ns): {own.status}")
    elif best is not mine[0]:
        how = "simulates" if mine[0].simulated_ns is not None else "is estimated"
        status = (f"{own.status} ({WORDS[entries[0][0]]} {how} at "
                  f"{_period_of(mine[0]):,} ns, {WORDS[entries[k][0]]} at "
                  f"{_period_of(best):,} ns, which is returned)")
    pr = _as_solver(best.result, own, status=status)
    table = [{"candidate": name, "estimated_period_ns": c.estimate_ns, "floor_ns": c.floor_ns,
              "simulated_period_ns": c.simulated_ns, "returned": i == k}
             for i, ((name, _, _), c) in enumerate(zip(entries, mine, strict=True))]
    run = dataclasses.replace(best.run, name=row, pipeline=pr, result=pr.schedule,
                              candidates=table, wave_model=wave)
    if latency.run.sim is not None:
        rep = latency.run.sim.report
        run.latency_mode_ns = rep.inference_end_ns[0] - rep.inference_start_ns[0]
    return run


def _simulate_long(c: _Candidate, problem: PipelineProblem, build: GraphBuild,
                   comp: Compiled, target: Target, opts: SolveOptions, say: Progress,
                   seconds: dict[str, float]) -> None:
    """Simulate `c`'s program over the stream its estimate's period settled on
    (`raptor.solver.pipeline.stream.settled`) when that is longer than the solve's stream:
    the same placement and communication materialized for that many inferences, timed
    alone (the numerics are the solve's stream's); `c.run.long_run`. Why: a short stream's
    completions can all fall in its fill (the ResNet block's at four MVM units)."""
    est = c.run.stream_estimate
    assert est is not None
    if c.run.sim is None or est.inferences <= opts.stream:
        return
    say(f"simulating {counted(est.inferences, 'inference')} of the {c.name} stream (timing)")
    t0 = time.perf_counter()
    try:
        longer = _run_stream(c.name, c.result, problem, build, comp, target,
                             dataclasses.replace(opts, stream=est.inferences), c.first)
        c.run.long_run = Simulator(longer.scheduled, target).timing(
            dataclasses.replace(opts.sim, trace=False))
    except SimError as e:
        c.run.sim_error = str(e)
    finally:
        seconds[f"sim.{c.name}.long"] = time.perf_counter() - t0


def _may_win(c: _Candidate, mine: list[_Candidate]) -> bool:
    """Whether `c` could still be the fastest of its row's candidates `mine`: its floor
    under their best simulated period and its estimate within `ESTIMATE_LOSES` times it.
    Per row: CP-SAT's row has candidates the heuristic's has not (its wave-model ones),
    and on MTCNN O-net one of them simulated at 88,320 ns, which left the heuristic's row
    its latency stream (173,388 ns) when its layered stream (94,747) was judged against it."""
    best = min((x.simulated_ns for x in mine if x.simulated_ns is not None), default=None)
    return best is None or (c.floor_ns < best and c.estimate_ns <= best * ESTIMATE_LOSES)


SKEW_AT = (0.3, 0.4, 0.5, 0.6, 0.7)
"""Where `_skewed` tries the lag-1 threshold, as fractions of a base candidate's planned
makespan (tasks planned to start after it serve the previous inference)."""
SKEW_BASES = 3
"""How many one-stage candidates (best estimates first) `_skewed` skews: at most
`SKEW_BASES` * len(`SKEW_AT`) estimates and one materialization."""


def _skewed(cands: list[_Candidate], problem: PipelineProblem, build: GraphBuild,
            comp: Compiled, target: Target, opts: SolveOptions, notes: list[str]
            ) -> _Candidate | None:
    """A skewed (software-pipelined) body for one of the `SKEW_BASES` one-stage candidates
    with the best estimates whose receives all fit at the iteration's start (no flow
    control, no spilling): lag 1 for the tasks planned after a threshold (`skew_lags`, at
    each of `SKEW_AT`); the skew whose stream estimate (the base's merged runs of one lag
    kept) is best is materialized, and offered when its estimate beats every candidate's
    and its local memory (carried values included) fits. Why: a core holding an early and
    a late task of one inference has its window, not its load, as its period; with the
    late tasks on the inference before, its iteration is nearer its load."""
    bases = sorted((c for c in cands if len(c.result.stages) == 1 and c.run.ok
                    and c.run.flow is not None and not c.run.flow.tight and not c.run.spill_ns
                    and c.run.stream is not None), key=lambda c: c.estimate_ns)[:SKEW_BASES]
    if not bases:
        return None
    g = build.graph
    best: tuple[int, Skew, _Candidate] | None = None
    for base in bases:
        pr, info = base.result, base.run.stream
        assert info is not None
        sch = pr.schedule
        makespan = max(sch.end_ns, default=0)
        for frac in SKEW_AT:
            skew = skew_lags(sch.start_ns, int(frac * makespan))
            if all(skew.lag) or not any(skew.lag):
                continue
            merged = [r for r in info.merged if len({skew.lag[t] for t in r.lanes}) == 1]
            est = stream_estimate(g, target, sch.core_of,
                                  skew.times(sch.core_of, sch.start_ns, sch.end_ns)[0],
                                  pr.stage_of_task, StreamInfo(merged=merged), opts.stream,
                                  RING, 1, ideal=False, lag=skew.lag,
                                  settle=False).period_ns
            if best is None or est < best[0]:
                best = (est, skew, base)
    lead = min(c.estimate_ns for c in cands)
    if best is None or best[0] >= lead:
        if best is not None:
            notes.append(f"the skewed body of {WORDS[best[2].name]} is estimated at "
                         f"{best[0]:,} ns, not under the best estimate {lead:,} ns: not "
                         "offered")
        return None
    base = best[2]
    pr = base.result
    skewed = dataclasses.replace(pr, skew=best[1], notes=[*pr.notes, (
        f"skewed body: tasks planned from {best[1].shift_ns:,} ns on serve the previous "
        "inference")])
    run = _run_stream("skewed", skewed, problem, build, comp, target, opts, base.run.flow)
    assert run.memory is not None and run.stream_estimate is not None
    if run.memory.over_capacity():
        notes.append(f"the skewed body of {WORDS[base.name]} does not fit local memory "
                     "(its carried values): not offered")
        return None
    if run.stream_estimate.period_ns >= lead:
        notes.append(f"the skewed body of {WORDS[base.name]} materialized is estimated at "
                     f"{run.stream_estimate.period_ns:,} ns, not under the best estimate "
                     f"{lead:,} ns: not offered")
        return None
    return _Candidate("skewed", skewed, run, base.run.flow)


def _drop_beaten_traces(rows: list[list[_Candidate]]) -> None:
    """Free the trace of every simulated candidate no row can return any more: in each row
    that has it, a simulated candidate ranks before it (`_judge`: faster, or as fast and
    earlier). A simulated period never changes, so a beaten candidate stays beaten. Why:
    a stream's trace holds every op and message of every inference (GiBs on ResNet-50),
    and only a returned run's is written."""
    for c in {id(c): c for row in rows for c in row}.values():
        sim = c.simulated_ns
        if sim is None or c.run.sim is None or not c.run.sim.trace.spans:
            continue
        places = [(mine, next(i for i, y in enumerate(mine) if y is c))
                  for mine in rows if any(y is c for y in mine)]
        if all(any(y.simulated_ns is not None and (y.simulated_ns, j) < (sim, i)
                   for j, y in enumerate(mine) if y is not c) for mine, i in places):
            c.run.sim.trace = Trace()


def _candidate(cands: list[_Candidate], pr: PipelineResult) -> _Candidate:
    """The candidate with `pr`'s placement."""
    return next(c for c in cands if _same_placement(c.result, pr))


def _period_of(c: _Candidate) -> int:
    return c.simulated_ns if c.simulated_ns is not None else c.estimate_ns


def _same_placement(a: PipelineResult, b: PipelineResult) -> bool:
    return a.schedule.core_of == b.schedule.core_of and \
        a.schedule.core_tasks == b.schedule.core_tasks and a.skew == b.skew


def _as_solver(pr: PipelineResult, solver: PipelineResult, status: str | None = None
               ) -> PipelineResult:
    """`pr`'s placement with `solver`'s name, status, bound, objective and model value (a
    solver row returning a placement another candidate produced)."""
    if pr is solver and status is None:
        return pr
    st = status if status is not None else solver.status
    notes = list(solver.notes) + [n for n in pr.notes if n not in solver.notes]
    return dataclasses.replace(
        pr, solver=solver.solver, status=st, bound_ns=solver.bound_ns,
        objective_ns=solver.objective_ns, model_period_ns=solver.model_period_ns,
        solve_seconds=solver.solve_seconds, notes=notes,
        schedule=dataclasses.replace(
            pr.schedule, solver=solver.schedule.solver, status=st,
            bound_ns=solver.schedule.bound_ns, objective_ns=solver.schedule.objective_ns,
            solve_seconds=solver.schedule.solve_seconds, notes=notes))


def _follow(problem: PipelineProblem, pr: PipelineResult, target: Target,
            replication: bool, moved_by: Callable[[], PipelineResult] | None = None,
            replays: dict[tuple[Any, ...], Replay] | None = None
            ) -> tuple[PipelineResult, Replay | None]:
    """`pr`, or its partition with tasks without crossbars after their last producer
    (`follow_producers`, or `moved_by` for a placement realized its own way) when local
    memory is tight (the communication model cannot post every receive at the start on
    some core) and that replays faster under the flow control, as latency mode's PEFT
    refinement does; and the kept one's replay (the first round of `_fit_memory`).
    `replays`: replays by placement, shared between calls (two candidates often realize
    one placement: on ResNet-18 the spread by loads is the heuristic's one stage)."""
    g = problem.graph
    if g.memory is None:
        return pr, None

    def replayed(sch: MergeScheduleResult) -> Replay:
        key = (tuple(sch.core_of), tuple(map(tuple, sch.core_tasks)), tuple(sch.start_ns))
        rep = replays.get(key) if replays is not None else None
        if rep is None:
            rep = replay(g, target, sch.core_of, sch.core_tasks, sch.start_ns)
            if replays is not None:
                replays[key] = rep
        return rep

    before = replayed(pr.schedule)
    if not before.tight:
        return pr, before
    moved = follow_producers(problem, pr, replication) if moved_by is None else moved_by()
    after = replayed(moved.schedule)
    return (moved, after) if after.makespan_ns < before.makespan_ns else (pr, before)


def _run_stream(name: str, pr: PipelineResult, problem: PipelineProblem, build: GraphBuild,
                comp: Compiled, target: Target, opts: SolveOptions,
                first: Replay | None = None) -> ScheduleRun:
    """Validate a pipeline result, materialize its stream program with the stage-internal
    receives and sends where the communication model placed them to fit local memory
    (`_fit_memory`, as in latency mode), plan its local memory and estimate its period.
    The program is not verified here: the judge verifies the candidates it simulates or
    returns (`_Candidate.verify`; a stream program's verification is a fifth of its
    materialization on ResNet-18)."""
    g = build.graph
    sch = pr.schedule
    violations = validate_pipeline(g, target, pr, problem)
    if pr.skew is not None:  # one stage, every receive at the iteration's start (`_skewed`;
        # `first`: its base's communication model run, the report's message figures)
        start, end = pr.skew.times(sch.core_of, sch.start_ns, sch.end_ns)
        view = StreamView(sch.core_of, start, end, pr.stage_of_task, pr.skew.lag)
        scheduled, info = materialize_stream(comp.module, build.projection, build.outputs,
                                             view, opts.stream)
        if opts.compile.print_ir is not None:
            opts.compile.print_ir("materialize", scheduled)
        est = stream_estimate(g, target, sch.core_of, start, pr.stage_of_task, info,
                              opts.stream, RING, len(pr.stages), lag=pr.skew.lag)
        return ScheduleRun(name, sch, est.ends[0] - est.starts[0], violations, scheduled, [],
                           ideal_estimate_ns=est.ends[0] - est.starts[0], pipeline=pr,
                           stream=info, stream_estimate=est,
                           memory=plan_memory(scheduled, target), flow=first)
    view = StreamView(sch.core_of, sch.start_ns, sch.end_ns, pr.stage_of_task)
    infos: list[StreamInfo] = []

    def make(flow: Flow) -> Module:  # the stream estimate plays messages one by one
        scheduled, info = materialize_stream(comp.module, build.projection, build.outputs,
                                             view, opts.stream,
                                             flow=dataclasses.replace(flow, merged={}))
        infos.append(info)
        return scheduled

    ranges, order = pr.core_range, pr.send_order

    def adjust(rep: Replay) -> Replay:  # a layered stream's sends (`layered_stream`)
        assert ranges is not None
        moved = defer_sends(rep, g, sch.core_of, sch.core_tasks, ranges)
        # ordered by posts only while every receive is posted at the start (`rank_by_posts`)
        return moved if order is None or moved.tight else ordered_sends(moved, order)

    fit = _fit_memory(build, target, sch, make, first, opts.compile.print_ir,
                      spills=not opts.allow_memory_overflow,
                      adjust=None if ranges is None else adjust, verify=False)
    est = stream_estimate(fit.charged, target, sch.core_of, sch.start_ns, pr.stage_of_task,
                          infos[-1], opts.stream, RING, len(pr.stages), fit.flow)
    return ScheduleRun(name, sch, est.ends[0] - est.starts[0], violations, fit.scheduled,
                       fit.errors, ideal_estimate_ns=est.ends[0] - est.starts[0],
                       pipeline=pr, stream=infos[-1], stream_estimate=est, memory=fit.memory,
                       flow=fit.flow, materializations=fit.rounds, spill=fit.spill,
                       spill_ns=fit.spill_ns)


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
    held: dict[tuple[int, ...], int] = {}  # summed per route first: 10^5 sends, few routes
    for prog in sim.program.cores.values():
        for route in (ins.route for ins in prog if ins.kind == SEND):
            held[route.links] = held.get(route.links, 0) + route.serial_ns
    busy: Counter[int] = Counter()
    for links, ns in held.items():
        busy.update(dict.fromkeys(links, ns))
    return [busy[link] for link in Network(target, "raptor").links()]


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
    period = run.period_ns
    ideal = run.ideal.period_ns(fill) if run.ideal is not None else None
    lat = rep.inference_latency_ns() if rep is not None else []
    assert s.problem is not None
    bound = s.problem.period_bound(True)
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
        "period_lower_bound_ns": bound,
        "efficiency": round(bound / period, 4) if period else None,
        "latency_mode_ns": run.latency_mode_ns,
        "candidates": run.candidates,
        "solver_period_ns": pr.period_ns,
        "model_period_ns": pr.model_period_ns,
        "wave_period_ns": pr.wave_period_ns,
        "solver_memory_service_ns": pr.memory_service_ns,
        "objective_ns": pr.objective_ns,
        "bound_ns": pr.bound_ns,
        "bound_of": ("the wave model (docs/pipeline.md §3)" if run.wave_model else
                     "the period model (docs/pipeline.md §2)"),
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
        "period_inferences": est.inferences,
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
    its computes alone need more than the memory whatever the order of its receives and
    whatever is spilled (the communication model's `needed_bytes`), or neither placing the
    receives nor spilling to shared memory freed enough."""
    assert run.memory is not None
    lines = run.memory.over_summary()
    top = run.memory.peak
    if not lines or top is None or top.peak_bytes <= target.local_memory_bytes:
        return lines
    need = run.flow.needed_bytes[top.core] if run.flow and run.flow.needed_bytes else 0
    if need > target.local_memory_bytes:
        why = (f"; its computes alone hold about {need:,} bytes at once there, whatever the "
               "order of its receives and whatever is spilled to shared memory (a --target "
               "file with more local_memory_bytes fits it)")
    else:
        builds = counted(run.materializations, "build")
        why = (f"; neither placing its receives ({builds} of the program) nor spilling to "
               "shared memory freed enough (a --target file with more local_memory_bytes "
               "fits it)")
    return [lines[0] + why, *lines[1:]]


def _local_memory(run: ScheduleRun) -> dict[str, Any] | None:
    """The memory plan's figures (`MemoryPlan.to_dict`) and what spilling to shared memory
    did: bytes stored and loaded, the shared-memory service the spills take per core
    (`ScheduleRun.spill_ns`), and the cores it could not fit."""
    if run.memory is None:
        return None
    out = run.memory.to_dict()
    sp = run.spill
    per_core = {} if sp is None else {
        str(c): {"stores": cs.stores, "loads": cs.loads, "stored_bytes": cs.stored_bytes,
                 "loaded_bytes": cs.loaded_bytes, "added_ns": run.spill_ns.get(c, 0)}
        for c, cs in sorted(sp.cores.items())}
    out["spill"] = {"bytes": sp.bytes if sp else 0,
                    "stores": sum(c["stores"] for c in per_core.values()),
                    "loads": sum(c["loads"] for c in per_core.values()),
                    "added_ns": sum(run.spill_ns.values()),
                    "unfit_cores": sp.unfit if sp else [], "per_core": per_core}
    return out


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
    walked: dict[int, tuple[int, int]] = {}
    for run in s.runs:
        res = run.result
        counts = walked.get(id(run.scheduled))
        if counts is None:  # one walk per program (schedules may share one)
            counts = walked[id(run.scheduled)] = _compute_counts(run.scheduled)
        numerics = _numerics(run.numerics) if run.numerics is not None else None
        entry: dict[str, Any] = {
            "estimate_ns": run.estimate_ns,
            "ideal_estimate_ns": run.ideal_estimate_ns,
            "plan_ns": res.makespan_ns,
            "simulated_ns": run.sim.report.latency_ns if run.sim else None,
            "simulated_protocol": "raptor" if run.sim else None,
            "ideal_simulated_ns": run.ideal_ns,
            "communication": _communication(run),
            "period_ns": None,
            "solve_seconds": round(res.solve_seconds, 4),
            **dict(zip(("status", "status_detail"), schedule_status(
                res.status, run.pipeline.notes if run.pipeline else res.notes,
                run.interrupted), strict=True)),
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
            "local_memory": _local_memory(run),
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
        "protocol": s.target.protocol,
        "mode": s.mode,
        "tasks": g.num_tasks,
        "edges": len(g.edges),
        "crossbars": len(g.distinct_weights()),
        "groups": len(s.build.tiles),
        "mvm_units": s.target.mvm_units,
        "lower_bound_ns": s.bounds.makespan_ns,
        **({"period_lower_bound_ns": s.problem.period_bound(True), "inferences": s.stream,
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
