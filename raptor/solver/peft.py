"""Capacity-aware PEFT list scheduling (Arabnejad & Barbosa, IEEE TPDS 25(3), 2014), adapted.

Why the adaptation. On identical cores where same-core communication is free, the textbook
optimistic cost table OCT(t, p) = max_c min_p' OCT(c, p') + w(c) + comm·[p ≠ p'] has
constant rows (the minimum is always reached at p' = p), so PEFT collapses into EFT list
scheduling. What makes cores differ on this machine is state that only exists *during*
scheduling: which weight tiles are resident, how much crossbar room is left, where the other
producers of a child already ran, and when each core becomes free. So the lookahead is
evaluated at decision time, per candidate core p of task t, for every child c:

    est_c(p) = min( max(EFT(t,p), R_c(p)) + w(c) + O(c,p)            [c follows t on p]
                    min_p'≠p max(EFT(t,p) + comm(t,c,p,p'), G_c(p')) + w(c) + O(c,p') )

where R_c(p') is the data-ready time of c from its already placed producers (maintained
incrementally, O(P) per edge), G_c = max(R_c, core free time), p' ranges over cores where
c's tiles are resident or fit (for p' = p after t's own tiles are added), and O is the static
optimistic cost table. Task t goes to the core minimizing EFT(t,p) + OCT(t,p) with
OCT(t,p) = max_c est_c(p) − EFT(t,p) (i.e. the optimistic finish of its children).

The min over p' would cost O(P²) per edge. With the bound
max(X + d, G) ≤ X + d + max(0, G − X₀), X₀ = min_p EFT(t,p) (exact on the best cores), the
inner term becomes X(p) + flits + min_p' [slack(p') + hop·hops(p,p')], a distance transform on
the XY mesh computed in O(P) (see :mod:`raptor.solver.mesh`). Total: O(E·P) plus insertion.

The static table O is the textbook OCT computed with the same transform. Without a capacity
fallback its rows are constant; under the fallback's pinned residency a core where a child's
tiles can never be resident is excluded, so rows differ. Priorities are HEFT upward ranks
(mean cross-core transfer on edges): the degenerate textbook rank_oct ignores communication
altogether and measured worse (3.0 % longer schedules at 1,000 tasks on 16 cores).

Measured choice of the lookahead terms: an optimistic "each child runs right after t on p"
term made schedules up to 26 % longer than EFT on traffic-heavy graphs (all children cannot
follow t on one core), so every child is priced as if it runs on the best core near p,
including p itself at flit cost, which keeps the pull towards producers, free cores and
resident tiles without that bias.

Capacity. Reusing a resident tile takes no new crossbar slot. If greedy placement ever finds no
core with room (and, as an alternative kept when better, whenever the tiles fill at least half
of the chip), the scheduler restarts from a constructive packing of all tile sets
(largest-weight-first, reuse-first best fit; then the reverse order, then at most 16
single-choice deviations within 65,536 core-candidate checks) whose residency is pinned, so
every task always has a feasible core; remaining room is still used for replicas. When even
that fails, :class:`CapacityError` explains with numbers. ``eft_schedule`` is the same
scheduler with the lookahead switched off (same priorities), to measure what it buys.
"""

from __future__ import annotations

import bisect
import heapq
import time

import numpy as np

from raptor.solver.evaluate import lower_bounds
from raptor.solver.graph import ComputeGraph
from raptor.solver.mesh import INF, BoolArray, IntArray, Mesh
from raptor.solver.schedule import MergeScheduleResult
from raptor.target import Target

PACK_DEVIATIONS = 16
PACK_CHECK_BUDGET = 65536


class CapacityError(ValueError):
    """The model's weights cannot be made resident on the target (one-line diagnostic)."""


class _NoRoom(Exception):
    def __init__(self, task: int) -> None:
        super().__init__(task)
        self.task = task


