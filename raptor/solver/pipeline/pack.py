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
    tiles: list[frozenset[int]]
    attempt: str  # which constructor attempt succeeded


@dataclass(frozen=True)
class PackFailure:
    message: str


class _Fail(Exception):
    """No core has room for a unit; ``args[0]``: the openings decided before."""


@dataclass
class _Stage:
    """What every attempt packs: the stage's tile units (largest work first) with their
    replication, the unit of each tiled task, the task order, and the core checks spent."""

    k: int
    cap: int
    cost: list[int]
    units: list[tuple[Unit, int]]
    unit_of: dict[int, int]
    seq: list[int]
    checks: int = 0

    @classmethod
    def build(cls, problem: PipelineProblem, j: int, i: int, k: int,
              replication: Sequence[int]) -> _Stage:
        graph = problem.graph
        cost = [t.cost_ns for t in graph.tasks]
        units: list[tuple[Unit, int]] = []
        free: list[int] = []
        for g in problem.groups[j:i]:
            r = max(1, min(int(replication[g.id - j]), k))
            units.extend((u, r) for u in g.units)
            free.extend(t for t in g.tasks if not graph.tasks[t].weights)
        units.sort(key=lambda ur: (-ur[0].work, ur[0].tasks))
        unit_of = {t: n for n, (u, _) in enumerate(units) for t in u.tasks}
        seq = [t for u, _ in units for t in u.tasks]
        seq += sorted(free, key=lambda t: (-cost[t], t))
        return cls(k, problem.target.crossbars_per_core, cost, units, unit_of, seq)


class _Attempt:
    """One constructor pass: per-core loads and tiles, each unit's holders, and a
    (load, core) heap whose stale entries are skipped when popped."""

    def __init__(self, stage: _Stage) -> None:
        self.st = stage
        self.load = [0] * stage.k
        self.tiles: list[set[int]] = [set() for _ in range(stage.k)]
        self.holders: list[list[int]] = [[] for _ in stage.units]
        self.core_of: dict[int, int] = {}
        self.heap = [(0, c) for c in range(stage.k)]
        self.decision = 0

    def least_loaded(self, exclude: list[int], need: frozenset[int] | None) -> int:
        """Least-loaded core outside ``exclude`` with room for ``need`` (-1: none)."""
        heap, load, tiles, cap = self.heap, self.load, self.tiles, self.st.cap
        popped, found = [], -1
        while heap:
            ld, c = heapq.heappop(heap)
            if ld != load[c]:
                continue
            popped.append((ld, c))
            self.st.checks += 1
            if c in exclude:
                continue
            if need is None or len(need - tiles[c]) <= cap - len(tiles[c]):
                found = c
                break
        for entry in popped:
            heapq.heappush(heap, entry)
        return found

    def best_fit_core(self, exclude: list[int], need: frozenset[int], skip: bool) -> int:
        """Core with the least room left after taking ``need`` (second best if skip)."""
        load, tiles, cap, k = self.load, self.tiles, self.st.cap, self.st.k
        self.st.checks += k
        options = sorted((cap - len(tiles[c]) - len(need - tiles[c]), load[c], c)
                         for c in range(k) if c not in exclude
                         and len(need - tiles[c]) <= cap - len(tiles[c]))
        if skip and len(options) > 1:
            options = options[1:]
        return options[0][2] if options else -1

    def pick(self, t: int, best_fit: bool, deviate: int) -> int:
        """Task t's core: the least-loaded holder of its unit, or a new holder (opened by
        best fit or least load; the ``deviate``-th opening takes its second-best core) when
        the unit may open one and it is less loaded; raises :class:`_Fail` when none."""
        n = self.st.unit_of.get(t)
        if n is None:
            return self.least_loaded([], None)
        u, r = self.st.units[n]
        hs = self.holders[n]
        load = self.load
        pick = min(hs, key=lambda c: (load[c], c)) if hs else -1
        if len(hs) < r:
            new = self.best_fit_core(hs, u.tiles, self.decision == deviate) if best_fit \
                else self.least_loaded(hs, u.tiles)
            if new >= 0 and (pick < 0 or load[new] < load[pick]):
                pick = new
                hs.append(new)
                self.tiles[new] |= u.tiles
                self.decision += 1
        if pick < 0:
            raise _Fail(self.decision)
        return pick

    def run(self, tasks: list[int], best_fit: bool, deviate: int, name: str) -> StagePacking:
        for t in tasks:
            pick = self.pick(t, best_fit, deviate)
            self.core_of[t] = pick
            self.load[pick] += self.st.cost[t]
            heapq.heappush(self.heap, (self.load[pick], pick))
        return StagePacking(self.core_of, [frozenset(s) for s in self.tiles], name)


def pack_stage(problem: PipelineProblem, j: int, i: int, k: int, replication: Sequence[int]
               ) -> StagePacking | PackFailure:
    """Pack groups j..i-1 onto k cores; ``replication[g - j]`` copies allowed per group."""
    stage = _Stage.build(problem, j, i, k, replication)
    seq, fail_at, tries = stage.seq, -1, 0
    for name, tasks, best_fit in (("first", seq, False), ("best-fit", seq, True),
                                  ("reverse", seq[::-1], True)):
        tries += 1
        try:
            return _Attempt(stage).run(tasks, best_fit, -1, name)
        except _Fail as exc:
            if name == "best-fit":
                fail_at = exc.args[0]
    # deviation b: the b-th opening before the best-fit failure takes its second-best core
    for back in range(1, PACK_DEVIATIONS + 1):
        if fail_at - back < 0 or stage.checks >= PACK_CHECK_BUDGET:
            break
        tries += 1
        try:
            return _Attempt(stage).run(seq, True, fail_at - back, f"deviation {back}")
        except _Fail:
            pass
    x = sum(len(u.tiles) * r for u, r in stage.units)
    return PackFailure(
        f"groups {j}..{i - 1}: could not pack {len(stage.units)} tile units ({x} crossbars "
        f"with replication) onto {k} cores x {stage.cap} crossbars within {tries} "
        f"attempts / {stage.checks} core checks (bounded search, not a proof)")
