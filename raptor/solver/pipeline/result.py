"""PipelineResult: what a pipeline solver returns and what stream materialization reads,
and an independent validator for it (docs/pipeline.md describes every field)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from raptor.solver.costs import shared_read_ns, shared_write_ns
from raptor.solver.graph import ComputeGraph
from raptor.solver.pipeline.model import Partition
from raptor.solver.pipeline.problem import PipelineProblem
from raptor.solver.pipeline.realize import Boundary, Placement, Skew, asap_starts
from raptor.solver.schedule import MergeScheduleResult
from raptor.target import Target


@dataclass(frozen=True)
class StageInfo:
    index: int
    groups: list[int]
    cores: list[int]  # physical core ids, in placement order
    span_ns: int  # max(load_ns, path_ns): the stage's share of the period
    load_ns: int  # busiest core of the stage after packing
    path_ns: int  # longest dependency chain inside the stage
    completion_ns: int  # one inference across the stage on its cores (list schedule)
    crossbars: int  # tiles resident on the stage's cores, replicas included
    work_ns: int


@dataclass(frozen=True)
class Replication:
    group: int
    factor: int  # most copies of any of the group's tiles (1: none)
    tiles: int  # the group's distinct tiles
    extra_crossbars: int  # crossbars the copies occupy beyond ``tiles``


@dataclass(frozen=True)
class GroupInfo:
    id: int
    tasks: list[int]
    batches: list[int]
    work_ns: int
    crossbars: int


@dataclass
class PipelineResult:
    solver: str  # "pipeline" (heuristic) | "dp" | "cpsat"
    status: str
    schedule: MergeScheduleResult  # core per task, per-core order, stage_of_core
    stage_of_task: list[int]
    stages: list[StageInfo]
    groups: list[GroupInfo]
    period_ns: int  # max(max stage span, memory_service_ns), after packing and placement
    wave_period_ns: int  # max(max stage completion, memory): each stage one inference at a time
    model_period_ns: int  # the solvers' common model value of this partition (pre-packing)
    memory_service_ns: int  # serialized shared-memory service per inference, baseline incl.
    baseline_memory_ns: int  # the function outputs (inputs are read inside task bodies)
    boundaries: list[Boundary]
    replicated: list[Replication]
    replication: list[int]  # the model's factor per group (the realization may copy more)
    crossbars_used: int
    crossbars_available: int
    bound_ns: int | None = None  # proven lower bound on the model period (None: heuristic)
    objective_ns: int | None = None  # the solver's own objective (CP-SAT / DP model value)
    solve_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    core_range: list[int] | None = None
    """A layered stream's layer range per core (-1: unused; `layered_stream`): a message
    between ranges is sent at the end of its producer's iteration (`defer_sends`)."""
    send_order: dict[tuple[int, int], int] | None = None
    """A layered stream's send rank per message (fragment, receiving core) where
    `rank_by_posts` ordered them (`layered_stream`); None: the communication model's."""
    skew: Skew | None = None
    """Lags of a skewed stream body (`skewed_stream`); None: every task at lag 0."""

    @property
    def throughput_per_s(self) -> float:
        return 1e9 / self.period_ns if self.period_ns else 0.0

    @property
    def latency_ns(self) -> int:
        """One inference alone through the placed program (NoC transfers on every edge)."""
        return self.schedule.makespan_ns

    @property
    def partition(self) -> Partition:
        """The partition (cuts, cores per stage, replication per group) this result realizes."""
        return Partition(tuple(s.groups[0] for s in self.stages),
                         tuple(len(s.cores) for s in self.stages), tuple(self.replication))

    def stage_table(self) -> list[dict[str, Any]]:
        """The report's ``stages`` list: ``{groups, cores, span_ns, crossbars}`` and more."""
        return [asdict(s) for s in self.stages]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throughput_per_s": self.throughput_per_s,
                "latency_ns": self.latency_ns}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def build_result(problem: PipelineProblem, pl: Placement, *, solver: str, status: str,
                 model_period: int, bound_ns: int | None = None,
                 objective_ns: int | None = None, solve_seconds: float = 0.0,
                 notes: list[str] | None = None) -> PipelineResult:
    graph, target = problem.graph, problem.target
    starts = asap_starts(problem, pl.core_of, pl.order)
    sched = MergeScheduleResult.build(
        graph, target, pl.core_of, starts, solver=solver, status=status, bound_ns=bound_ns,
        objective_ns=objective_ns, solve_seconds=solve_seconds, model="pipeline",
        notes=[*(notes or []), *pl.recovery], communication=False)
    stage_of_core = sched.stage_of_core = [-1] * target.num_cores
    for s, cores in enumerate(pl.stage_cores):
        for c in cores:
            stage_of_core[c] = s
    G = problem.num_groups
    stages = [StageInfo(
        index=s, groups=list(range(j, i)), cores=list(pl.stage_cores[s]),
        span_ns=pl.stage_span[s], load_ns=pl.stage_load[s], path_ns=pl.stage_path[s],
        completion_ns=pl.stage_completion[s], crossbars=pl.stage_crossbars[s],
        work_ns=problem.work(j, i)) for s, (j, i) in enumerate(pl.partition.ranges(G))]
    holders: defaultdict[int, set[int]] = defaultdict(set)
    for t, c in enumerate(pl.core_of):
        for w in graph.tasks[t].weights:
            holders[w].add(c)
    copies = [(g, [len(holders[w]) for w in g.tiles]) for g in problem.groups if g.tiles]
    replicated = [Replication(g.id, max(n), len(g.tiles), sum(n) - len(g.tiles))
                  for g, n in copies if max(n) > 1]
    return PipelineResult(
        solver=solver, status=status, schedule=sched, stage_of_task=list(pl.stage_of_task),
        stages=stages,
        groups=[GroupInfo(g.id, list(g.tasks), list(g.batches), g.work, g.crossbars)
                for g in problem.groups],
        period_ns=pl.period_ns, wave_period_ns=pl.wave_period_ns, model_period_ns=model_period,
        memory_service_ns=pl.memory_ns,
        baseline_memory_ns=problem.baseline_ns, boundaries=list(pl.boundaries),
        replicated=replicated, replication=list(pl.partition.replication),
        crossbars_used=sum(pl.stage_crossbars),
        crossbars_available=target.crossbar_capacity, bound_ns=bound_ns,
        objective_ns=objective_ns, solve_seconds=solve_seconds, notes=list(sched.notes))


