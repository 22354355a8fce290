"""Constructive packing of one stage's instances onto its cores under crossbar capacity:
capacity verification, and the tile homes the stage's list schedule starts from.

Distinct-tile union / capacity is only a lower bound; this constructor establishes
feasibility. A unit (tasks sharing tiles) of a group replicated ``r`` times may open at most
``r`` cores holding its tiles. Units go largest work first (LPT), lanes largest first; every
lane goes to the least-loaded core among the unit's holders, or opens a new holder when one
with room is less loaded (the first lane always opens one). Tile-free tasks then fill the
least-loaded cores.

Recovery (spec "Capacity and recovery"): when a unit finds no core with room, the
constructor retries with best-fit opening (least room left), then in reverse order, then with
at most 16 single-choice deviations (the i-th opening before the failing one takes its
second-best core) within 65,536 core-candidate checks. Exhausting them is a bounded
diagnostic, not a proof that the stage cannot be packed.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from raptor.solver.pipeline.problem import PipelineProblem, Unit

PACK_DEVIATIONS = 16
PACK_CHECK_BUDGET = 65536


@dataclass(frozen=True)
class StagePacking:
    core_of: dict[int, int]  # task -> logical core 0..k-1
    load: list[int]
    tiles: list[frozenset[int]]
    attempt: str  # which constructor attempt succeeded


@dataclass(frozen=True)
class PackFailure:
    message: str


class _Fail(Exception):
    def __init__(self, decision: int) -> None:
        super().__init__(decision)
        self.decision = decision


def pack_stage(problem: PipelineProblem, j: int, i: int, k: int, replication: Sequence[int]
               ) -> StagePacking | PackFailure:
    """Pack groups j..i-1 onto k cores; ``replication[g - j]`` copies allowed per group."""
    graph = problem.graph
    cap = problem.target.crossbars_per_core
    cost = [t.cost_ns for t in graph.tasks]
    units: list[tuple[Unit, int]] = []
    free: list[int] = []
    for g in problem.groups[j:i]:
        r = max(1, min(int(replication[g.id - j]), k))
        units.extend((u, r) for u in g.units)
        free.extend(t for t in g.tasks if not graph.tasks[t].weights)
    units.sort(key=lambda ur: (-ur[0].work, ur[0].tasks))
    unit_of: dict[int, int] = {}
    for n, (u, _) in enumerate(units):
        for t in u.tasks:
            unit_of[t] = n
    seq = [t for u, _ in units for t in u.tasks]
    seq += sorted(free, key=lambda t: (-cost[t], t))
    checks = 0

    def attempt(tasks: list[int], best_fit: bool, deviate: int) -> StagePacking:
        nonlocal checks
        load = [0] * k
        tiles: list[set[int]] = [set() for _ in range(k)]
        holders: list[list[int]] = [[] for _ in units]
        core_of: dict[int, int] = {}
        heap = [(0, c) for c in range(k)]  # (load, core), stale entries skipped when popped
        decision = 0

        def least_loaded(exclude: list[int], need: frozenset[int] | None) -> int:
            """Least-loaded core outside ``exclude`` with room for ``need`` (-1: none)."""
            nonlocal checks
            popped = []
            found = -1
            while heap:
                ld, c = heapq.heappop(heap)
                if ld != load[c]:
                    continue
                popped.append((ld, c))
                checks += 1
                if c in exclude:
                    continue
                if need is None or len(need - tiles[c]) <= cap - len(tiles[c]):
                    found = c
                    break
            for entry in popped:
                heapq.heappush(heap, entry)
            return found

        def best_fit_core(exclude: list[int], need: frozenset[int], skip: bool) -> int:
            """Core with the least room left after taking ``need`` (second best if skip)."""
            nonlocal checks
            checks += k
            options = sorted((cap - len(tiles[c]) - len(need - tiles[c]), load[c], c)
                             for c in range(k) if c not in exclude
                             and len(need - tiles[c]) <= cap - len(tiles[c]))
            if skip and len(options) > 1:
                options = options[1:]
            return options[0][2] if options else -1

        for t in tasks:
            n = unit_of.get(t)
            if n is None:
                pick = least_loaded([], None)
            else:
                u, r = units[n]
                hs = holders[n]
                pick = min(hs, key=lambda c: (load[c], c)) if hs else -1
                if len(hs) < r:
                    new = best_fit_core(hs, u.tiles, decision == deviate) if best_fit \
                        else least_loaded(hs, u.tiles)
                    if new >= 0 and (pick < 0 or load[new] < load[pick]):
                        pick = new
                        hs.append(new)
                        tiles[new] |= u.tiles
                        decision += 1
                if pick < 0:
                    raise _Fail(decision)
            core_of[t] = pick
            load[pick] += cost[t]
            heapq.heappush(heap, (load[pick], pick))
        return StagePacking(core_of, load, [frozenset(s) for s in tiles], "")

    tries: list[tuple[str, list[int], bool, int]] = [
        ("first", seq, False, -1), ("best-fit", seq, True, -1),
        ("reverse", seq[::-1], True, -1)]
    fail_at = -1
    n_try = 0
    while n_try < len(tries):
        name, tasks, best_fit, deviate = tries[n_try]
        n_try += 1
        try:
            res = attempt(tasks, best_fit, deviate)
            return StagePacking(res.core_of, res.load, res.tiles, name)
        except _Fail as exc:
            if name == "best-fit":
                fail_at = exc.decision
        if n_try == len(tries) and fail_at > 0 and len(tries) < 3 + PACK_DEVIATIONS \
                and checks < PACK_CHECK_BUDGET:
            back = len(tries) - 2
            if fail_at - back >= 0:
                tries.append((f"deviation {back}", seq, True, fail_at - back))
    x = sum(len(u.tiles) * r for u, r in units)
    return PackFailure(
        f"groups {j}..{i - 1}: could not pack {len(units)} tile units ({x} crossbars with "
        f"replication) onto {k} cores x {cap} crossbars within {len(tries)} attempts / "
        f"{checks} core checks (bounded search, not a proof)")
