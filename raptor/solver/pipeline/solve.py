"""Entry points: the spec's heuristic, the exact DP and the CP-SAT model, each returning a
:class:`PipelineResult` realized by the same packing and placement (one ruler for all)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from raptor.solver.pipeline.cpsat_model import CpSatPipelineOptions, solve_cpsat
from raptor.solver.pipeline.dp import exact_dp
from raptor.solver.pipeline.heuristic import run_heuristic
from raptor.solver.pipeline.model import (
    Partition,
    allocate,
    evaluate_partition,
    stage_kmin,
    stage_time,
)
from raptor.solver.pipeline.pack import PackFailure
from raptor.solver.pipeline.problem import PipelineCapacityError, PipelineProblem
from raptor.solver.pipeline.realize import Placement, asap_starts, measure, realize
from raptor.solver.pipeline.result import PipelineResult, build_result
from raptor.solver.schedule import MergeScheduleResult


def heuristic_pipeline(problem: PipelineProblem, replication: bool = True) -> PipelineResult:
    """The spec's pipeline heuristic (phase 1, second search, guarded selection)."""
    out = run_heuristic(problem, replication)
    return build_result(problem, out.placement, solver="pipeline", status="HEURISTIC",
                        model_period=out.model_period, bound_ns=problem.lower_bound(replication),
                        objective_ns=out.model_period, solve_seconds=out.seconds, notes=out.notes)


def follow_producers(problem: PipelineProblem, result: PipelineResult,
                     replication: bool = True) -> PipelineResult:
    """``result``'s partition realized again with every task without crossbars right after
    its last same-stage producer, on its core (`realize(..., follow=True)`). Why: where local
    memory is tight, the fragments such a task (a partial-sum addition, a residual add)
    reads wait in its core's memory, and the flow control then holds sends and posts
    receives late (on ResNet-18 that slowed its one-stage stream by a third); the caller
    keeps whichever replays faster."""
    pl = realize(problem, result.partition, replication, follow=True)
    assert not isinstance(pl, PackFailure)  # the same homes as the result's realization
    return build_result(problem, pl, solver=result.solver, status=result.status,
                        model_period=result.model_period_ns, bound_ns=result.bound_ns,
                        objective_ns=result.objective_ns, solve_seconds=result.solve_seconds,
                        notes=[*result.notes, "tasks without crossbars follow their last "
                               "producer on its core"])


def latency_stream(problem: PipelineProblem, schedule: MergeScheduleResult) -> PipelineResult:
    """The latency schedule run as a stream: one stage on every core, the latency schedule's
    cores and per-core order, so a core starts inference n + 1 once it has finished its part
    of inference n (as far as the dependencies allow). Why: it is a candidate of every
    pipeline solver, so pipeline mode is never slower than looping latency mode."""
    P, G = problem.num_cores, problem.num_groups
    part = Partition((0,), (P,), (1,) * G)
    order = [list(ts) for ts in schedule.core_tasks]
    core_of = list(schedule.core_of)
    starts = asap_starts(problem, core_of, order)
    dur = problem.graph.durations(core_of)
    completion = max((s + d for s, d in zip(starts, dur, strict=True)), default=0)
    pl = measure(problem, part, [list(range(P))], core_of, order, [0] * len(core_of),
                 [completion])
    pl.memory_ns = problem.baseline_ns
    return build_result(problem, pl, solver=schedule.solver, status="LATENCY",
                        model_period=evaluate_partition(problem, part).period_ns,
                        bound_ns=None, solve_seconds=schedule.solve_seconds,
                        notes=[f"the {schedule.solver} latency schedule as one stage"])