def validate_pipeline(graph: ComputeGraph, target: Target, result: PipelineResult,
                      problem: PipelineProblem | None = None) -> list[str]:
    """Violations of a pipeline result (empty: valid), re-derived from graph and target (the
    ``_check_*`` helpers) and the period recomputed; with ``problem``, also the shared-memory
    service from its publications."""
    graph.freeze()
    n, P = graph.num_tasks, target.num_cores
    sch = result.schedule
    if len(sch.core_of) != n or len(result.stage_of_task) != n:
        return [f"result covers {len(sch.core_of)} tasks, graph has {n}"]
    soc = sch.stage_of_core
    if soc is None or len(soc) != P:
        return ["schedule has no stage_of_core for every core"]
    errors = _check_stages(graph, target, result, soc)
    errors += _check_orders(graph, result)
    errors += _check_figures(graph, target, result)
    if problem is not None:
        errors += _check_memory(target, result, problem)
    want = max([*(s.span_ns for s in result.stages), result.memory_service_ns])
    if result.period_ns != want:
        errors.append(f"period {result.period_ns} != max(stage spans, memory) = {want}")
    return errors


def _check_stages(graph: ComputeGraph, target: Target, result: PipelineResult,
                  soc: list[int]) -> list[str]:
    """Each core in one stage (``soc``: stage of core), at most P cores, every task on a
    core of its stage, and stages ordered along every dependency."""
    P, sot = target.num_cores, result.stage_of_task
    errors: list[str] = []
    stage_cores: dict[int, set[int]] = {}
    for s in result.stages:
        for c in s.cores:
            if not 0 <= c < P:
                errors.append(f"stage {s.index}: core {c} outside 0..{P - 1}")
            elif soc[c] != s.index:
                errors.append(f"core {c} listed in stage {s.index} but stage_of_core says "
                              f"{soc[c]}")
        if s.index in stage_cores:
            errors.append(f"stage {s.index} listed twice")
        stage_cores[s.index] = set(s.cores)
    for (a, ca), (b, cb) in itertools.combinations(stage_cores.items(), 2):
        if ca & cb:
            errors.append(f"stages {a} and {b} share cores {sorted(ca & cb)}")
    if sum(len(c) for c in stage_cores.values()) > P:
        errors.append(f"stages use {sum(len(c) for c in stage_cores.values())} cores > {P}")
    for t in range(graph.num_tasks):
        st, c = sot[t], result.schedule.core_of[t]
        if c not in stage_cores.get(st, set()):
            errors.append(f"task {t} ({graph.tasks[t].name}) in stage {st} runs on core {c}, "
                          f"not a core of its stage")
    for e in graph.edges:
        if sot[e.src] > sot[e.dst]:
            errors.append(f"edge {e.src} -> {e.dst} goes from stage {sot[e.src]} back to stage "
                          f"{sot[e.dst]}")
    return errors


