"""The scheduling spec's pipeline heuristic ("Pipeline scheduling", spec 001), all of it
(docs/pipeline.md §3): phase 1, ordered packing with a dependency tail and nominal movement
volumes (:func:`phase1`); the second search A/B over compute/memory trade-offs
(:func:`second_search`); realization of the five candidates and guarded selection
(:func:`select`). The guards limit compute imbalance; their sums do not predict simulated
periods.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from raptor.solver.pipeline.dp import LEVELS, level_dp
from raptor.solver.pipeline.model import (
    Partition,
    allocate,
    evaluate_partition,
    least_feasible,
    rmin,
)
from raptor.solver.pipeline.pack import PackFailure
from raptor.solver.pipeline.problem import (
    INFEASIBLE,
    IntArray,
    PipelineCapacityError,
    PipelineProblem,
)
from raptor.solver.pipeline.realize import Placement, realize


@dataclass(frozen=True)
class Figures:
    """What selection compares (realized, after packing and placement)."""

    period: int
    memory: int
    max_span: int
    max_load: int

    @staticmethod
    def of(pl: Placement) -> Figures:
        return Figures(pl.period_ns, pl.memory_ns, pl.max_span, pl.max_load)


GUARDS = ("bottleneck", "memory+span", "memory+work", "sharing-span")


def guard_failures(cand: Figures, fallback: Figures, sharing_aware: bool) -> list[str]:
    """The guards a candidate fails against the fallback (empty: it may replace it)."""
    failed = (not cand.period < fallback.period,
              cand.memory + cand.max_span > fallback.memory + fallback.max_span,
              cand.memory + cand.max_load > fallback.memory + fallback.max_load,
              sharing_aware and cand.max_span > fallback.max_span)
    return [name for name, bad in zip(GUARDS, failed, strict=True) if bad]


@dataclass(frozen=True)
class Candidate:
    name: str
    figures: Figures | None  # None: failed capacity verification
    sharing_aware: bool
    failure: str = ""


def select(fallback: Figures | None, candidates: list[Candidate]) -> tuple[int, list[str]]:
    """Index of the chosen candidate (-1: the fallback) and one note per decision."""
    notes: list[str] = []
    if fallback is None:
        ok = [k for k, c in enumerate(candidates) if c.figures is not None]
        if not ok:
            return -2, ["no candidate passed capacity verification"]
        k = min(ok, key=lambda k: (candidates[k].figures.period, k))  # type: ignore[union-attr]
        notes.append(f"phase-1 winner failed capacity verification; {candidates[k].name} "
                     f"chosen without guards")
        return k, notes
    chosen, best = -1, fallback.period
    for k, c in enumerate(candidates):
        if c.figures is None:
            notes.append(f"{c.name}: failed capacity verification ({c.failure})")
            continue
        failed = guard_failures(c.figures, fallback, c.sharing_aware)
        if failed:
            notes.append(f"{c.name}: period {c.figures.period} kept out by guard(s) "
                         f"{', '.join(failed)}")
        elif c.figures.period < best:
            chosen, best = k, c.figures.period
    notes.append("selected: " + ("phase-1 winner (fallback)" if chosen < 0
                                 else candidates[chosen].name))
    return chosen, notes


def _pack_count(items: Callable[[int, int], list[tuple[int, int]]], j: int, i: int, T: int,
                r: IntArray, cap: int) -> int:
    cores, load, tiles = 0, T + 1, cap + 1
    for g in range(j, i):
        for w, x in items(g, int(r[g])):
            if load + w > T or tiles + x > cap:
                cores += 1
                load, tiles = w, x
            else:
                load += w
                tiles += x
    return max(cores, 1, int(r[j:i].max()))


def phase1(problem: PipelineProblem, replication: bool) -> Partition | None:
    """The phase-1 winner: for the least T (binary search) whose stages fit P cores with
    nominal memory ≤ T, where a stage grows while its dependency path stays ≤ T and needs its
    ordered pack count of cores, those cuts, budgets and replication (None: no T fits)."""
    G, P, cap = problem.num_groups, problem.num_cores, problem.target.crossbars_per_core
    path, graph, head = problem.path, problem.graph, problem.top_level

    @functools.cache
    def items(g: int, r: int) -> list[tuple[int, int]]:
        """Ordered-packing items of group g at replication r: unit shards and tile-free
        tasks, in arrival order, as (work, tiles)."""
        out: list[tuple[int, int, int]] = []  # (arrival, work, tiles)
        group = problem.groups[g]
        for u in group.units:
            shards = [[INFEASIBLE, 0] for _ in range(min(r, len(u.tasks)))]  # arrival, work
            for n, t in enumerate(u.tasks):  # largest first, dealt round-robin
                shard = shards[n % len(shards)]
                shard[0] = min(shard[0], head[t])
                shard[1] += graph.tasks[t].cost_ns
            out.extend((a, w, len(u.tiles)) for a, w in shards)
        out.extend((head[t], graph.tasks[t].cost_ns, 0) for t in group.tasks
                   if not graph.tasks[t].weights)
        out.sort()
        return [(w, x) for _, w, x in out]

    def greedy(T: int) -> tuple[list[int], list[int], IntArray] | None:
        r = rmin(problem, T, replication)
        if (r >= INFEASIBLE).any():
            return None
        cuts: list[int] = []
        cores: list[int] = []
        mem = float(problem.baseline_ns)
        j = 0
        while j < G:
            if path[j, j + 1] > T:
                return None
            i = j + 1
            while i < G and path[j, i + 1] <= T:
                i += 1
            cuts.append(j)
            cores.append(_pack_count(items, j, i, T, r, cap))
            mem += float(problem.mem_nominal[j, i])
            if sum(cores) > P or mem > T:
                return None
            j = i
        return cuts, cores, r

    lo = problem.lower_bound(replication) - 1
    ceiling = problem.total_work + problem.baseline_ns + \
        int(problem.mem_nominal.max()) * max(G, 1) + 1
    hi = least_feasible(lo, lo + 1, greedy, ceiling)
    if hi is None:
        return None
    res = greedy(hi)
    assert res is not None
    cuts, cores, r = res
    ranges = list(zip(cuts, [*cuts[1:], G], strict=True))
    for _ in range(P - sum(cores)):
        s = max(range(len(ranges)), key=lambda s: (problem.work(*ranges[s]) / cores[s], -s))
        cores[s] += 1
    rep = [1] * G
    for (j, i), k in zip(ranges, cores, strict=True):
        rep[j:i] = [min(int(x), k) for x in r[j:i]]
    return Partition(tuple(cuts), tuple(cores), tuple(rep))


def _levels(lo: int, hi: int, geometric: bool) -> list[int]:
    lo, hi = max(lo, 1), max(hi, 1)
    if hi <= lo:
        return [hi]
    vals = [lo * (hi / lo) ** (m / (LEVELS - 1)) if geometric
            else lo + (hi - lo) * m / (LEVELS - 1) for m in range(LEVELS)]
    return sorted({min(hi, max(lo, math.ceil(v))) for v in vals})


@dataclass(frozen=True)
class Alternative:
    partition: Partition
    sharing_aware: bool
    origin: str


def second_search(problem: PipelineProblem, replication: bool, upper: int) -> list[Alternative]:
    """Searches A (per-transfer stores) and B (shared publications); the best four."""
    lb = problem.lower_bound(replication)
    found: dict[tuple[int, ...], tuple[int, set[str], str, Partition]] = {}

    def harvest(levels: list[int], mem: IntArray, tag: str) -> list[int]:
        scores = []
        for n, res in enumerate(level_dp(problem, levels, mem, replication)):
            scores.append(max(res.level, res.memory_ns))
            if res.cuts is None or (part := allocate(problem, res.cuts, replication)) is None:
                continue
            period = evaluate_partition(problem, part).period_ns
            origin = f"search {tag} level {n} ({res.level} ns)"
            found.setdefault(res.cuts, (period, set(), origin, part))[1].add(tag)
        return scores

    levels_a = _levels(lb, upper, geometric=True)
    scores = harvest(levels_a, problem.mem_transfer, "A")
    best = int(np.argmin(scores))
    lo_b = levels_a[best - 1] if best > 0 else lb
    hi_b = levels_a[best + 1] if best + 1 < len(levels_a) else upper
    harvest(_levels(lo_b, hi_b, geometric=False), problem.mem_shared, "B")
    ranked = sorted(found.items(), key=lambda kv: (kv[1][0], kv[0]))[:4]
    return [Alternative(part, tags == {"B"}, origin) for _, (_, tags, origin, part) in ranked]


@dataclass
class HeuristicOutcome:
    placement: Placement
    model_period: int
    notes: list[str]
    seconds: float


def run_heuristic(problem: PipelineProblem, replication: bool) -> HeuristicOutcome:
    """Phase 1, second search, realization of the five candidates, guarded selection."""
    t0 = time.perf_counter()
    notes: list[str] = []
    cache: dict[Partition, Placement | PackFailure] = {}
    failures: list[str] = []

    def place(part: Partition) -> Placement | PackFailure:
        res = cache[part] = cache.get(part) or realize(problem, part, replication)
        if isinstance(res, PackFailure):
            failures.append(res.message)
        return res

    p1 = phase1(problem, replication)
    fallback: Placement | PackFailure | None = None
    if p1 is None:
        notes.append("phase 1 found no partition that fits the cores")
        upper = problem.total_work + problem.baseline_ns + 1
    else:
        upper = evaluate_partition(problem, p1).period_ns
        fallback = place(p1)
    cands = [(f"alternative {n + 1} ({a.origin})", a.partition, a.sharing_aware)
             for n, a in enumerate(second_search(problem, replication, upper))]
    init = None if p1 is None else allocate(problem, p1.cuts, replication)
    if init is not None:
        cands.append(("initial partition (phase-1 cuts, allocated cores)", init, False))
    placed = [place(part) for _, part, _ in cands]
    chosen, sel_notes = select(
        Figures.of(fallback) if isinstance(fallback, Placement) else None,
        [Candidate(name, None, sharing, res.message) if isinstance(res, PackFailure)
         else Candidate(name, Figures.of(res), sharing)
         for (name, _, sharing), res in zip(cands, placed, strict=True)])
    notes.extend(sel_notes)
    if chosen == -2:
        raise PipelineCapacityError(
            "no pipeline partition passed capacity verification: " +
            (failures[0] if failures else "phase 1 and the second search found none"))
    pl = fallback if chosen < 0 else placed[chosen]
    assert isinstance(pl, Placement)
    model = evaluate_partition(problem, pl.partition).period_ns
    return HeuristicOutcome(pl, model, notes, time.perf_counter() - t0)