def spread_stream(problem: PipelineProblem, replication: bool = True, window: bool = False,
                  follow: bool = False) -> PipelineResult:
    """One stage on every core, each core kept within the least time the model allows
    without the dependency path (work / cores, the heaviest group at its replication): its
    load, or with `window` its window (first task's start to last task's end, cores in use
    before fresh ones) at 1, 1.25, 1.5 or 2 times that time, whichever placement has the
    shortest longest window. Why: a stage's cores run their loops on successive inferences
    as far as the dependencies allow, so a stream's period follows its busiest core and its
    cores' windows, not the stage's path (docs/pipeline.md §2). Both are judge candidates of
    every pipeline row: which is faster depends on the contention the windows leave out.
    `follow`: as `follow_producers` (where local memory is tight)."""
    t0 = time.perf_counter()
    P, G = problem.num_cores, problem.num_groups
    T = max(stage_time(problem, 0, G, P, replication, path=False),
            problem.period_bound(replication))
    _, r = stage_kmin(problem, 0, G, T, replication, path=False)
    part = Partition((0,), (P,), tuple(int(x) for x in r))
    best: tuple[int, Placement, str] | None = None
    for limit in [T * k // 4 for k in (4, 5, 6, 8)] if window else [T]:
        pl = realize(problem, part, replication, follow=follow, limits=[limit], window=window)
        if isinstance(pl, PackFailure):
            raise PipelineCapacityError(pl.message)
        w = longest_window(problem, pl.core_of, pl.order)
        if best is None or w < best[0]:
            best = (w, pl, f"{'windows' if window else 'loads'} within {limit} ns")
    assert best is not None
    return build_result(problem, best[1], solver="spread", status="SPREAD", model_period=T,
                        bound_ns=None, objective_ns=T, solve_seconds=time.perf_counter() - t0,
                        notes=[f"one stage on {P} cores, {best[2]}: longest window "
                               f"{best[0]} ns"])


def longest_window(problem: PipelineProblem, core_of: Sequence[int],
                   order: Sequence[Sequence[int]]) -> int:
    """The longest time from a core's first task's start to its last task's end, one
    inference alone (`asap_starts`): what a one-stage stream's period cannot go below."""
    start = asap_starts(problem, core_of, order)
    dur = problem.graph.durations(core_of)
    return max((start[ts[-1]] + dur[ts[-1]] - start[ts[0]] for ts in order if ts), default=0)


def _realize_cuts(problem: PipelineProblem, cuts: tuple[int, ...], replication: bool
                  ) -> tuple[Partition, Placement]:
    part = allocate(problem, cuts, replication)
    if part is None:
        raise PipelineCapacityError(f"cuts {cuts} fit no core allocation")
    pl = realize(problem, part, replication)
    if isinstance(pl, PackFailure):
        raise PipelineCapacityError(pl.message)
    return part, pl


def dp_pipeline(problem: PipelineProblem, replication: bool = True) -> PipelineResult:
    """The exact DP's optimum of the model, realized."""
    t0 = time.perf_counter()
    res = exact_dp(problem, replication)
    part, pl = _realize_cuts(problem, res.cuts, replication)
    model = evaluate_partition(problem, part).period_ns
    return build_result(problem, pl, solver="dp", status="OPTIMAL", model_period=model,
                        bound_ns=res.period_ns, objective_ns=res.period_ns,
                        solve_seconds=time.perf_counter() - t0,
                        notes=[f"exact over {problem.num_groups} groups ({res.rounds} rounds of "
                               f"eight-level DP)"])


def cpsat_pipeline(problem: PipelineProblem, replication: bool = True,
                   options: CpSatPipelineOptions | None = None,
                   initial: PipelineResult | None = None) -> PipelineResult:
    """CP-SAT on the model, hinted with ``initial`` (default: the heuristic). When its
    partition realizes worse than the hint's after packing, the hint's realization is kept
    (said in the notes), so the CP-SAT period never exceeds the heuristic's."""
    opts = options or CpSatPipelineOptions()
    t0 = time.perf_counter()
    if initial is None:
        initial = heuristic_pipeline(problem, replication)
    hint = initial.partition
    notes: list[str] = []
    dp_value = None
    if opts.dp_bound:
        dp_value = exact_dp(problem, replication).period_ns
        notes.append(f"period bounded below by the exact DP's optimum {dp_value} ns")
    out = solve_cpsat(problem, replication, hint, opts, dp_value)
    notes.append(f"model: {out.variables} variables, {out.constraints} constraints")
    hint_model = evaluate_partition(problem, hint).period_ns
    pl: Placement | PackFailure | None = None
    if out.cuts is None:
        notes.append(f"no CP-SAT solution within {opts.time_limit:g} s; hint returned")
    else:
        part, pl = _realize_cuts(problem, out.cuts, replication)
        model = evaluate_partition(problem, part).period_ns
        if pl.period_ns > initial.period_ns:
            notes.append(f"CP-SAT's partition realizes at {pl.period_ns} ns after packing, "
                         f"the hint at {initial.period_ns} ns: the hint's realization is kept")
            pl = None
    if pl is None:
        pl, model = realize(problem, hint, replication), hint_model
    assert not isinstance(pl, PackFailure)  # the hint realized before
    return build_result(problem, pl, solver="cpsat", status=out.status, model_period=model,
                        bound_ns=out.bound_ns, objective_ns=out.objective_ns,
                        solve_seconds=time.perf_counter() - t0, notes=notes)
