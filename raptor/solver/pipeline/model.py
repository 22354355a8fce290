"""The period model every pipeline solver optimizes (docs/pipeline.md §2), and core
allocation for given cuts. Stage ``s`` holds groups ``cuts[s] .. cuts[s+1]-1`` on
``cores[s]`` cores, group ``g`` replicated ``replication[g]`` times:

    period = max( max_s time_s,  baseline + Σ_s memory_s )
    time_s = max( ceil(work_s / cores_s),  max_g bound[g, r_g],  path_s )

subject to Σ cores ≤ P, Σ_g crossbars_g · r_g ≤ crossbars_per_core · cores_s and r_g ≤ cores_s.
Without the path term one stage holding everything would always be optimal. For a period
target ``T`` each group takes the smallest replication whose bound is ≤ T and a range needs
``kmin = max(ceil(W/T), ceil(X/cap), max r, 1)`` cores: the exact DP searches over T, and
core allocation for fixed cuts is a binary search plus greedy water-filling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from raptor.solver.pipeline.problem import INFEASIBLE, IntArray, PipelineProblem


@dataclass(frozen=True)
class Partition:
    cuts: tuple[int, ...]
    cores: tuple[int, ...]
    replication: tuple[int, ...]

    def ranges(self, num_groups: int) -> list[tuple[int, int]]:
        ends = [*self.cuts[1:], num_groups]
        return list(zip(self.cuts, ends, strict=True))


@dataclass(frozen=True)
class ModelEval:
    period_ns: int
    stage_times: tuple[int, ...]
    memory_ns: int
    feasible: bool
    reason: str = ""


def least_feasible(lo: int, hi: int, feasible: Callable[[int], object | None],
                   ceiling: int) -> int | None:
    """The least T in (lo, ceiling] with `feasible(T)` not None, for a feasibility
    monotone in T: `hi` doubled until feasible (None past `ceiling`), then bisected."""
    hi = max(hi, lo + 1, 1)
    while feasible(hi) is None:
        if hi >= ceiling:
            return None
        hi = min(2 * hi, ceiling)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if feasible(mid) is None:
            lo = mid
        else:
            hi = mid
    return hi


def rmin(problem: PipelineProblem, T: int, replication: bool,
         groups: slice | None = None) -> IntArray:
    """Smallest replication per group whose bound is ≤ T (INFEASIBLE where none is)."""
    b = problem.bounds if groups is None else problem.bounds[groups]
    if not replication:
        b = b[:, :1]
    ok = b <= T
    r = ok.argmax(axis=1).astype(np.int64) + 1
    out: IntArray = np.where(ok.any(axis=1), r, INFEASIBLE)
    return out


def kmin_table(problem: PipelineProblem, T: int, replication: bool) -> IntArray:
    """``k[j, i]``: fewest cores for groups j..i-1 to meet period T (P+1: impossible)."""
    G, P, cap = problem.num_groups, problem.num_cores, problem.target.crossbars_per_core
    r = rmin(problem, T, replication)
    bad = r >= INFEASIBLE
    reff = np.where(bad, 0, r)
    crossbars = np.array([g.crossbars for g in problem.groups], dtype=np.int64)
    xp = np.concatenate([[0], np.cumsum(crossbars * reff)])
    badp = np.concatenate([[0], np.cumsum(bad)])
    W = problem.work_prefix[None, :] - problem.work_prefix[:, None]
    X = xp[None, :] - xp[:, None]
    rmax = np.zeros((G + 1, G + 1), dtype=np.int64)
    for j in range(G):
        rmax[j, j + 1:] = np.maximum.accumulate(reff[j:])
    k = np.maximum(np.maximum(-(-W // T), -(-X // cap)), np.maximum(rmax, 1))
    j_idx, i_idx = np.indices((G + 1, G + 1))
    impossible = (i_idx <= j_idx) | (badp[None, :] - badp[:, None] > 0) | \
        (problem.path > T) | (k > P)
    out: IntArray = np.where(impossible, P + 1, k)
    return out


def stage_kmin(problem: PipelineProblem, j: int, i: int, T: int, replication: bool,
               path: bool = True) -> tuple[int, IntArray]:
    """Cores and replication factors for groups j..i-1 to meet T (P+1 cores: impossible);
    `path=False`: the stage's dependency path does not bound its time (a stream)."""
    P, cap = problem.num_cores, problem.target.crossbars_per_core
    r = rmin(problem, T, replication, slice(j, i))
    if (r >= INFEASIBLE).any() or (path and int(problem.path[j, i]) > T):
        return P + 1, r
    x = sum(g.crossbars * int(rg) for g, rg in zip(problem.groups[j:i], r, strict=True))
    k = max(-(-problem.work(j, i) // T), -(-x // cap), int(r.max()), 1)
    return (k if k <= P else P + 1), r


def stage_time(problem: PipelineProblem, j: int, i: int, k: int, replication: bool,
               path: bool = True) -> int:
    """Smallest model time of groups j..i-1 on k cores (INFEASIBLE when the groups' crossbars
    do not fit k cores); `path=False`: without the dependency path (a stream)."""
    if k < 1 or problem.crossbars(j, i) > problem.target.crossbars_per_core * k:
        return INFEASIBLE
    rk = min(k, problem.num_cores) if replication else 1
    base = max(-(-problem.work(j, i) // k), int(problem.path[j, i]) if path else 0, 1)
    lo = max(base, int(problem.bounds[j:i, rk - 1].max()))
    hi = max(base, int(problem.bounds[j:i, 0].max()))
    while lo < hi:
        mid = (lo + hi) // 2
        if stage_kmin(problem, j, i, mid, replication, path)[0] <= k:
            hi = mid
        else:
            lo = mid + 1
    assert stage_kmin(problem, j, i, lo, replication, path)[0] <= k
    return lo


def evaluate_partition(problem: PipelineProblem, part: Partition, sharing: bool = True
                       ) -> ModelEval:
    """Model period of a partition; infeasible ones say why."""
    G, P, cap = problem.num_groups, problem.num_cores, problem.target.crossbars_per_core
    mem = problem.memory(part.cuts, sharing)
    ranges = part.ranges(G)
    problems = []
    if not part.cuts or part.cuts[0] != 0 or any(b <= a for a, b in ranges):
        problems.append("cuts must start at 0 and increase")
    if sum(part.cores) > P:
        problems.append(f"{sum(part.cores)} cores > {P}")
    times = []
    for s, (j, i) in enumerate(ranges):
        k = part.cores[s]
        r = part.replication[j:i]
        x = sum(g.crossbars * rg for g, rg in zip(problem.groups[j:i], r, strict=True))
        if k < 1 or x > cap * k or max(r) > k:
            problems.append(f"stage {s}: {x} crossbars / replication {max(r)} on {k} cores")
            times.append(INFEASIBLE)
            continue
        b = max(int(problem.bounds[g, rg - 1]) for g, rg in zip(range(j, i), r, strict=True))
        times.append(max(-(-problem.work(j, i) // k), b, int(problem.path[j, i])))
    period = max([*times, mem])
    return ModelEval(period, tuple(times), mem, not problems, "; ".join(problems))


def allocate(problem: PipelineProblem, cuts: Sequence[int], replication: bool) -> Partition | None:
    """Core counts and replication minimizing the model period of fixed ``cuts``: the least
    T whose per-stage needs fit P cores, then every spare core to the stage it helps most
    (slowest improvable stage first); spare cores nothing improves go where work per core is
    highest, as packing headroom. None when the cuts cannot fit at any period."""
    G, P = problem.num_groups, problem.num_cores
    ranges = list(zip(cuts, [*cuts[1:], G], strict=True))
    if len(ranges) > P:
        return None
    mem = problem.memory(cuts)

    def needed(T: int) -> int:
        return sum(stage_kmin(problem, j, i, T, replication)[0] for j, i in ranges)

    lo = max(problem.lower_bound(replication), mem, max(int(problem.path[j, i]) for j, i in ranges))
    hi = lo
    ceiling = max(problem.total_work, 1) + lo
    while needed(hi) > P:
        if hi >= ceiling:
            return None
        hi = min(2 * hi, ceiling)
    while lo < hi:
        mid = (lo + hi) // 2
        if needed(mid) <= P:
            hi = mid
        else:
            lo = mid + 1
    cores = [stage_kmin(problem, j, i, lo, replication)[0] for j, i in ranges]
    times = [stage_time(problem, j, i, k, replication)
             for (j, i), k in zip(ranges, cores, strict=True)]
    spare = P - sum(cores)
    nxt: dict[int, int] = {}
    while spare > 0:
        for s, (j, i) in enumerate(ranges):
            if s not in nxt:
                nxt[s] = stage_time(problem, j, i, cores[s] + 1, replication)
        better = [s for s in range(len(ranges)) if nxt[s] < times[s]]
        if not better:
            break
        s = max(better, key=lambda s: (times[s], -s))
        cores[s] += 1
        times[s] = nxt.pop(s)
        spare -= 1
    for _ in range(spare):
        s = max(range(len(ranges)), key=lambda s: (problem.work(*ranges[s]) / cores[s], -s))
        cores[s] += 1
    rep = [1] * G
    for (j, i), k, t in zip(ranges, cores, times, strict=True):
        _, r = stage_kmin(problem, j, i, t, replication)
        rep[j:i] = [int(x) for x in r]
        assert max(rep[j:i]) <= k
    return Partition(tuple(cuts), tuple(cores), tuple(rep))
