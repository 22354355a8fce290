"""Dynamic programs over the group chain (docs/pipeline.md §3). :func:`level_dp`, the
engine, computes for up to eight period levels at once the least shared-memory service of
every group prefix on every core count (``f[l, i, c] = min_j f[l, j, c - k_l(j, i)] +
mem(j, i)``), vectorized over j and c; :func:`exact_dp` finds the model's optimum by an
eight-way search over T (feasibility is monotone in T). Both are O(L · G² · P) per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from raptor.solver.pipeline.model import allocate, evaluate_partition, kmin_table, least_feasible
from raptor.solver.pipeline.problem import (
    INFEASIBLE,
    IntArray,
    PipelineCapacityError,
    PipelineProblem,
    unit_bound,
)

LEVELS = 8


@dataclass(frozen=True)
class LevelResult:
    level: int
    cuts: tuple[int, ...] | None  # None: no partition meets this level
    memory_ns: int  # baseline included (INFEASIBLE: no partition)


def level_dp(problem: PipelineProblem, levels: Sequence[int], mem: IntArray,
             replication: bool) -> list[LevelResult]:
    G, P = problem.num_groups, problem.num_cores
    out: list[LevelResult] = []
    c = np.arange(P + 1)
    for T in levels:
        K = kmin_table(problem, int(T), replication)
        f = np.full((G + 1, P + 1), INFEASIBLE, dtype=np.int64)
        f[0] = 0
        back = np.zeros((G + 1, P + 1), dtype=np.int64)
        for i in range(1, G + 1):
            k = K[:i, i]
            idx = c[None, :] - k[:, None]
            valid = (idx >= 0) & (k[:, None] <= P)
            prev = f[np.arange(i)[:, None], np.clip(idx, 0, P)]
            vals = np.where(valid & (prev < INFEASIBLE), prev + mem[:i, i][:, None], INFEASIBLE)
            back[i] = vals.argmin(axis=0)
            f[i] = vals[back[i], c]
        if f[G, P] >= INFEASIBLE:
            out.append(LevelResult(int(T), None, INFEASIBLE))
            continue
        cuts, i, cc = [], G, P
        while i > 0:
            j = int(back[i, cc])
            cc -= int(K[j, i])
            cuts.append(j)
            i = j
        out.append(LevelResult(int(T), tuple(reversed(cuts)), problem.baseline_ns + int(f[G, P])))
    return out


@dataclass(frozen=True)
class DpResult:
    period_ns: int
    cuts: tuple[int, ...]
    rounds: int


def exact_dp(problem: PipelineProblem, replication: bool, upper: int | None = None) -> DpResult:
    """Least model period over all contiguous partitions (exact for the model)."""
    lo = problem.lower_bound(replication) - 1  # infeasible or below
    hi = upper if upper is not None else _feasible_upper(problem, replication)
    best = _check(problem, hi, replication)
    if best is None:
        raise ValueError(f"period {hi} given as feasible is not")
    rounds = 0
    while hi - lo > 1:
        rounds += 1
        step = (hi - lo) / (LEVELS + 1)
        levels = sorted({min(hi - 1, max(lo + 1, round(lo + step * (m + 1))))
                         for m in range(LEVELS)})
        res = level_dp(problem, levels, problem.mem_shared, replication)
        feasible = [r for r in res if r.memory_ns <= r.level]
        infeasible = [r.level for r in res if r not in feasible]
        if feasible:
            top = min(feasible, key=lambda r: r.level)
            assert top.cuts is not None
            hi, best = top.level, top.cuts
        lo = max([t for t in infeasible if t < hi], default=lo)
    return DpResult(hi, best, rounds)


def _check(problem: PipelineProblem, T: int, replication: bool) -> tuple[int, ...] | None:
    (r,) = level_dp(problem, [T], problem.mem_shared, replication)
    return r.cuts if r.memory_ns <= T else None


def _feasible_upper(problem: PipelineProblem, replication: bool) -> int:
    """A period some partition meets: one stage on every core (its allocation), else the
    model value of the best of a few level DP probes."""
    part = allocate(problem, (0,), replication)
    if part is not None:
        return evaluate_partition(problem, part).period_ns
    hi = max(problem.lower_bound(replication), 1)
    ceiling = problem.total_work + problem.baseline_ns + int(problem.mem_shared.max()) * \
        max(problem.num_groups, 1) + 1
    while _check(problem, hi, replication) is None:
        if hi >= ceiling:
            raise ValueError("no partition meets any period (crossbars do not fit)")
        hi = min(hi * 2, ceiling)
    return hi


@dataclass(frozen=True)
class WaveResult:
    period_ns: int
    """The wave model's optimum: the longest range time."""
    cuts: tuple[int, ...]
    cores: tuple[int, ...]
    replication: tuple[int, ...]


@dataclass(frozen=True)
class WaveTables:
    """The wave model's figures of each group g on k = 1..P cores (row k - 1, column g):
    its time max(ceil(work_g / k), bound_g(r)) at the least replication r ≤ k reaching the
    best bound with up to k copies, that r and its crossbars. `wave_dp` and the CP-SAT wave
    model (`cpsat_model.solve_wave`) both read these, so the model is stated once.

    `granular`: the time is also at least the group's tasks' makespan bound on k cores
    (`unit_bound` of all its tasks, not only of each unit's lanes): a group of a few long
    tasks does not spread over k cores. MTCNN O-net's wave cut set put two such groups on a
    range of one core and estimated at 145,896 ns; with the term, 88,320 (docs/benchmarks.md,
    "tenth session")."""

    time: IntArray
    copies: IntArray
    crossbars: IntArray