def check_capacity(graph: ComputeGraph, target: Target) -> None:
    """Reject what no placement can hold: too many distinct tiles, or a task larger than a core."""
    n_w = len(graph.distinct_weights())
    cap = target.crossbars_per_core
    if n_w > target.crossbar_capacity:
        raise CapacityError(
            f"model needs {n_w} distinct crossbar tiles but the target has {target.num_cores} "
            f"cores x {cap} crossbars = {target.crossbar_capacity}"
        )
    for task in graph.tasks:
        if len(task.weights) > cap:
            raise CapacityError(
                f"task {task.id} ({task.name}) needs {len(task.weights)} crossbar tiles at once "
                f"but a core has {cap} crossbars"
            )


class _Tiles:
    """Dense tile indices per task (tile ids may be arbitrary integers)."""

    def __init__(self, graph: ComputeGraph) -> None:
        ids = sorted(graph.distinct_weights())
        dense = {w: i for i, w in enumerate(ids)}
        self.count = len(ids)
        self.of_task: list[IntArray] = [
            np.array(sorted(dense[w] for w in t.weights), dtype=np.int64) for t in graph.tasks
        ]
        self.key: list[tuple[int, ...]] = [tuple(a.tolist()) for a in self.of_task]


def pack_tiles(graph: ComputeGraph, target: Target) -> BoolArray:
    """Constructive residency (cores × tiles) that holds every task's tile set on some core.

    Tile sets go largest-weight-first, each to a core already holding most of it (reuse
    first). The first attempt breaks ties by the least work already packed (so the pinned
    schedule stays parallel); then, as the scheduling spec prescribes, best fit (least room
    left), the reverse order, and at most 16 single-choice deviations within 65,536
    core-candidate checks. Raises CapacityError when this bounded search fails, which is not
    a proof of infeasibility (bin packing is NP-hard).
    """
    check_capacity(graph, target)
    tiles = _Tiles(graph)
    work: dict[tuple[int, ...], int] = {}
    for task, k in zip(graph.tasks, tiles.key, strict=True):
        if k:
            work[k] = work.get(k, 0) + task.cost_ns
    sets = sorted(work, key=lambda k: (-len(k), k))
    P, cap = target.num_cores, target.crossbars_per_core
    checks = 0

    def attempt(order: list[tuple[int, ...]], balance: bool, deviate: int
                ) -> tuple[BoolArray | None, int]:
        nonlocal checks
        res = np.zeros((P, tiles.count), dtype=np.bool_)
        nres = np.zeros(P, dtype=np.int64)
        load = [0] * P
        decision = 0
        for k in order:
            idx = np.array(k, dtype=np.int64)
            have = res[:, idx].sum(axis=1)
            checks += P
            holders = np.nonzero(have == len(k))[0]
            if len(holders):
                p = min(holders.tolist(), key=lambda p: (load[p], p))
                load[p] += work[k]
                continue
            need = len(k) - have
            room = cap - nres
            ok = np.nonzero(need <= room)[0].tolist()
            if not ok:
                return None, decision
            if balance:
                ranked = sorted(ok, key=lambda p: (-int(have[p]), load[p], p))
            else:
                ranked = sorted(ok, key=lambda p: (-int(have[p]), int(room[p] - need[p]), p))
            pick = ranked[1] if decision == deviate and len(ranked) > 1 else ranked[0]
            nres[pick] += int(need[pick])
            res[pick, idx] = True
            load[pick] += work[k]
            decision += 1
        return res, -1

    res, _ = attempt(sets, True, -1)
    fail = -1
    if res is None:
        res, fail = attempt(sets, False, -1)
    if res is None:
        res, _ = attempt(sets[::-1], False, -1)
    for back in range(1, PACK_DEVIATIONS + 1):
        if res is not None or fail - back < 0 or checks >= PACK_CHECK_BUDGET:
            break
        res, _ = attempt(sets, False, fail - back)
    if res is None:
        raise CapacityError(
            f"could not pack {len(sets)} tile sets ({tiles.count} distinct crossbar tiles, "
            f"largest set {len(sets[0])}) into {P} cores x {cap} crossbars = {P * cap} within "
            f"{PACK_DEVIATIONS} retries / {checks} core checks (bounded search, not a proof)"
        )
    return res