def _check_orders(graph: ComputeGraph, result: PipelineResult) -> list[str]:
    """The per-core orders list every task once, on its core, after its same-core producers."""
    sch = result.schedule
    errors: list[str] = []
    pos: dict[int, tuple[int, int]] = {}
    for c, tasks in enumerate(sch.core_tasks):
        for k, t in enumerate(tasks):
            if sch.core_of[t] != c:
                errors.append(f"task {t} listed on core {c} but assigned core {sch.core_of[t]}")
            pos[t] = (c, k)
    if len(pos) != graph.num_tasks:
        errors.append(f"per-core orders list {len(pos)} of {graph.num_tasks} tasks")
    for e in graph.edges:
        cu, ku = pos.get(e.src, (-1, -1))
        cv, kv = pos.get(e.dst, (-2, -2))
        if cu == cv and ku > kv:
            errors.append(f"core {cu} runs task {e.dst} before its producer {e.src}")
    return errors


def _check_figures(graph: ComputeGraph, target: Target, result: PipelineResult) -> list[str]:
    """Crossbar capacity per core, and the reported paths, loads, spans and crossbars
    recomputed from the tasks."""
    n, P, cap = graph.num_tasks, target.num_cores, target.crossbars_per_core
    errors: list[str] = []
    loads, xbars = [0] * P, 0
    for c, tasks in enumerate(result.schedule.core_tasks):
        loads[c] = sum(graph.tasks[t].cost_ns for t in tasks)
        tiles = frozenset().union(*(graph.tasks[t].weights for t in tasks))
        xbars += len(tiles)
        if len(tiles) > cap:
            errors.append(f"core {c}: {len(tiles)} distinct crossbar tiles > capacity {cap}")
    path = [0] * n
    for t in graph.topo_order:
        st = result.stage_of_task[t]
        path[t] = graph.tasks[t].cost_ns + max(
            (path[u] for u, _ in graph.preds[t] if result.stage_of_task[u] == st), default=0)
    for s in result.stages:
        longest = max((path[t] for t in range(n) if result.stage_of_task[t] == s.index), default=0)
        if longest != s.path_ns:
            errors.append(f"stage {s.index}: reported path {s.path_ns} ns, tasks chain "
                          f"{longest} ns")
        load = max((loads[c] for c in s.cores), default=0)
        if load != s.load_ns:
            errors.append(f"stage {s.index}: reported load {s.load_ns} ns, cores carry {load}")
        if s.span_ns != max(s.load_ns, s.path_ns):
            errors.append(f"stage {s.index}: span {s.span_ns} != max(load, path)")
    if xbars != result.crossbars_used:
        errors.append(f"reported {result.crossbars_used} crossbars, cores hold {xbars}")
    return errors


def _check_memory(target: Target, result: PipelineResult, problem: PipelineProblem) -> list[str]:
    """The shared-memory service recomputed from the problem's publications."""
    core_of = result.schedule.core_of
    mem = problem.baseline_ns
    pairs: set[tuple[int, int]] = set()
    for p in problem.publications:
        sp = result.stage_of_task[p.producer]
        later = [(v, nb) for v, nb in p.consumers if result.stage_of_task[v] > sp]
        if later:
            mem += shared_write_ns(target, p.bytes) + sum(shared_read_ns(target, nb)
                                                          for _, nb in later)
            pairs |= {(core_of[p.producer], core_of[v]) for v, _ in later}
    # READY/FREE: a wait and a signal on each side of every (producer, consumer) pair
    mem += len(pairs) * 2 * (shared_read_ns(target, 4) + shared_write_ns(target, 4))
    if mem != result.memory_service_ns:
        return [f"reported shared-memory service {result.memory_service_ns} ns, "
                f"publications need {mem}"]
    return []
