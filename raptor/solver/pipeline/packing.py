"""A period lower bound from bin packing (docs/pipeline.md §2, "The period lower bound").

Every task runs once per inference on one core, so no stream's steady period is below the
least T at which the tasks' costs fit P cores of load T. Work / cores misses what lumpy
lanes make of that: LeNet's 112 conv1 lanes of 9,507 ns and 40 conv2 lanes of ~6,700 ns
cannot fit 64 cores of 21,011 ns (three conv1 lanes never share a core, two leave no room
for a conv2 lane), so its one-stage streams measured 22 % above a bound no placement can
reach. :func:`packing_bound` proves T infeasible with the configuration LP (Gilmore-Gomory
relaxation): the tasks over T / 4 ("large", at most three on a core) in up to
`CLASSES` size classes rounded down, the small ones as area in the room the large leave.
Rounding down and the LP relaxation only make packing easier, so an infeasible verdict is
a proof and the bound a true lower bound.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from ortools.linear_solver import pywraplp

CLASSES = 24
"""Size classes of the large tasks (more: a tighter bound, a larger LP)."""
SLACK = 1e-4
"""The LP must exceed P by this many cores to call T infeasible (floating point)."""


def packing_bound(costs: Sequence[int], cores: int, lo: int) -> int:
    """The least T ≥ `lo` that the configuration LP does not prove infeasible for packing
    `costs` onto `cores` cores of load T (`lo`: a known lower bound, e.g. work / cores)."""
    if not costs or cores < 1:
        return lo
    hi = _greedy_makespan(costs, cores)
    if hi <= lo or _fits(costs, cores, lo):
        return lo
    bad = lo  # proven infeasible; the answer is the least T above it not proven so
    while hi - bad > 1:
        mid = (bad + hi) // 2
        if _fits(costs, cores, mid):
            hi = mid
        else:
            bad = mid
    return hi


def _greedy_makespan(costs: Sequence[int], cores: int) -> int:
    """Longest processing time first: a packing, so its makespan is feasible."""
    heap = [0] * cores
    for c in sorted(costs, reverse=True):
        heapq.heapreplace(heap, heap[0] + c)
    return max(heap)


def _fits(costs: Sequence[int], cores: int, T: int) -> bool:
    """False only when no packing of `costs` on `cores` cores of load T exists (proof by
    the configuration LP's value exceeding `cores`)."""
    if max(costs) > T:
        return False
    large = sorted((c for c in costs if 4 * c > T), reverse=True)
    small = sum(costs) - sum(large)
    if not large:
        return small <= cores * T
    # consecutive runs of equal count, each rounded down to its smallest size
    step = -(-len(large) // CLASSES)
    sizes: list[int] = []
    counts: list[int] = []
    for k in range(0, len(large), step):
        run = large[k:k + step]
        if sizes and sizes[-1] == run[-1]:
            counts[-1] += len(run)
        else:
            sizes.append(run[-1])
            counts.append(len(run))
    solver = pywraplp.Solver.CreateSolver("GLOP")
    assert solver is not None
    cover: list[list[tuple[pywraplp.Variable, int]]] = [[] for _ in sizes]
    room: list[tuple[pywraplp.Variable, int]] = []
    configs = [()] + [c for n in (1, 2, 3) for c in
                      itertools.combinations_with_replacement(range(len(sizes)), n)]
    for config in configs:
        load = sum(sizes[i] for i in config)
        if load > T:
            continue
        y = solver.NumVar(0, solver.infinity(), "")
        for i in set(config):
            cover[i].append((y, config.count(i)))
        room.append((y, T - load))
    for i, terms in enumerate(cover):
        solver.Add(sum(a * y for y, a in terms) >= counts[i])
    solver.Add(sum(r * y for y, r in room) >= small)
    solver.Minimize(sum(y for y, _ in room))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return True  # nothing proven
    return bool(solver.Objective().Value() <= cores + SLACK)