def _eligibility(tiles: _Tiles, resident: BoolArray, cap: int) -> BoolArray:
    """(tasks × cores): the task's tiles are resident or fit in the free room."""
    room = cap - resident.sum(axis=1)
    out = np.ones((len(tiles.of_task), resident.shape[0]), dtype=np.bool_)
    cache: dict[tuple[int, ...], BoolArray] = {}
    for t, k in enumerate(tiles.key):
        if k:
            if k not in cache:
                idx = tiles.of_task[t]
                cache[k] = len(k) - resident[:, idx].sum(axis=1) <= room
            out[t] = cache[k]
    return out


def static_oct(graph: ComputeGraph, mesh: Mesh, eligible: BoolArray | None) -> IntArray:
    """Textbook OCT(t, p) (without w(t)); constant rows unless ``eligible`` excludes cores."""
    n = graph.num_tasks
    costs = np.array(graph.costs(), dtype=np.int64)
    if eligible is None:
        o = np.zeros(n, dtype=np.int64)
        for t in reversed(graph.topo_order):
            succ = graph.succs[t]
            if succ:
                o[t] = max(int(costs[c] + o[c]) for c, _ in succ)
        return np.broadcast_to(o[:, None], (n, mesh.P))
    table = np.zeros((n, mesh.P), dtype=np.int64)
    for t in reversed(graph.topo_order):
        succ = graph.succs[t]
        if not succ:
            continue
        cs = np.array([c for c, _ in succ], dtype=np.int64)
        fl = mesh.ns(np.array([mesh.flit_cycles(b) for _, b in succ], dtype=np.int64))
        v = np.where(eligible[cs], costs[cs][:, None] + table[cs], INF)
        v = np.minimum(v, INF)
        other = fl[:, None] + mesh.distance_transform(v)
        table[t] = np.minimum(np.minimum(v, other).max(axis=0), INF)
    return table


def upward_rank(graph: ComputeGraph, mesh: Mesh) -> IntArray:
    """HEFT upward rank: cost plus the longest path below with mean cross-core transfers."""
    P = mesh.P
    mean_hop_cycles = mesh.mean_hop_cycles()
    rank = np.zeros(graph.num_tasks, dtype=np.int64)
    costs = graph.costs()
    for t in reversed(graph.topo_order):
        below = 0
        for c, b in graph.succs[t]:
            comm = mesh.target.ns(mean_hop_cycles + mesh.flit_cycles(b)) if P > 1 else 0
            below = max(below, comm + int(rank[c]))
        rank[t] = costs[t] + below
    return rank


class _Cores:
    """Per-core timeline with idle gaps (sorted, disjoint), for insertion-based placement."""

    def __init__(self, P: int) -> None:
        self.last_end = np.zeros(P, dtype=np.int64)
        self.gap_start: list[list[int]] = [[] for _ in range(P)]
        self.gap_end: list[list[int]] = [[] for _ in range(P)]
        self.gap_max = np.zeros(P, dtype=np.int64)

    def earliest(self, ready: IntArray, d: int, feasible: BoolArray) -> IntArray:
        start: IntArray = np.maximum(ready, self.last_end)
        for p in np.nonzero((ready < self.last_end) & (self.gap_max >= d) & feasible)[0]:
            r = int(ready[p])
            gs_list, ge_list = self.gap_start[p], self.gap_end[p]
            # Gaps are disjoint and sorted, so ends are sorted too: skip those ending too soon.
            for i in range(bisect.bisect_left(ge_list, r + d), len(ge_list)):
                s = max(gs_list[i], r)
                if s + d <= ge_list[i]:
                    start[p] = s
                    break
        return start

    def occupy(self, p: int, s: int, e: int) -> None:
        last = int(self.last_end[p])
        gs_list, ge_list = self.gap_start[p], self.gap_end[p]
        if s >= last:
            if s > last:
                gs_list.append(last)
                ge_list.append(s)
                self.gap_max[p] = max(int(self.gap_max[p]), s - last)
            self.last_end[p] = max(last, e)
            return
        i = bisect.bisect_left(ge_list, e)
        gs, ge = gs_list[i], ge_list[i]
        pieces = [(a, b) for a, b in ((gs, s), (e, ge)) if b > a]
        gs_list[i : i + 1] = [a for a, _ in pieces]
        ge_list[i : i + 1] = [b for _, b in pieces]
        if ge - gs == self.gap_max[p]:
            self.gap_max[p] = max(
                (b - a for a, b in zip(gs_list, ge_list, strict=True)), default=0
            )