def wave_tables(problem: PipelineProblem, replication: bool, granular: bool = False
                ) -> WaveTables:
    P = problem.num_cores
    b = problem.bounds if replication else problem.bounds[:, :1]
    R = b.shape[1]
    work = np.diff(problem.work_prefix)
    xb = np.array([g.crossbars for g in problem.groups], dtype=np.int64)
    ks = np.arange(1, P + 1)
    share = -(-work[None, :] // ks[:, None])  # (P, G)
    best = b[:, np.minimum(ks, R) - 1].T  # (P, G): the best bound with up to k copies
    t = np.maximum(share, best)
    if granular:
        for g, grp in enumerate(problem.groups):
            costs = sorted((problem.graph.tasks[x].cost_ns for x in grp.tasks), reverse=True)
            t[:, g] = np.maximum(t[:, g], [unit_bound(costs, k) for k in range(1, P + 1)])
    # least replication reaching t on k cores (bounds fall with r)
    reach = b[None, :, :] <= t[:, :, None]  # (P, G, R)
    r = reach.argmax(axis=2) + 1
    return WaveTables(t, r, xb[None, :] * r)


def wave_dp(problem: PipelineProblem, replication: bool, granular: bool = False
            ) -> WaveResult:
    """Cut the group chain into ranges of cores minimizing the longest range time under the
    *wave* model of a layered stream (`layered_stream`): a range's cores run its groups
    one after another, each group spread over all of them,

        time(j, i, k) = Σ_{g=j}^{i-1} max(ceil(work_g / k), bound_g(r_g(k)))

    with r_g(k) the least replication (≤ k) reaching the group's best time on k cores and
    the range's crossbars Σ crossbars_g · r_g(k) within k cores. Why: a core of a one-stage
    stream works on one inference from its first task to its last (its window), and on k
    cores a range of layers takes about this long, dependencies between layers included,
    where the period model's work / cores does not see them. Exact for the model: a binary
    search on T over the least cores per range (`kmin`), a chain DP per T; spare cores go
    to the range whose time they shorten most. `granular`: as `WaveTables`."""
    G, P, cap = problem.num_groups, problem.num_cores, problem.target.crossbars_per_core
    tables = wave_tables(problem, replication, granular)
    t, r, x = tables.time, tables.copies, tables.crossbars
    ks = np.arange(1, P + 1)
    tp = np.concatenate([np.zeros((P, 1), np.int64), np.cumsum(t, axis=1)], axis=1)
    xp = np.concatenate([np.zeros((P, 1), np.int64), np.cumsum(x, axis=1)], axis=1)
    time = tp[:, None, :] - tp[:, :, None]  # (P, j, i)
    xbars = xp[:, None, :] - xp[:, :, None]
    fits = xbars <= cap * ks[:, None, None]

    def kmin(T: int) -> IntArray:
        ok = (time <= T) & fits
        k: IntArray = np.where(ok.any(axis=0), ok.argmax(axis=0) + 1, P + 1)
        return k

    def chain(T: int) -> tuple[int, list[int]] | None:
        K = kmin(T)
        f = np.full(G + 1, INFEASIBLE, dtype=np.int64)
        f[0] = 0
        back = np.zeros(G + 1, dtype=np.int64)
        for i in range(1, G + 1):
            vals = f[:i] + K[:i, i]
            back[i] = int(vals.argmin())
            f[i] = vals[back[i]]
        if f[G] > P:
            return None
        cuts, i = [], G
        while i > 0:
            cuts.append(int(back[i]))
            i = cuts[-1]
        return int(f[G]), cuts[::-1]

    # every range on its least cores within the serial time of all groups on one core
    least = least_feasible(0, int(time[0, 0, G]), chain, int(time[0, 0, G]) + 1)
    if least is None:
        raise PipelineCapacityError("the layers' crossbars fit no split of the cores")
    hi = least
    found = chain(hi)
    assert found is not None
    cuts = found[1]
    K = kmin(hi)
    ends = [*cuts[1:], G]
    cores = [int(K[j, i]) for j, i in zip(cuts, ends, strict=True)]
    for _ in range(P - sum(cores)):  # a spare core to the range it shortens most
        def gain(s: int) -> tuple[int, float]:
            j, i, k = cuts[s], ends[s], cores[s]
            per = problem.work(j, i) / k
            if k >= P or not fits[k, j, i]:
                return 0, per
            return int(time[k - 1, j, i] - time[k, j, i]), per
        s = max(range(len(cuts)), key=gain)
        cores[s] += 1
    rep = [1] * G
    for j, i, k in zip(cuts, ends, cores, strict=True):
        rep[j:i] = [int(v) for v in r[k - 1, j:i]]
    period = max(int(time[k - 1, j, i]) for j, i, k in zip(cuts, ends, cores, strict=True))
    return WaveResult(period, tuple(cuts), tuple(cores), tuple(rep))