def _run(graph: ComputeGraph, target: Target, mesh: Mesh, tiles: _Tiles, lookahead: bool,
         pinned: BoolArray | None) -> tuple[list[int], list[int]]:
    n, P, cap = graph.num_tasks, mesh.P, target.crossbars_per_core
    costs = np.array(graph.costs(), dtype=np.int64)
    if pinned is None:
        resident = np.zeros((P, tiles.count), dtype=np.bool_)
        oct_table = static_oct(graph, mesh, None)
    else:
        resident = pinned.copy()
        oct_table = static_oct(graph, mesh, _eligibility(tiles, pinned, cap))
    nres = resident.sum(axis=1).astype(np.int64)
    # Tiles not yet resident anywhere; replicas may only use room beyond what they need.
    homed: BoolArray = resident.sum(axis=0) > 0
    unhomed = int(tiles.count - homed.sum())
    # Replicas (tiles already resident elsewhere) must leave room for the tiles that still
    # have no home: enough free slots in total, and one core with room for the largest tile
    # set that still has an unhomed tile (cheap guards; the packing fallback covers the rest).
    pending = sorted({k for k in tiles.key if k}, key=len, reverse=True)
    pending_pos = 0
    rank = upward_rank(graph, mesh)
    topo_pos = np.empty(n, dtype=np.int64)
    topo_pos[graph.topo_order] = np.arange(n)
    succ_ids = [np.array([c for c, _ in s], dtype=np.int64) for s in graph.succs]
    succ_flit_cycles = [
        np.array([mesh.flit_cycles(b) for _, b in s], dtype=np.int64) for s in graph.succs
    ]
    succ_flit_ns = [mesh.ns(f) for f in succ_flit_cycles]
    succ_has_tiles = [any(tiles.key[c] for c, _ in s) for s in graph.succs]

    pred_ready = np.zeros((n, P), dtype=np.int64)
    cores = _Cores(P)
    core_of = [-1] * n
    start = [0] * n
    indeg = [len(p) for p in graph.preds]
    heap = [(-int(rank[t]), int(topo_pos[t]), t) for t in range(n) if indeg[t] == 0]
    heapq.heapify(heap)
    all_cores = np.ones(P, dtype=np.bool_)
    no_need = np.zeros(P, dtype=np.int64)

    def need_on(idx: IntArray) -> IntArray:
        if len(idx) == 0:
            return no_need
        out: IntArray = len(idx) - resident[:, idx].sum(axis=1)
        return out

    while heap:
        _, _, t = heapq.heappop(heap)
        d = int(costs[t])
        ready = pred_ready[t]
        idx = tiles.of_task[t]
        room = cap - nres
        if len(idx):
            need = need_on(idx)
            first = int((~homed[idx]).sum())
            while pending_pos < len(pending) and homed[list(pending[pending_pos])].all():
                pending_pos += 1
            largest = len(pending[pending_pos]) if pending_pos < len(pending) else 0
            top = np.sort(room)[-2:] if P > 1 else np.array([0, room[0]])
            best_other = np.where(room == top[-1], top[0], top[-1])
            feasible = (need <= room) & (
                (need == first)
                | ((int(room.sum()) - need >= unhomed - first)
                   & (np.maximum(room - need, best_other) >= largest))
            )
            if not feasible.any():
                raise _NoRoom(t)
        else:
            need = no_need
            feasible = all_cores
        eft = cores.earliest(ready, d, feasible) + d
        if len(idx):
            eft = np.where(feasible, eft, INF)
        cs = succ_ids[t]
        score = eft
        if lookahead and len(cs):
            slack = np.maximum(pred_ready[cs], cores.last_end) - int(eft.min())
            np.maximum(slack, 0, out=slack)
            slack += costs[cs][:, None] + oct_table[cs]
            if succ_has_tiles[t]:
                elig = np.ones((len(cs), P), dtype=np.bool_)
                cache: dict[tuple[int, ...], BoolArray] = {}
                for i, c in enumerate(cs.tolist()):
                    k = tiles.key[c]
                    if k:
                        if k not in cache:
                            cache[k] = need_on(tiles.of_task[c]) <= room
                        elig[i] = cache[k]
                slack[~elig] = INF
            np.minimum(slack, INF, out=slack)
            # est >= eft, and est is beyond INF wherever t itself does not fit.
            score = eft + (succ_flit_ns[t][:, None] + mesh.distance_transform(slack)).max(axis=0)
        # Deterministic tie-breaking: score, EFT, core of a predecessor, core holding the
        # task's tiles, lowest id.
        mask = score == score.min()
        if np.count_nonzero(mask) > 1:
            masked = np.where(mask, eft, INF)
            mask &= masked == masked.min()
            if np.count_nonzero(mask) > 1 and graph.preds[t]:
                near = np.zeros(P, dtype=np.bool_)
                near[[core_of[u] for u, _ in graph.preds[t]]] = True
                if (mask & near).any():
                    mask &= near
            if np.count_nonzero(mask) > 1 and len(idx):
                holds = need == 0
                if (mask & holds).any():
                    mask &= holds
        p = int(np.argmax(mask))
        f = int(eft[p])
        s = f - d
        cores.occupy(p, s, f)
        if len(idx):
            nres[p] += int(need[p])
            resident[p, idx] = True
            unhomed -= int((~homed[idx]).sum())
            homed[idx] = True
        core_of[t] = p
        start[t] = s
        if len(cs):
            arrive = f + mesh.comm_rows(p, succ_flit_cycles[t])
            pred_ready[cs] = np.maximum(pred_ready[cs], arrive)
            for c in cs.tolist():
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(heap, (-int(rank[c]), int(topo_pos[c]), c))
    return core_of, start


def _list_schedule(graph: ComputeGraph, target: Target, lookahead: bool) -> MergeScheduleResult:
    t0 = time.perf_counter()
    graph.freeze()
    check_capacity(graph, target)
    mesh = Mesh(target)
    tiles = _Tiles(graph)
    notes: list[str] = []
    runs: list[tuple[int, list[int], list[int]]] = []
    costs = graph.costs()

    def keep(core_of: list[int], start: list[int]) -> None:
        span = max((s + c for s, c in zip(start, costs, strict=True)), default=0)
        runs.append((span, core_of, start))

    try:
        keep(*_run(graph, target, mesh, tiles, lookahead, None))
    except _NoRoom as exc:
        notes.append(f"capacity fallback: greedy placement found no room for task {exc.task}")
    # Under crossbar pressure greedy replication strands later tasks on the few cores that
    # hold their tiles; a work-balanced packing decided up front often schedules better, so
    # both are tried when the tiles fill at least half of the chip.
    if not runs or 2 * tiles.count >= target.crossbar_capacity:
        keep(*_run(graph, target, mesh, tiles, lookahead, pack_tiles(graph, target)))
        if len(runs) == 1 or runs[1][0] < runs[0][0]:
            notes.append("scheduled on a packed residency (largest-weight-first, reuse-first)")
    _, core_of, start = min(runs, key=lambda r: r[0])
    name = "peft" if lookahead else "eft"
    return MergeScheduleResult.build(
        graph, target, core_of, start, solver=name, status="HEURISTIC",
        bound_ns=lower_bounds(graph, target).makespan_ns,
        solve_seconds=time.perf_counter() - t0, notes=notes,
    )


def peft_schedule(graph: ComputeGraph, target: Target) -> MergeScheduleResult:
    """Capacity-aware PEFT with the state-dependent lookahead described in the module doc."""
    return _list_schedule(graph, target, lookahead=True)


def eft_schedule(graph: ComputeGraph, target: Target) -> MergeScheduleResult:
    """Same list scheduler without lookahead (EFT placement, HEFT-like), for comparison."""
    return _list_schedule(graph, target, lookahead=False)
