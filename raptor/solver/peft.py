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

Communication (:mod:`raptor.solver.comm`). A fragment already on a core (produced or
received there) is ready when it arrived; only the others need a new message. The vectorized
pass prices those over free links; the best cores by that score are then judged with the
messages reserved on the XY links and the output stores on the shared memory (``SHORTLIST``),
and the commit keeps the reservations, so later tasks see the contention it causes.
:func:`raptor.solver.comm.replay` judges each run as the simulator runs it
(``MergeScheduleResult.estimate_ns``); the better of the greedy and packed runs is returned.

Local memory. With a :class:`raptor.solver.graph.MemoryDemand`, the best run is also tried
with cheap tasks moved after their producer (:func:`follow_producers`), kept if it replays
faster.

Capacity. Reusing a resident tile takes no new crossbar slot. A tile set is copied onto at
most its layer's share of the cores (`copy_caps`). When greedy placement finds no
core with room (and, kept when better, whenever the tiles fill half of the chip), the
scheduler restarts from a pinned constructive packing (:func:`pack_tiles`), so every task has
a feasible core; remaining room still holds replicas. ``eft_schedule`` is the same scheduler
with the lookahead switched off (same priorities), to measure what it buys.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np

from raptor.gc_pause import collector_paused
from raptor.jit import kernel
from raptor.noc import (
    FULL,
    NEVER,
    Table,
    Timelines,
    has_room,
    route_into,
    serial_cycles,
    shared_network,
    walk,
    yx_sooner_on,
)
from raptor.solver.comm import replay
from raptor.solver.evaluate import lower_bounds, retime
from raptor.solver.graph import ComputeGraph
from raptor.solver.mesh import INF, BoolArray, IntArray, Mesh
from raptor.solver.pipeline.realize import core_sequence
from raptor.solver.schedule import MergeScheduleResult, core_order
from raptor.target import Target

PACK_DEVIATIONS = 16
COPY_ROOM = 0.9
"""Share of the chip's crossbars the copy caps may fill (`copy_caps`): filled to 97 %
(ResNet-18 at 4 MVM units), greedy placement ran out of room for a tile set on any one
core and fell back to the packed residency."""
PACK_CHECK_BUDGET = 65536


class CapacityError(ValueError):
    """The model's weights cannot be made resident on the target (one-line diagnostic)."""


class _NoRoom(Exception):
    """Greedy placement found no core for the task (``args[0]``)."""


def check_capacity(graph: ComputeGraph, target: Target) -> None:
    """Reject what no placement can hold: too many distinct tiles, or a task larger than a core."""
    n_w = len(graph.distinct_weights())
    cap = target.crossbars_per_core
    if n_w > target.crossbar_capacity:
        raise CapacityError(
            f"model needs {n_w} distinct crossbar tiles but the target has {target.num_cores} "
            f"cores x {cap} crossbars = {target.crossbar_capacity}")
    for task in graph.tasks:
        if len(task.weights) > cap:
            raise CapacityError(
                f"task {task.id} ({task.name}) needs {len(task.weights)} crossbar tiles at once "
                f"but a core has {cap} crossbars")


class _Tiles:
    """Dense tile indices per task (tile ids may be arbitrary integers)."""

    def __init__(self, graph: ComputeGraph) -> None:
        ids = sorted(graph.distinct_weights())
        dense = {w: i for i, w in enumerate(ids)}
        self.count = len(ids)
        self.layer: dict[tuple[int, ...], str] = {}
        """Each tile set's layer (`ComputeGraph.tile_layer` of its first tile)."""
        none = np.zeros(0, dtype=np.int64)  # shared by the tasks without tiles (read only)
        none.flags.writeable = False
        self.of_task: list[IntArray] = [none] * graph.num_tasks
        self.key: list[tuple[int, ...]] = [()] * graph.num_tasks
        self.work: dict[tuple[int, ...], int] = {}
        """Each tile set's work: the run time of the tasks that multiply with it."""
        for t, task in enumerate(graph.tasks):
            if task.weights:
                a = self.of_task[t] = np.array(sorted(dense[w] for w in task.weights),
                                               dtype=np.int64)
                k = self.key[t] = tuple(a.tolist())
                self.layer[k] = graph.tile_layer.get(ids[k[0]], "")
                self.work[k] = self.work.get(k, 0) + task.cost_ns


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
            tie = load if balance else (room - need).tolist()  # least work, or best fit
            ranked = sorted(ok, key=lambda p: (-int(have[p]), tie[p], p))
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
            f"{PACK_DEVIATIONS} retries / {checks} core checks (bounded search, not a proof)")
    return res


def copy_caps(tiles: _Tiles, cores: int, capacity: int, summed: bool = False
              ) -> dict[tuple[int, ...], int]:
    """The most cores each tile set may be resident on: its share of the cores its layer's
    lanes compete for (n of the layer's L lanes: n × cores / L, at most n); a tile set of no
    known layer (`ComputeGraph.tile_layer`: a generated graph) has no cap. Why: greedy
    replication copied the first layers' tiles onto every core that freed up first and left
    no room for the last ones, whose few lanes then ran one after another on their tiles'
    single core (ResNet-18: its 512-wide layers on 9 of 64 cores).

    When the shares would not fit the chip's crossbars, each is scaled by
    min(1, λ·sqrt(work per crossbar of its full share)), rounded, at least one copy, with
    the largest λ that fits: with a set's time ~ work / copies, this minimizes the sum of
    the sets' times for the crossbars (Lagrange). Scaling all shares alike had given ResNet-18's
    first convolution (19 % of the MVMs, two crossbars a copy) 33 of 64 cores at 4 MVM
    units, for the crossbars of its last layers (16 a copy, 0.3 % of the work each).

    ``summed``: each set gets λ·sqrt(its work per crossbar) copies instead, at most its
    share: the optimum of the summed times itself, where the scaling above also favours
    sets of a large share (by sqrt(share)). The row-by-row runs (`_RowsFirst`) use it:
    their layers overlap, so a layer of few sets need not wait for copies that sets of
    large shares would have. ResNet-18 at four units: layer 1's sets 37 copies instead of
    64, layer 4's 2-3 instead of one; 1,489,896 ns against 1,596,468 (the other runs with
    these caps: 1,705,676 at best; docs/benchmarks.md "Issue #25, sixteenth session")."""
    lanes: dict[tuple[int, ...], int] = {}
    for k in tiles.key:
        if k and tiles.layer[k]:  # tile sets of no known layer are not capped
            lanes[k] = lanes.get(k, 0) + 1
    per_layer: dict[str, int] = {}
    for k, n in lanes.items():
        per_layer[tiles.layer[k]] = per_layer.get(tiles.layer[k], 0) + n
    want = {k: min(n, -(-n * cores // per_layer[tiles.layer[k]])) for k, n in lanes.items()}
    if sum(len(k) * c for k, c in want.items()) <= capacity:
        return want
    root = {k: math.sqrt(tiles.work[k] / (len(k) * (1 if summed else c)))
            for k, c in want.items()}

    def scaled(lam: float) -> dict[tuple[int, ...], int]:
        if summed:
            return {k: max(1, min(c, round(lam * root[k]))) for k, c in want.items()}
        return {k: max(1, round(c * min(1.0, lam * root[k]))) for k, c in want.items()}

    # from λ = 0 to where every set has its share
    lo, hi = 0.0, max((c if summed else 1) / max(root[k], 1e-9) for k, c in want.items())
    for _ in range(60):  # bisection on λ: the crossbars taken grow with it
        mid = (lo + hi) / 2
        if sum(len(k) * c for k, c in scaled(mid).items()) <= capacity:
            lo = mid
        else:
            hi = mid
    return scaled(lo)


def _fits(tiles: _Tiles, resident: BoolArray, room: IntArray, tasks: list[int]) -> BoolArray:
    """(tasks × cores): each task's tiles are resident or fit in the free ``room``."""
    out = np.ones((len(tasks), resident.shape[0]), dtype=np.bool_)
    cache: dict[tuple[int, ...], BoolArray] = {}
    for i, t in enumerate(tasks):
        k = tiles.key[t]
        if k:
            if k not in cache:
                cache[k] = len(k) - resident[:, tiles.of_task[t]].sum(axis=1) <= room
            out[i] = cache[k]
    return out


def _latest(rows: Iterator[IntArray], cores: int) -> IntArray:
    """Per core, the latest of the rows (all zero when there are none): when a task's
    last input could be there. The first row is reused as the accumulator."""
    ready = next(rows, None)
    if ready is None:
        return np.zeros(cores, dtype=np.int64)
    for row in rows:
        np.maximum(ready, row, out=ready)
    return ready


def static_oct(graph: ComputeGraph, mesh: Mesh, eligible: BoolArray | None) -> IntArray:
    """Textbook OCT(t, p) (without w(t)); constant rows unless ``eligible`` excludes cores."""
    n = graph.num_tasks
    costs = np.array(graph.costs(), dtype=np.int64)
    if eligible is None:  # the longest path of work below t: its bottom level less its cost
        o = np.array(graph.bottom_levels(), dtype=np.int64) - costs
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
    # each edge's reader and mean transfer (edges order: the succs lists end to end); no
    # transfer on one core
    _, reader, nbytes, _ = graph.edge_arrays()
    comm = (mesh.ns(mesh.mean_hop_cycles() + serial_cycles(mesh.target, nbytes)) if mesh.P > 1
            else np.zeros_like(nbytes)).tolist()
    child = reader.tolist()
    rank = [0] * graph.num_tasks
    costs = graph.costs()
    first = np.cumsum([0, *map(len, graph.succs)]).tolist()
    for t in reversed(graph.topo_order):
        below = 0
        for i in range(first[t], first[t + 1]):
            if comm[i] + rank[child[i]] > below:
                below = comm[i] + rank[child[i]]
        rank[t] = costs[t] + below
    return np.array(rank, dtype=np.int64)


class _Cores:
    """Per-core timeline with idle gaps (sorted, disjoint), for insertion-based placement.
    Gaps shorter than ``least`` ns (the shortest task) are not kept: no task fits them.

    The gaps are rows of two (cores x room) int64 arrays with a count per core (the room
    doubles when a core's row is full), searched and changed by compiled kernels
    (`raptor.jit`): one call per task finds every core's earliest finish (`finishes`),
    where bisecting Python lists and arrays of gaps took ~1.2 s of 100,000 tasks on 16x16
    (up to 2,000 gaps a core; the last fifth of the tasks looks up ~56 cores each)."""

    def __init__(self, P: int, least: int) -> None:
        self.least = max(least, 1)
        self.last_end = np.zeros(P, dtype=np.int64)
        self.gap_start = np.zeros((P, 16), dtype=np.int64)
        self.gap_end = np.zeros((P, 16), dtype=np.int64)
        self.count = np.zeros(P, dtype=np.int64)
        """How many gaps each core has (its row's first entries)."""
        self.widest_gap = np.zeros(P, dtype=np.int64)
        self.everywhere = np.ones(P, dtype=np.bool_)
        """The ``feasible`` argument meaning every core."""

    @property
    def arrays(self) -> Gaps:
        """What the kernels take: (gap starts, gap ends, counts, last ends, widest gaps)."""
        return self.gap_start, self.gap_end, self.count, self.last_end, self.widest_gap

    def finishes(self, ready: IntArray, d: int, feasible: BoolArray) -> IntArray:
        """Per core, the earliest finish of ``d`` ns starting at or after ``ready`` (INF
        where not ``feasible``)."""
        out = np.empty_like(ready)
        _finishes(ready, d, feasible, self.last_end, self.widest_gap, self.gap_start,
                  self.gap_end, self.count, out)
        return out

    def occupy(self, p: int, s: int, e: int) -> bool:
        """Core ``p`` busy over [s, e) (idle there before); whether the arrays grew."""
        grown = self.count[p] == self.gap_start.shape[1]
        if grown:  # a split may add a gap: room first
            self.gap_start = np.concatenate((self.gap_start, np.zeros_like(self.gap_start)), 1)
            self.gap_end = np.concatenate((self.gap_end, np.zeros_like(self.gap_end)), 1)
        _occupy(p, s, e, self.least, self.last_end, self.widest_gap, self.gap_start,
                self.gap_end, self.count)
        return bool(grown)

    def earliest_on(self, p: int, ready: int, d: int) -> int:
        """Earliest start >= ``ready`` of ``d`` idle ns on core ``p``."""
        return int(_earliest_on(p, ready, d, self.arrays))


Gaps = tuple[IntArray, IntArray, IntArray, IntArray, IntArray]


@kernel
def _earliest_on(p: int, ready: int, d: int, gaps: Gaps) -> int:
    """`_Cores.earliest_on` on its arrays."""
    starts, ends, count, last, widest = gaps
    if ready >= last[p] or widest[p] < d:
        return max(ready, last[p])
    return _gap_start(starts[p], ends[p], count[p], ready, d, last[p])


@kernel
def _gap_start(starts: IntArray, ends: IntArray, n: int, ready: int, d: int, last: int) -> int:
    """The earliest start >= ``ready`` of ``d`` ns in one of a core's ``n`` gaps, else its
    last end ``last``. Gaps are disjoint and sorted, so their ends are too: skip those ending
    too soon; from there on a gap ends late enough for a start at ``ready``, so one that
    starts by then holds it."""
    i = np.searchsorted(ends[:n], ready + d)
    while i < n:
        a = starts[i]
        if a <= ready:
            return ready
        if a + d <= ends[i]:
            return a
        i += 1
    return last


@kernel
def _finishes(ready: IntArray, d: int, feasible: BoolArray, last: IntArray, widest: IntArray,
              starts: IntArray, ends: IntArray, count: IntArray, out: IntArray) -> None:
    """`_Cores.finishes` into ``out``. A gap ends by the core's last end: where ready is at
    least that, no gap ends by ready + d; where it is not, the start is the last end, which
    a core without a gap as wide as d keeps."""
    for p in range(len(ready)):
        if not feasible[p]:
            out[p] = INF
            continue
        r, n = ready[p], count[p]
        s = max(r, last[p])
        if n and ends[p, n - 1] >= r + d and widest[p] >= d:
            s = _gap_start(starts[p], ends[p], n, r, d, last[p])
        out[p] = s + d


@kernel
def _occupy(p: int, s: int, e: int, least: int, last: IntArray, widest: IntArray,
            starts: IntArray, ends: IntArray, count: IntArray) -> None:
    """`_Cores.occupy` on the arrays (room for one more gap on ``p`` given). A task past
    the last end may leave a gap before it; one inside a gap splits it into the pieces at
    least ``least`` wide."""
    n = count[p]
    gs, ge = starts[p], ends[p]
    if s >= last[p]:
        if s - last[p] >= least:
            gs[n], ge[n] = last[p], s
            count[p] = n + 1
            widest[p] = max(widest[p], s - last[p])
        last[p] = max(last[p], e)
        return
    i = np.searchsorted(ge[:n], e)
    a, b = gs[i], ge[i]
    keep_before, keep_after = s - a >= least, b - e >= least
    pieces = int(keep_before) + int(keep_after)
    if pieces == 0:
        gs[i:n - 1] = gs[i + 1:n].copy()
        ge[i:n - 1] = ge[i + 1:n].copy()
    elif pieces == 2:
        gs[i + 2:n + 1] = gs[i + 1:n].copy()
        ge[i + 2:n + 1] = ge[i + 1:n].copy()
        ge[i], gs[i + 1], ge[i + 1] = s, e, b
    elif keep_before:
        ge[i] = s
    else:
        gs[i] = e
    count[p] = n = n - 1 + pieces
    if b - a == widest[p]:
        w = 0
        for j in range(n):
            w = max(w, ge[j] - gs[j])
        widest[p] = w


SHORTLIST = 64
"""At most this many candidate cores, in order of their free-link score, are judged with
their messages reserved on the links; the search stops at the first core whose free-link
score cannot beat the best exact one (reservations only ever delay), skips a core whose
free-link key cannot, and stops a core's messages once its arrival is past what could still
win (``limit`` in `_judging`). Judging only the best
4 made the schedules of two of the benchmark CNNs 30-40 % longer (and ResNet-18's 9 %)."""


FLOOR_AFTER = 2
"""After this many cores of one task judged exactly, the rest of its shortlist is checked
against a lower bound of the exact key first (`_ListScheduler.ready_floor`, computed when a
core first reaches that check: 1,153 of 10,000 tasks on 16x16, where computing it once the
second core was judged took 1,633): a task whose messages wait at their source had every
one of its 64 cores judged (6.7 % of the tasks of 10,000 x 256)."""


NEAR_CORES = 16
"""At most this many cores that can win make `_ListScheduler.bounded` price the lookahead on
them alone (a dense minimum over their rows of the hop matrix)."""


@kernel
def _held_into(row: IntArray, f: int, hold: IntArray) -> None:
    """``row`` (per core) with fragment f's arrival wherever it is (``hold``: `_ready_on`)."""
    e = f
    while e >= 0:
        row[hold[0, e]] = hold[1, e]
        e = hold[2, e]

Graph = tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray,
              IntArray]
"""The graph as the kernels know it (`_graph_parts`): per task (offsets) the fragments it
reads, its predecessors, and its local reads (fragment, extra ns); per fragment its
producer and message kind (`raptor.noc.Network.kind`)."""


@kernel
def _graph_parts(packed: IntArray, at: IntArray) -> Graph:
    """`Graph` from the one array ``packed`` it is kept in, part ``i`` from ``at[i]``
    (one argument instead of nine)."""
    return (packed[at[0]:at[1]], packed[at[1]:at[2]], packed[at[2]:at[3]],
            packed[at[3]:at[4]], packed[at[4]:at[5]], packed[at[5]:at[6]],
            packed[at[6]:at[7]], packed[at[7]:at[8]], packed[at[8]:at[9]])


@kernel
def _task_ns(t: int, cost: int, p: int, graph: Graph, placed: IntArray) -> int:
    """Task t's run time on p: a local read of a cropped value whose producer ran on p
    costs an extra copy (``placed[0]``: each task's core)."""
    loc_off, loc_frag, loc_ns, producer = graph[4], graph[5], graph[6], graph[7]
    d = cost
    for k in range(loc_off[t], loc_off[t + 1]):
        if placed[0, producer[loc_frag[k]]] == p:
            d += loc_ns[k]
    return d


@kernel
def _duration(t: int, cost: int, p: int, packed: IntArray, at: IntArray,
              placed: IntArray) -> int:
    """`_task_ns` from Python."""
    return _task_ns(t, cost, p, _graph_parts(packed, at), placed)


Net = tuple[IntArray, IntArray, IntArray, IntArray, bool, int, int]
"""The mesh as the kernels know it: `raptor.noc.Network.by_hops`, its `next_links` (XY,
YX, where each link leads), whether the planner picks routes (`Network.yx_sooner`), the
switches' base (-1 unless a message takes its sender's switch) and the hop's ns."""


@kernel
def _ready_on(p: int, late: bool, commit: bool, limit: int, t: int, graph: Graph,
              placed: IntArray, hold: IntArray, hold_used: IntArray, net: Net, links: Table,
              got: IntArray) -> int:
    """`_ListScheduler.judge`'s data-ready time of task t's reads on core ``p``: the latest
    arrival, each fragment where it is on p (``hold``: per fragment a list of (core,
    arrival, next), its producer's entry first, at the fragment's index) or its new message
    from its producer's core (``placed``: each task's core and end) walked on the link
    table over its route (`raptor.noc.route_into`: XY, or YX when the planner picks routes
    and `raptor.noc.yx_sooner_on` says so; a switched protocol's message takes its
    sender's switch), timed by `raptor.noc.Network.by_hops`. Once the latest passes
    ``limit``, a time past it (the caller has no use for more). With ``late``, the latest
    producer first (unreserved messages do not meet each other, and the latest reach the
    limit soonest); with ``commit`` the messages are reserved and their arrivals added to
    ``hold`` (room for one per read given) and to ``got`` by read (-1: none sent), or
    `raptor.noc.FULL` returned, nothing reserved, when the link table lacks room."""
    read_off, read_frag, producer, kind_of = graph[0], graph[1], graph[7], graph[8]
    by_hops, next_xy, next_yx, link_to, routes, switch, hop = net
    first = read_off[t]
    n = read_off[t + 1] - first
    order = np.arange(n)
    if late:  # stable: ties keep the reads' order
        for i in range(1, n):
            j = i
            while j and placed[1, producer[read_frag[first + order[j - 1]]]] < \
                    placed[1, producer[read_frag[first + order[j]]]]:
                order[j - 1], order[j] = order[j], order[j - 1]
                j -= 1
    route = np.empty(by_hops.shape[1], dtype=np.int64)
    other = np.empty(by_hops.shape[1], dtype=np.int64)
    if commit:  # room for a new interval per read on every link it may take
        for i in range(n):
            src = placed[0, producer[read_frag[first + i]]]
            for way in range(2 if routes else 1):
                m = route_into(next_yx if way else next_xy, link_to, src, p, route)
                if switch >= 0 and m:
                    route[0], m = switch + src, 1
                for k in range(m):
                    if not has_room(links, route[k], n):
                        return FULL
    ready = 0
    for i in order:
        f = read_frag[first + i]
        src, inject = placed[0, producer[f]], placed[1, producer[f]]
        a = -1
        e = f
        while e >= 0:
            if hold[0, e] == p:
                a = hold[1, e]
                break
            e = hold[2, e]
        if commit:
            got[i] = -1
        if a < 0:
            m = route_into(next_xy, link_to, src, p, route)
            ser, transfer = by_hops[kind_of[f], m, 0], by_hops[kind_of[f], m, 1]
            taken = route
            if switch >= 0 and m:
                route[0] = switch + src
                m = 1
            elif routes and m:
                other_m = route_into(next_yx, link_to, src, p, other)
                if yx_sooner_on(links, route, m, other, other_m, ser, hop, inject):
                    taken = other
            if m == 0:
                a = inject
            else:
                a = walk(links, taken, m, ser, transfer, hop, inject, commit and ser > 0,
                         NEVER if commit else limit - transfer - inject)
            if commit:  # f is now on p too (a second read of it finds it there)
                got[i] = a
                k = hold_used[0]
                hold[0, k], hold[1, k], hold[2, k] = p, a, hold[2, f]
                hold[2, f] = k
                hold_used[0] = k + 1
        if a > ready:
            ready = a
            if ready > limit:
                break
    return ready


@kernel
def _slot(p: int, ready: int, d: int, sh: int, gaps: Gaps, memory: Table) -> int:
    """The start of a task of ``d`` ns on p from ``ready``, its shared-memory part (its
    last ``sh`` ns) waiting for the memory: the start moves later by that wait (the core
    idles before the task instead of inside it)."""
    s = _earliest_on(p, ready, d, gaps)
    if sh:
        only = np.zeros(1, dtype=np.int64)
        for _ in range(4):
            store = walk(memory, only, 1, sh, 0, 0, s + d - sh, False, NEVER)
            if store == s + d - sh:
                break
            s = _earliest_on(p, store + sh - d, d, gaps)
    return s


@kernel
def _less(a: IntArray, b: IntArray) -> bool:
    """Whether key ``a`` comes before key ``b`` (lexicographic)."""
    for i in range(len(a)):
        if a[i] != b[i]:
            return bool(a[i] < b[i])
    return False


World = tuple[Graph, IntArray, IntArray, IntArray, Net, Table, Gaps, Table]
"""What `_judging` and `_bounding` read: `Graph`, the placements, the holders and their
count (`_ready_on`), the mesh, the links, the cores' gaps and the shared memory."""


@kernel
def _decide(bounding: bool, t: int, cores: IntArray, scores: IntArray, efts: IntArray,
            at: int, floor: IntArray, eft: IntArray, rows: IntArray, hop_ns: IntArray,
            near: int, buf: IntArray, state: IntArray, need: IntArray, has_tiles: bool,
            cost: int, slack: int, sh: int, floors: bool, packed: IntArray, parts: IntArray,
            placed: IntArray, hold: IntArray, hold_used: IntArray, by_hops: IntArray,
            next_xy: IntArray, next_yx: IntArray, link_to: IntArray, routes: bool,
            switch: int, hop: int, starts: IntArray, ends: IntArray, count: IntArray,
            base: IntArray, room: IntArray, used: IntArray, gap_start: IntArray,
            gap_end: IntArray, gap_count: IntArray, last: IntArray, widest: IntArray,
            mem_starts: IntArray, mem_ends: IntArray, mem_count: IntArray,
            mem_base: IntArray, mem_room: IntArray, mem_used: IntArray, got: IntArray) -> int:
    """`_bounding` (``bounding``: ``eft``, ``rows``, ``hop_ns``, ``near``, ``buf``) or
    `_judging` (``cores``, ``scores``, ``efts``, ``at``, ``floor``) from Python, `World`
    given array by array (numba types a tuple of arrays argument by argument in Python:
    4.9 us a call, 1.3 so)."""
    world = (_graph_parts(packed, parts), placed, hold, hold_used,
             (by_hops, next_xy, next_yx, link_to, routes, switch, hop),
             (starts, ends, count, base, room, used),
             (gap_start, gap_end, gap_count, last, widest),
             (mem_starts, mem_ends, mem_count, mem_base, mem_room, mem_used))
    if bounding:
        return _bounding(t, eft, rows, hop_ns, near, buf, state, need, has_tiles, cost,
                         slack, sh, floors, world, got)
    return _judging(t, cores, scores, efts, at, floor, state, need, has_tiles, cost, slack,
                    sh, floors, world, got)


@kernel
def _bounding(t: int, eft: IntArray, rows: IntArray, hop_ns: IntArray, near: int,
              buf: IntArray, state: IntArray, need: IntArray, has_tiles: bool, cost: int,
              slack: int, sh: int, floors: bool, world: World, got: IntArray) -> int:
    """`_ListScheduler.bounded` after `children_slack` (its ``rows``, none to price no
    lookahead; ``hop_ns``: the mesh's hop ns between cores): the core of the least EFT
    judged (`_judging`); then, unless more than ``near`` cores can win (returns -2, that
    core's key in ``state``), those cores' scores, and the others judged in the score's
    order (``buf``: their cores, scores, EFTs). Returns -1 when done (the choice in
    ``state``), or, where `_judging` wants the floor, the index it stopped at (the cores
    left in ``buf``, how many in ``state[9]``). One call per task, where its numpy calls
    on small arrays took ~1 s of 100,000 tasks on 16x16."""
    p0 = 0
    for q in range(len(eft)):
        if eft[q] < eft[p0]:
            p0 = q
    x0 = eft[p0]
    wait0 = least = 0
    for r in range(len(rows)):  # the latest of the children's least waits
        w, m = INF, INF
        for q in range(len(eft)):
            w = min(w, rows[r, q] + hop_ns[p0, q])
            m = min(m, rows[r, q])
        wait0, least = max(wait0, w) if r else w, max(least, m) if r else m
    buf[0, 0], buf[1, 0], buf[2, 0] = p0, x0 + wait0, x0
    state[0], state[6], state[7], state[8] = 0, -1, 0, 0
    _judging(t, buf[0, :1], buf[1, :1], buf[2, :1], 0, buf[0, :0], state, need, has_tiles,
             cost, slack, sh, floors, world, got)
    if not state[0]:  # t fits nowhere
        return -1
    bound = state[1] - least + slack
    n = 0
    for q in range(len(eft)):
        if eft[q] <= bound:
            n += 1
    if n > near:
        return -2
    if n == 1:  # p0's alone
        return -1
    m = 0
    for q in range(len(eft)):
        if eft[q] > bound or q == p0:
            continue
        score = eft[q]
        for r in range(len(rows)):
            w = INF
            for c in range(len(eft)):
                w = min(w, rows[r, c] + hop_ns[q, c])
            score = eft[q] + w if r == 0 else max(score, eft[q] + w)
        j = m  # by score, then EFT, then core
        while j and (buf[1, j - 1] > score or (buf[1, j - 1] == score and buf[2, j - 1] > eft[q])):
            buf[0, j], buf[1, j], buf[2, j] = buf[0, j - 1], buf[1, j - 1], buf[2, j - 1]
            j -= 1
        buf[0, j], buf[1, j], buf[2, j] = q, score, eft[q]
        m += 1
    state[8], state[9] = 0, m
    return _judging(t, buf[0, :m], buf[1, :m], buf[2, :m], 0, buf[0, :0], state, need,
                    has_tiles, cost, slack, sh, floors, world, got)


KernelArgs = tuple[IntArray, IntArray, IntArray, IntArray, IntArray,
                   IntArray, IntArray, IntArray, IntArray, bool, int, int,
                   IntArray, IntArray, IntArray, IntArray, IntArray, IntArray,
                   IntArray, IntArray, IntArray, IntArray, IntArray,
                   IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]
"""`_ListScheduler.arrays`: the packed graph and its parts, the placements, the holders
and their count, `Net`, the links' `raptor.noc.Table`, `Gaps`, the memory's table."""


@kernel
def _reads_on(p: int, t: int, commit: bool, packed: IntArray, at: IntArray, placed: IntArray,
               hold: IntArray, hold_used: IntArray, by_hops: IntArray, next_xy: IntArray,
               next_yx: IntArray, link_to: IntArray, routes: bool, switch: int, hop: int,
               starts: IntArray, ends: IntArray, count: IntArray, base: IntArray,
               room: IntArray, used: IntArray, got: IntArray) -> int:
    """`_ready_on` from Python, committing or not (then the latest producer first, without
    a limit), its tuples given array by array (numba types a tuple of arrays argument by
    argument in Python, 2-3 us a call)."""
    return _ready_on(p, not commit, commit, INF, t, _graph_parts(packed, at), placed, hold,
                     hold_used, (by_hops, next_xy, next_yx, link_to, routes, switch, hop),
                     (starts, ends, count, base, room, used), got)


@kernel
def _judging(t: int, cores: IntArray, scores: IntArray, efts: IntArray, at: int,
             floor: IntArray, state: IntArray, need: IntArray, has_tiles: bool, cost: int,
             slack: int, sh: int, floors: bool, world: World, got: IntArray) -> int:
    """`_ListScheduler.judge`'s walk over ``cores`` (in the score's order, with their
    ``scores`` and ``efts``) from index ``at``, the best so far in ``state``: [whether
    there is one, its key (5), its core, its start, cores judged]. Returns -1 when done,
    or the index where the lower bound ``floor`` is first needed and not given (empty):
    the caller computes it (`_ListScheduler.ready_floor`) and calls again from there.
    One call per `judge`, where a call per core of `_ready_on` and the Python around it
    took ~2.5 s of 100,000 tasks on 16x16."""
    graph, placed, hold, hold_used, net, links, gaps, memory = world
    pred_off, pred_task = graph[2], graph[3]
    key = np.empty(5, dtype=np.int64)
    best = state[1:6]
    has_best, judged = state[0] == 1, state[8]
    top = best[0] if has_best else INF
    plain = slack == 0 and sh == 0
    d = cost
    for i in range(at, len(cores)):
        p, sc, ef = cores[i], scores[i], efts[i]
        if ef >= INF:  # t does not fit there (nor on any later core)
            break
        far = 1
        for k in range(pred_off[t], pred_off[t + 1]):
            if placed[0, pred_task[k]] == p:
                far = 0
        tiled = 1 if has_tiles and need[p] != 0 else 0
        if has_best:
            if sc - slack > top:
                break  # no later candidate can beat the best exact score
            # without local reads the exact key is at least this one (f >= ef)
            if slack == 0 and sc >= top:
                key[0], key[1], key[2], key[3], key[4] = sc, ef, far, tiled, p
                if sc > top or not _less(key, best):
                    continue
            if judged >= FLOOR_AFTER and floors:  # (so more than one core)
                if len(floor) == 0:
                    state[8] = judged
                    return i
                if sc - ef + floor[p] > top:
                    continue
        if not plain:
            d = _task_ns(t, cost, p, graph, placed)
        # the key's head is at least sc - ef + ready + d: past ``limit`` p cannot win
        limit = top - sc + ef - d if has_best else INF
        ready = _ready_on(p, True, False, limit, t, graph, placed, hold, hold_used, net, links,
                          got)
        judged += 1
        if ready > limit:
            continue
        s = _earliest_on(p, ready, d, gaps) if plain else _slot(p, ready, d, sh, gaps, memory)
        f = s + d
        key[0], key[1], key[2], key[3], key[4] = sc - ef + f, f, far, tiled, p
        if not has_best or _less(key, best):
            best[:] = key
            state[0], state[6], state[7] = 1, p, s
            has_best, top = True, key[0]
    state[8] = judged
    return -1


class _ListScheduler:
    """One list-scheduling pass: capacity-aware candidates, fragment-aware data-ready times,
    EFT, the lookahead score, exact link reservations on a shortlist, then the commit."""

    def __init__(self, graph: ComputeGraph, target: Target, mesh: Mesh, tiles: _Tiles,
                 lookahead: bool, pinned: BoolArray | None, eager: bool = False,
                 copies: bool = True, routes: bool = False) -> None:
        self.g, self.mesh, self.tiles = graph, mesh, tiles
        self.routes = routes
        """Whether its link planner picks each message's route (`Network.yx_sooner`), as
        the replay does under ``routing = "xy-yx"``, rather than planning every one XY."""
        self.lookahead = lookahead
        self.eager = eager
        """Whether a task without crossbars (a partial-sum addition, a pool, a residual
        add: short vector work) is placed as soon as its producers are, right after them
        while their cores are free, rather than after every lane of higher rank (which
        left its inputs waiting in local memory and the next layer's lanes without
        inputs: on ResNet-18 the cores idled at each layer's end)."""
        n, P = graph.num_tasks, mesh.P
        self.P, self.cap = P, target.crossbars_per_core
        self.costs = np.array(graph.costs(), dtype=np.int64)
        self.cost_of: list[int] = self.costs.tolist()
        self.longest = graph.max_durations()
        """Each task's cost with every local read's extra (its free-link EFT's duration)."""
        self.shared_of = [task.shared_ns for task in graph.tasks]
        if pinned is None:
            self.resident = np.zeros((P, tiles.count), dtype=np.bool_)
            self.oct_table = static_oct(graph, mesh, None)
        else:
            self.resident = pinned.copy()
            room = self.cap - pinned.sum(axis=1)
            self.oct_table = static_oct(graph, mesh, _fits(tiles, pinned, room, list(range(n))))
        self.nres = self.resident.sum(axis=1).astype(np.int64)
        # Replicas (tiles already resident elsewhere) must leave room for the tiles with no
        # home yet: enough free slots in total, and one core with room for the largest tile
        # set that still has one (cheap guards; the packing fallback covers the rest).
        self.homed: BoolArray = self.resident.sum(axis=0) > 0
        self.unhomed = int(tiles.count - self.homed.sum())
        self.pending = sorted({k for k in tiles.key if k}, key=len, reverse=True)
        self.copy_cap = (copy_caps(tiles, P, int(target.crossbar_capacity * COPY_ROOM))
                         if copies else dict.fromkeys(tiles.key, 1))
        self.pending_pos = 0
        self.rank = upward_rank(graph, mesh)
        self.topo_pos = np.empty(n, dtype=np.int64)
        self.topo_pos[graph.topo_order] = np.arange(n)
        # per task: children, their flit cycles (lists) and flit ns (columns), from flat arrays
        ends = np.cumsum([len(s) for s in graph.succs]).tolist()
        cut = list(itertools.pairwise([0, *ends]))
        children = np.array([c for s in graph.succs for c, _ in s], dtype=np.int64)
        flit_cycles = serial_cycles(target, np.array([b for s in graph.succs for _, b in s],
                                                     dtype=np.int64))
        self.succ_ids: list[IntArray] = [children[a:b] for a, b in cut]
        self.succ_list: list[list[int]] = [[c for c, _ in s] for s in graph.succs]
        flit_list = flit_cycles.tolist()
        self.succ_flits_list: list[list[int]] = [flit_list[a:b] for a, b in cut]
        flit_ns = mesh.ns(flit_cycles)[:, None]
        self.succ_flit_ns: list[IntArray] = [flit_ns[a:b] for a, b in cut]
        # w(c) + O(c, ·) per task when O has constant rows (the lookahead adds it per child)
        self.child_cost = None if pinned is not None else self.costs + self.oct_table[:, 0]
        # ... and, with the edge's flit ns, per task's children: a constant per row may go
        # into the transform's input instead of its output (it shifts with it)
        self.succ_const: list[list[int]] | None = None
        if self.child_cost is not None:
            const = (self.child_cost[children] + flit_ns[:, 0]).tolist()
            self.succ_const = [const[a:b] for a, b in cut]
        self.succ_has_tiles = ([any(tiles.key[c] for c in s) for s in self.succ_list]
                               if tiles.count else [False] * n)
        self.pred_ready: dict[int, IntArray] = {}
        """R_c: when c's inputs from its placed producers could be on each core (free
        links), kept from c's first placed producer while another producer, whose lookahead
        reads it, is still to be placed (a tasks x cores table took 205 MB at 100k tasks on
        256 cores; made for the last producer too, half of the rows were never read)."""
        self.unplaced = [len(p) for p in graph.preds]
        """Per task, how many of its producers are still to be placed."""
        self.cores = _Cores(P, min(self.cost_of, default=0))
        self.net = shared_network(target)
        self.links = Timelines(self.net.num_links)
        """Message reservations on the mesh links: cut-through, inserted into idle time."""
        self.memory = Timelines(1)
        self.core_of = [-1] * n
        self.start = [0] * n
        self.end = [0] * n
        self.produces: list[list[int]] = [[] for _ in range(n)]
        for f, frag in enumerate(graph.fragments):
            self.produces[frag.producer].append(f)
        self.frag_producer = [frag.producer for frag in graph.fragments]
        self.frag_bytes = [frag.bytes for frag in graph.fragments]
        self.frag_flits: list[int] = serial_cycles(
            target, np.array(self.frag_bytes, dtype=np.int64)).tolist()
        kinds = {b: self.net.kind(b) for b in set(self.frag_bytes)}
        self.frag_kind = [kinds[b] for b in self.frag_bytes]
        """Each fragment's message kind (`raptor.noc.Network.kind`), for `_ready_on`."""
        self.next_xy, self.next_yx, self.link_to = self.net.next_links()
        self.switch = self.net.switch_base if self.net.switched else -1
        self.got = np.zeros(max(map(len, graph.reads), default=0), dtype=np.int64)
        """`_ready_on`'s arrivals of a commit's new messages."""
        local = [graph.local_reads.get(t, []) for t in range(n)]
        reader, read, producer, _ = graph.read_arrays()  # (arrays made once per graph)
        src, dst, _, _ = graph.edge_arrays()
        parts = [np.searchsorted(reader, np.arange(n + 1)), read,
                 np.searchsorted(dst, np.arange(n + 1), sorter=np.argsort(dst, kind="stable")),
                 src[np.argsort(dst, kind="stable")],
                 np.cumsum([0, *map(len, local)]),
                 np.array([f for r in local for f, _ in r], dtype=np.int64),
                 np.array([ns for r in local for _, ns in r], dtype=np.int64),
                 producer, np.array(self.frag_kind, dtype=np.int64)]
        self.packed = np.concatenate(parts).astype(np.int64)
        self.parts = np.cumsum([0, *map(len, parts)]).astype(np.int64)
        """The graph as the kernels know it (`Graph`, `_graph_parts`)."""
        self.placed = np.zeros((2, n), dtype=np.int64)
        """Each task's core and end, for the kernels (its core -1 until placed)."""
        self.placed[0] = -1
        frags = len(graph.fragments)
        self.hold = np.full((3, 2 * frags + 16), -1, dtype=np.int64)
        """Where each fragment is (or will be: its producer's core, its end; the cores it
        was sent to, its arrival there): entry f its producer's (core, end, the next
        entry), then a list of (core, arrival, next entry) from f's (`_ready_on`)."""
        self.hold_used = np.array([frags], dtype=np.int64)
        self.no_floor = np.zeros(0, dtype=np.int64)
        self.state = np.zeros(10, dtype=np.int64)
        """`_judging`'s best so far: [whether there is one, its key (5), its core, its
        start, cores judged by the last call], then how many cores `_bounding` left."""
        self.buf = np.zeros((3, P), dtype=np.int64)
        """`_bounding`'s cores, their scores and EFTs."""
        self.no_rows = np.zeros((0, P), dtype=np.int64)
        self.hop_ns = mesh.hop_ns_rows(np.arange(P))
        """Hop ns between every two cores (`_bounding`)."""
        self.kargs = self.arrays()
        """`arrays`."""
        self.all_cores = self.cores.everywhere
        self.no_need = np.zeros(P, dtype=np.int64)
        self.first_wait = np.zeros(self.net.num_links + 1, dtype=np.int64)
        """`ready_floor`'s scratch: each link's wait; the last entry (read for a message's
        own core, `Network.first_links`) stays 0."""

    def arrays(self) -> KernelArgs:
        """What the kernels know of the graph (`Graph`, where the tasks are, where their
        fragments are), the mesh (`Net`), the links (`raptor.noc.Table`), the cores
        (`Gaps`) and the shared memory, one array after another (kept in :attr:`kargs`,
        made again when a table grows)."""
        net = self.net
        return (self.packed, self.parts, self.placed, self.hold, self.hold_used, net.by_hops,
                self.next_xy, self.next_yx, self.link_to, self.routes, self.switch,
                net.hop_ns, *self.links.table, *self.cores.arrays, *self.memory.table)

    def run(self) -> tuple[list[int], list[int]]:
        g, n = self.g, self.g.num_tasks
        unplaced = self.unplaced  # `commit` counts the placed producers down
        # Tasks without crossbars first when `eager`; equal ranks go lane by lane (a
        # layer's row tiles' lanes of one output row side by side, so rows complete one
        # after another and the next layer's windows can start), then in topological order.
        key = [(bool(k) or not self.eager, -r, task.lane, pos, t) for t, (k, r, task, pos) in
               enumerate(zip(self.tiles.key, self.rank.tolist(), g.tasks,
                             self.topo_pos.tolist(), strict=True))]
        heap = [key[t] for t in range(n) if unplaced[t] == 0]
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            t = pop(heap)[-1]
            self.place(t)
            for c in self.succ_list[t]:
                if unplaced[c] == 0:
                    push(heap, key[c])
        return self.core_of, self.start

    def place(self, t: int) -> None:
        d = self.longest[t]
        feasible, need = self.candidates(t)
        eft = self.cores.finishes(self.data_ready(t), d, feasible)
        if self.lookahead and len(self.succ_list[t]) and (
                self.succ_const is None or self.succ_has_tiles[t]):
            p, start = self.refine(t, self.score(t, eft), eft, need)
        else:
            p, start = self.bounded(t, eft, need)
        self.commit(t, p, start, need)

    # -- phases ------------------------------------------------------------------------------
    def candidates(self, t: int) -> tuple[BoolArray, IntArray]:
        """Cores where t's tiles are resident or fit without stranding a tile that has no
        home yet, and how many new slots each would take."""
        idx = self.tiles.of_task[t]
        if not len(idx):
            return self.all_cores, self.no_need
        room = self.cap - self.nres
        need: IntArray = len(idx) - self.resident[:, idx].sum(axis=1)
        cap = self.copy_cap.get(self.tiles.key[t])
        if cap is not None and int((need == 0).sum()) >= cap:
            return need == 0, need
        first = int((~self.homed[idx]).sum())
        pending = self.pending
        while self.pending_pos < len(pending) and self.homed[list(pending[self.pending_pos])].all():
            self.pending_pos += 1
        largest = len(pending[self.pending_pos]) if self.pending_pos < len(pending) else 0
        top = np.sort(room)[-2:] if self.P > 1 else np.array([0, room[0]])
        best_other = np.where(room == top[-1], top[0], top[-1])
        feasible = (need <= room) & ((need == first)
                                     | ((int(room.sum()) - need >= self.unhomed - first)
                                        & (np.maximum(room - need, best_other) >= largest)))
        if not feasible.any():
            raise _NoRoom(t)
        return feasible, need

    def data_ready(self, t: int) -> IntArray:
        """When every fragment t reads could be on each core: where a fragment already is
        (or is planned to arrive), that time; elsewhere a new message over free links."""
        arrival_row, end, core_of, hold = self.mesh.arrival_row, self.end, self.core_of, \
            self.hold
        sent = hold[2]  # (a fragment held by its producer alone is at its end there)
        ready: IntArray | None = None
        for f in self.g.reads[t]:
            u = self.frag_producer[f]
            row = arrival_row(core_of[u], self.frag_flits[f], end[u])
            if sent[f] >= 0:
                _held_into(row, f, hold)
            if ready is None:
                ready = row
            else:
                np.maximum(ready, row, out=ready)
        return np.zeros(self.P, dtype=np.int64) if ready is None else ready

    def score(self, t: int, eft: IntArray) -> IntArray:
        """EFT plus the optimistic finish of t's children (module docstring), where a child
        has tiles or O has rows that differ (else `bounded`)."""
        cs = self.succ_ids[t]
        if not len(cs):
            return eft
        x0 = int(np.minimum.reduce(eft))
        pred_ready, none_yet = self.pred_ready, self.no_need
        slack = np.array([pred_ready.get(c, none_yet) for c in self.succ_list[t]])
        np.maximum(slack, self.cores.last_end, out=slack)
        np.maximum(slack, x0, out=slack)  # the slack past x0 is what the children wait
        slack -= x0
        if self.child_cost is None:  # O may hold INF (cores a child's tiles never reach)
            slack += self.costs[cs][:, None] + self.oct_table[cs]
            np.minimum(slack, INF, out=slack)
        else:
            slack += self.child_cost[cs][:, None]
        if self.succ_has_tiles[t]:
            slack[~_fits(self.tiles, self.resident, self.cap - self.nres, cs.tolist())] = INF
        # est >= eft, and est is beyond INF wherever t itself does not fit.
        out: IntArray = eft + np.maximum.reduce(
            self.succ_flit_ns[t] + self.mesh.distance_transform(slack), axis=0)
        return out

    def children_slack(self, t: int, x0: int) -> IntArray:
        """The lookahead's rows where O has constant rows and no child has tiles: per child,
        what it waits past ``x0`` on each core plus its constant (its cost, O's row and its
        edge's flit ns), whose distance transform is its term of the score. A child none of
        whose producers is placed yet has the slack of the cores' ends alone, and so has
        one whose R_c is nowhere past ``x0`` (checked only when t has several children: 40 %
        of the rows), so of those children only the largest constant counts, and not even
        it when another child has one as large (its slack is at least as large everywhere,
        and the transform is monotone): 2.3 rows a task became 1.3 (random layered DAG,
        30,000 tasks on 16x16)."""
        assert self.succ_const is not None
        pred_ready = self.pred_ready
        rows: list[IntArray] = []
        consts: list[int] = []
        lone = -1
        several = len(self.succ_list[t]) > 1
        for c, k in zip(self.succ_list[t], self.succ_const[t], strict=True):
            row = pred_ready.get(c)
            if row is None or (several and int(row[row.argmax()]) <= x0):
                if k > lone:
                    lone = k
            else:
                rows.append(row)
                consts.append(k)
        if lone > max(consts, default=-1):
            rows.append(self.no_need)
            consts.append(lone)
        if len(rows) == 1:
            slack = np.maximum(rows[0], self.cores.last_end)[None]
            np.maximum(slack, x0, out=slack)
            slack += consts[0] - x0
            return slack
        slack = np.array(rows)
        np.maximum(slack, self.cores.last_end, out=slack)
        np.maximum(slack, x0, out=slack)
        slack += np.array(consts)[:, None] - x0
        return slack

    def children_wait(self, rows: IntArray) -> IntArray:
        """The lookahead's term on every core from `children_slack`'s rows: the latest of
        their transforms. A row at least as large as every other everywhere is the only one
        transformed (the transform is monotone): so were 4,269 of the 6,030 tasks with
        several rows (random layered DAG, 30,000 tasks on 16x16)."""
        transform = self.mesh.distance_transform
        if len(rows) > 1:
            top = np.maximum.reduce(rows, axis=0)
            over = (rows == top).all(axis=1).nonzero()[0]
            if not len(over):
                out: IntArray = np.maximum.reduce(transform(rows), axis=0)
                return out
            rows = rows[over[:1]]
        return transform(rows[0])

    def commit_reads(self, t: int, p: int) -> int:
        """Data-ready time on p of t's reads with their new messages reserved on the links,
        over the route `raptor.noc.Network.yx_sooner` picks when ``routes`` (`_ready_on`);
        each fragment is then where it arrived (`hold`)."""
        reads = self.g.reads[t]
        if self.hold_used[0] + len(reads) > self.hold.shape[1]:
            self.hold = np.concatenate((self.hold, np.full_like(self.hold, -1)), axis=1)
            self.kargs = self.arrays()
        while True:
            ready: int = _reads_on(p, t, True, *self.kargs[:18], self.got)
            if ready != FULL:
                break
            self.links.grow()
            self.kargs = self.arrays()
        return ready

    def exact_ready(self, t: int, p: int) -> int:
        """Data-ready time on p of t's reads with their new messages over the links as now
        reserved (nothing reserved)."""
        return int(_reads_on(p, t, False, *self.kargs[:18], self.got))

    def ready_floor(self, t: int) -> IntArray:
        """A lower bound of :meth:`exact_ready` on every core (on Raptor's links, where a
        message holds each link for its serialization whatever its route): each new
        message's free-link arrival plus what its head waits on its first link
        (`Network.first_links`; the lesser of its two routes' when ``routes``), four walks
        of one link instead of one walk per core."""
        net, arrival, wait = self.net, self.links.arrival, self.first_wait
        end, core_of, producer = self.end, self.core_of, self.frag_producer

        def rows() -> Iterator[IntArray]:
            for f in self.g.reads[t]:
                src, nbytes, inject = core_of[producer[f]], self.frag_bytes[f], end[producer[f]]
                ser = net.timing(src, 1 if src == 0 else 0, nbytes)[1]
                for link in range(4 * src, 4 * src + 4):
                    wait[link] = arrival((link,), ser, 0, 0, inject, False) - inject
                row = self.mesh.arrival_row(src, self.mesh.flit_cycles(nbytes), inject)
                row += wait[net.first_links(src)] if not self.routes else \
                    np.minimum(wait[net.first_links(src)], wait[net.first_links(src, True)])
                _held_into(row, f, self.hold)
                yield row
        return _latest(rows(), self.P)

    def refine(self, t: int, score: IntArray, eft: IntArray, need: IntArray,
               known: int = -1) -> tuple[int, int]:
        """Judge the cores, best free-link score first, with t's new messages reserved on
        the links and its store on the shared memory (see SHORTLIST); ties go to the
        earliest finish, a core of a predecessor, a core holding t's tiles, the lowest id.
        ``known``: a core judged already, its key and start in `judge`'s state (kept if it
        is on the shortlist)."""
        order = np.lexsort((eft, score))[:SHORTLIST]  # stable: ties by core id
        fresh = True
        if known >= 0:
            kept = order != known
            if not kept.all():
                order = order[kept]
                fresh = False
        return self.judge(t, order, np.minimum(score[order], INF), eft[order], need, fresh)

    def bounded(self, t: int, eft: IntArray, need: IntArray) -> tuple[int, int]:
        """`refine` where the lookahead, if any, is `children_slack`'s, with its term (the
        score less the EFT) made only on the cores that can win. The core of the least EFT
        is judged first; its exact key bounds the winner's, and a core whose EFT plus the
        least of every child's row (a lower bound of its term) less the local reads' slack
        is past that bound can neither win nor come before the winner in the score's order.
        The winner is then among the shortlist, and is the best of those cores judged in
        that order (random layered DAG, 30,000 tasks on 16x16: 60 % of the tasks have the
        first core alone, 18 % 2-16 cores): `_bounding`. With more than `NEAR_CORES`, the
        term is made everywhere and the shortlist judged (`refine`), the first core's key
        kept."""
        rows = self.children_slack(t, int(eft[eft.argmin()])) \
            if self.lookahead and len(self.succ_list[t]) else self.no_rows
        none = self.no_floor
        at = _decide(True, t, none, none, none, 0, none, eft, rows, self.hop_ns, NEAR_CORES,
                     self.buf, self.state, need, *(self.task_args(t) + self.kargs), self.got)
        if at == -2:
            score = eft if not len(rows) else eft + self.children_wait(rows)
            return self.refine(t, score, eft, need, int(self.state[6]))
        if at >= 0:  # the rest of the cores, from where the floor is wanted
            m = int(self.state[9])
            buf = self.buf
            return self.judge(t, buf[0, :m], buf[1, :m], buf[2, :m], need, False, at)
        got = self.state[6:8].tolist()
        assert got[0] >= 0
        return got[0], got[1]

    def task_args(self, t: int) -> tuple[bool, int, int, int, bool]:
        """`_judging`'s facts of task t: whether it has tiles, its cost, how much longer
        its local reads may make it, its shared-memory ns, and whether the floor applies."""
        return (len(self.tiles.of_task[t]) > 0, self.cost_of[t],
                self.longest[t] - self.cost_of[t], self.shared_of[t], not self.net.switched)

    def judge(self, t: int, cores: IntArray, scores: IntArray, efts: IntArray, need: IntArray,
              fresh: bool, resume: int = 0) -> tuple[int, int]:
        """The (core, start) of the best exact key among ``cores`` (in the score's order,
        with their scores and EFTs; ``need``: new tile slots by core) and, unless
        ``fresh``, the last call's best (kept in :attr:`state`): `_judging`, the key (its
        score with the exact finish, the finish, whether p is not a predecessor's core,
        whether t's tiles need new slots there, p) lowest; (-1, 0) when none. ``resume``:
        from that index on, where `_judging` wanted the floor (the state as it left it)."""
        state = self.state
        if fresh:
            state[0], state[6], state[7] = 0, -1, 0
        floor = self.no_floor
        at = resume
        if resume:
            floor = self.ready_floor(t) + self.cost_of[t]
        else:
            state[8] = 0
        while True:
            at = _decide(False, t, cores, scores, efts, at, floor, self.no_floor, self.no_rows,
                         self.hop_ns, 0, self.buf, state, need,
                         *(self.task_args(t) + self.kargs), self.got)
            if at < 0:
                break
            # t's messages wait; where they wait on a first link, every core behind that
            # link waits as long, and most of the shortlist cannot win
            floor = self.ready_floor(t) + self.cost_of[t]
        got = state[6:8].tolist()
        return got[0], got[1]

    def commit(self, t: int, p: int, start: int, need: IntArray) -> None:
        ready = self.commit_reads(t, p) if self.g.reads[t] else 0
        d = self.cost_of[t] if t not in self.g.local_reads else _duration(
            t, self.cost_of[t], p, self.packed, self.parts, self.placed)
        sh = self.shared_of[t]
        if ready > start:  # the committed messages met each other on a link
            start = _slot(p, ready, d, sh, self.cores.arrays, self.memory.table)
        f = start + d
        grown = self.cores.occupy(p, start, f)
        if sh:
            memory = self.memory.starts
            self.memory.reserve(0, self.memory.fit(0, f - sh, sh), sh)
            grown |= memory is not self.memory.starts
        if grown:
            self.kargs = self.arrays()
        idx = self.tiles.of_task[t]
        if len(idx):
            self.nres[p] += int(need[p])
            self.resident[p, idx] = True
            self.unhomed -= int((~self.homed[idx]).sum())
            self.homed[idx] = True
        self.core_of[t], self.start[t], self.end[t] = p, start, f
        self.placed[0, t], self.placed[1, t] = p, f
        hold = self.hold
        for fr in self.produces[t]:
            hold[0, fr], hold[1, fr] = p, f
        pred_ready, arrival_row, unplaced = self.pred_ready, self.mesh.arrival_row, self.unplaced
        for c, fl in zip(self.succ_list[t], self.succ_flits_list[t], strict=True):
            unplaced[c] -= 1
            if not unplaced[c] or not self.lookahead:  # no lookahead left to read R_c
                pred_ready.pop(c, None)
                continue
            arrive = arrival_row(p, fl, f)
            row = pred_ready.setdefault(c, arrive)  # children are distinct (edges merged)
            if row is not arrive:
                np.maximum(row, arrive, out=row)


def layer_ranks(tiles: _Tiles, rank: IntArray) -> IntArray:
    """``rank`` with every lane of a layer (the tasks whose tiles hold that layer's weights,
    `_Tiles.layer`) at the layer's highest rank: the list scheduler then takes a layer's
    lanes by their lane index, row by row across its tile sets (`_ListScheduler.run`).

    Why: a layer's lanes have nearly equal upward ranks, told apart by their own cost (a
    tile set of fewer row tiles, a padded border row). By rank, a core holding two tile sets
    of one layer ran every lane of the costlier set before the first of the other, so the
    layer's first output rows, which the next layer waits for, came last: ResNet-18's
    512-wide layers at four MVM units ran one layer after another, 75-90 us each, their
    sets' 5-7 lanes in a row on one core (docs/benchmarks.md, "Issue #25, sixteenth
    session")."""
    top: dict[str, int] = {}
    for k, r in zip(tiles.key, rank.tolist(), strict=True):
        if k and tiles.layer[k]:
            top[tiles.layer[k]] = max(top.get(tiles.layer[k], r), r)
    return np.array([top[tiles.layer[k]] if k and tiles.layer[k] else r
                     for k, r in zip(tiles.key, rank.tolist(), strict=True)], dtype=np.int64)


class _RowsFirst(_ListScheduler):
    """The list scheduler with each layer's lanes at one rank (`layer_ranks`) and the copy
    caps that minimize the summed times of the tile sets (`copy_caps`, ``summed``)."""

    def __init__(self, graph: ComputeGraph, target: Target, mesh: Mesh, tiles: _Tiles,
                 lookahead: bool, eager: bool, copies: bool, routes: bool) -> None:
        super().__init__(graph, target, mesh, tiles, lookahead, None, eager=eager,
                         copies=copies, routes=routes)
        self.rank = layer_ranks(tiles, self.rank)
        if copies:
            self.copy_cap = copy_caps(tiles, mesh.P, int(target.crossbar_capacity * COPY_ROOM),
                                      summed=True)


def _list_schedule(graph: ComputeGraph, target: Target, lookahead: bool, copies: bool = True
                   ) -> MergeScheduleResult:
    """The scheduler's runs, judged by the replay; the collector is paused (`raptor.gc_pause`):
    its state is acyclic lists, dicts and arrays, which full collections only rescan (a tenth
    of 1,000 tasks x 64 cores and up to a fifth of 10,000 x 256 when called outside the CLI,
    which pauses it already)."""
    with collector_paused():
        routes = shared_network(target).choosing
        best, ranked = _list_schedule_runs(graph, target, lookahead, copies, routes=routes)
        if routes:
            # the replay picks each message's route; the link planner picking them too makes
            # other schedules, mostly faster (ResNet-18 at four units: 1,668,651 ns, all
            # planned XY 1,707,371), sometimes slower (mobilenet_block: 67,670, XY 67,418):
            # the `XY_RUNS` runs that did best are planned XY too and the fastest kept
            try:
                planned_xy, _ = _list_schedule_runs(graph, target, lookahead, copies,
                                                    only=ranked[:XY_RUNS])
            except _NoRoom:  # those runs found no room when planned so
                planned_xy = best
            seconds = best.solve_seconds + planned_xy.solve_seconds
            if planned_xy.estimate_ns < best.estimate_ns:
                best = planned_xy
            else:
                best.notes.append("the link planner picked each message's route")
            best.solve_seconds = seconds
        return best


XY_RUNS = 2
"""Under ``routing = "xy-yx"``, how many of PEFT's candidate runs, best first, are planned
again with every route XY once all were planned with routes. PEFT's CPU on ResNet-18 at
four units: 21.4-22.8 s with every run planned both ways, 19.7-20.7 with two, 18.5-18.8
with the best alone; but onet's best planned XY is its second best planned with routes
(108,938 ns against 109,148 at one unit, 89,510 against 90,046 at four: docs/benchmarks.md
"Issue #25, fifteenth session")."""


def _list_schedule_runs(graph: ComputeGraph, target: Target, lookahead: bool, copies: bool,
                        routes: bool = False, only: Sequence[str] | None = None
                        ) -> tuple[MergeScheduleResult, list[str]]:
    """The candidate runs of the list scheduler, then the refinements of the best; with it
    the runs' notes, fastest first. ``only``: those runs alone (by their notes)."""
    t0 = time.perf_counter()
    graph.freeze()
    check_capacity(graph, target)
    mesh = Mesh(target)
    tiles = _Tiles(graph)
    notes: list[str] = []
    runs: list[tuple[str, MergeScheduleResult]] = []
    """The candidate schedules, each with the note that says how it was made."""
    name = "peft" if lookahead else "eft"
    bound = lower_bounds(graph, target).makespan_ns

    def wanted(note: str) -> bool:
        return only is None or note in only

    def keep(note: str, core_of: list[int], start: list[int]) -> None:
        runs.append((note, MergeScheduleResult.build(graph, target, core_of, start, solver=name,
                                                     status="HEURISTIC", bound_ns=bound)))

    greedy = wanted("")
    try:
        if greedy:
            keep("", *_ListScheduler(graph, target, mesh, tiles, lookahead, None,
                                     copies=copies, routes=routes).run())
    except _NoRoom as exc:
        greedy = False
        notes.append(f"capacity fallback: greedy placement found no room for task {exc.args[0]}")
    # Under crossbar pressure greedy replication strands later tasks on the few cores that
    # hold their tiles; a work-balanced packing decided up front often schedules better, so
    # both are tried when the tiles fill at least half of the chip (the better estimate wins).
    packed = "scheduled on a packed residency (largest-weight-first, reuse-first)"
    if wanted(packed) and (only is not None or not greedy
                           or 2 * tiles.count >= target.crossbar_capacity):
        keep(packed, *_ListScheduler(graph, target, mesh, tiles, lookahead,
                             pack_tiles(graph, target), copies=copies, routes=routes).run())
    if graph.tile_layer:
        # a lowered network: its tasks without crossbars placed as soon as their producers
        # are (`_ListScheduler.eager`) is a candidate too (ResNet-18: 3,862,205 -> 3,460,811
        # ns estimated; a few examples are slower so, up to 1.2 %)
        eager = "tasks without crossbars placed as soon as their producers are"
        with contextlib.suppress(_NoRoom):
            if wanted(eager):
                keep(eager, *_ListScheduler(graph, target, mesh, tiles, lookahead, None,
                                            eager=True, copies=copies, routes=routes).run())
        if lookahead and wanted(eager + ", without the lookahead"):
            # ... and without the lookahead: on ResNet-18 its plan is 17 us longer (3,218,055
            # ns) but loses 168 us to link contention where the lookahead's loses 209
            # (3,409,988 -> 3,386,608 ns estimated; at four units 1,779,018, the
            # lookahead's 1,707,371 kept)
            with contextlib.suppress(_NoRoom):
                keep(eager + ", without the lookahead",
                     *_ListScheduler(graph, target, mesh, tiles, False, None, eager=True,
                                     copies=copies, routes=routes).run())
        # each layer's lanes at one rank, row by row (`layer_ranks`), as the greedy run and
        # the eager one: ResNet-18 at four units 1,597,492 and 1,596,468 ns estimated, by
        # rank 1,707,371 and 1,778,828. Not under pimsim-nn's protocol, whose refinements
        # below (placement by position, ...) then lost on the row-by-row run that was best
        # before them (ResNet-18 at four units: 5,007,102 ns, by rank 4,352,946)
        for eager_too in (False, True) if target.protocol == "raptor" else ():
            rows = "the lanes of each layer row by row" + (f", {eager}" if eager_too else "")
            with contextlib.suppress(_NoRoom):
                if wanted(rows):
                    keep(rows, *_RowsFirst(graph, target, mesh, tiles, lookahead, eager_too,
                                           copies, routes).run())
    if target.protocol != "raptor" and only is None:
        # pimsim-nn's receives block, which the list scheduler's message prices do not
        # capture: a schedule made for Raptor's mesh is a candidate too, judged by the
        # same estimate (`raptor.solver.blocking`)
        mesh_target = dataclasses.replace(target, protocol="raptor")
        try:
            core_of, start = _ListScheduler(graph, mesh_target, Mesh(mesh_target), tiles,
                                            lookahead, None, copies=copies).run()
            keep(f"scheduled with Raptor's mesh prices (the faster under {target.protocol}'s "
                 "protocol)", core_of, retime(graph, target, core_of,
                                              core_order(graph, target, core_of, start), start))
        except _NoRoom:
            pass
    if not runs:  # ``only`` found no room
        raise _NoRoom(-1)
    note, best = min(runs, key=lambda r: r[1].estimate_ns)
    if note:
        notes.append(note)
    if target.protocol == "pimsim-nn":
        by_position = place_by_position(graph, target, best)
        if by_position is not None and by_position.estimate_ns < best.estimate_ns:
            best = by_position
            notes.append("the lanes of layers placed by their position")
    if graph.memory is not None:
        for most in FOLLOW_PREDS:
            moved = follow_producers(graph, target, best, most)
            if moved.estimate_ns < best.estimate_ns:
                best = moved
                notes.append(f"tasks without crossbars (of at most {most} inputs) follow their "
                             "last producer on its core")
        if target.protocol == "pimsim-nn":
            moved = follow_producers(graph, target, best, 2, apart=True)
            if moved.estimate_ns < best.estimate_ns:
                best = moved
                notes.append("tasks without crossbars of two inputs, neither on their core, "
                             "follow their last producer on its core")
    if target.protocol == "pimsim-nn":
        shared = share_lone_sets(graph, target, best)
        if shared is not None and shared.estimate_ns < best.estimate_ns:
            best = shared
            notes.append("tile sets of several crossbars held by one core given a second core")
    best.notes = notes
    best.solve_seconds = time.perf_counter() - t0
    return best, [n for n, _ in sorted(runs, key=lambda r: r[1].estimate_ns)]


FOLLOW_PREDS = (2, 1 << 30)
"""The refinements `_list_schedule` tries when local memory is modelled: tasks without
crossbars of at most this many predecessors follow their last producer."""


def follow_producers(graph: ComputeGraph, target: Target, res: MergeScheduleResult,
                     most: int, apart: bool = False) -> MergeScheduleResult:
    """`res` with every task that has no crossbar tiles and at most ``most`` predecessors
    (with ``apart``: exactly ``most``, none on its core) moved onto the core of its
    predecessor that ends last, right after it, then retimed.

    Why: list scheduling puts such a task (a partial-sum addition, an activation, a
    residual add) wherever it can start first, which on a busy chip is after some other
    core's long crossbar lane; meanwhile every fragment it reads waits in that core's
    local memory. Right after its last producer, that producer's result needs no message
    and the others wait only for the producers' skew. On ResNet-18 at 64 KiB per core
    this took the memory-constrained estimate from about 6.5-7 ms to about 5 ms, while the
    unconstrained one rose by about 8 % (the caller keeps whichever replays faster).
    ``apart`` is for pimsim-nn's protocol, where every message is a rendezvous that blocks
    both cores: an addition of two partial sums made on two other cores meets both, and
    only the other once it follows the later (ResNet-18 on pimsim-nn: 10.69 -> 10.25 ms);
    moving tasks with an input already on their core as well was slower there."""
    graph.freeze()
    core = list(res.core_of)
    start = list(res.start_ns)
    end = list(res.end_ns)
    dur = graph.costs()
    for t in graph.topo_order:
        preds = graph.preds[t]
        if graph.tasks[t].weights or not preds or len(preds) > most or (apart and (
                len(preds) < most or any(core[u] == core[t] for u, _ in preds))):
            continue
        u = max((u for u, _ in preds), key=lambda u: (end[u], u))
        core[t] = core[u]
        start[t] = end[u]
        end[t] = end[u] + dur[t]
    return _replanned(graph, target, res, core, start)


def _replanned(graph: ComputeGraph, target: Target, res: MergeScheduleResult,
               core: list[int], start: list[int]) -> MergeScheduleResult:
    """``res`` with the placement ``core``, each core's tasks in the order of ``start``."""
    order = core_order(graph, target, core, start)
    # the plan: the order as the communication model runs it (links, the shared-memory
    # queue and local memory included), each task ending when it ends there, so that it is
    # as attainable as a list scheduler's plan (whose reservations include the same)
    run = replay(graph, target, core, order, retime(graph, target, core, order),
                 blocking=False)
    times = [e - d for e, d in zip(run.end, graph.durations(core), strict=True)]
    return MergeScheduleResult.build(graph, target, core, times, solver=res.solver,
                                     status=res.status, bound_ns=res.bound_ns)


def place_by_position(graph: ComputeGraph, target: Target, res: MergeScheduleResult
                      ) -> MergeScheduleResult | None:
    """``res`` with the lanes of each layer placed by their position in its output
    (`ComputeGraph.position`), on the cores they run on. A set of crossbar tiles whose
    lanes run on every core (so its tiles are resident on all of them) and cut into bands
    of as many lanes each: the rows cut into as many bands as the mesh has rows, the
    columns into as many as it has columns, band (i, j) on core (i, j). A layer's tile
    sets on fewer cores (a convolution cut into row tiles, each set on some cores): each
    set's lanes in row-major order cut into as many runs as it has cores, the runs of all
    the sets by where they start (then by set) on the layer's cores along the mesh's
    serpentine walk, a core taking as many runs as it holds of the layer's tile sets (so
    every core keeps as many crossbars). Each core's lanes row by row, the k-th of every
    core in the set's k-th slots of the plan; then each task without crossbars that has a
    position and reads several of those lanes (a residual addition of a row, a sum of two
    partial sums) on the core of one of them, the j-th by column for its j-th row (a
    band's rows spread over its cores). None when no layer qualifies.

    Why: under pimsim-nn's protocol every message is a rendezvous. Placed by the list
    scheduler, a 7-pixel lane of ResNet-18's 56-pixel layers read its 3 input rows × 3
    column runs from up to 9 cores, whose lanes waited for others in turn (a chain of
    rendezvous across the layer). Placed by position, a lane's column of input rows is on
    its own core but at a band's edge, its one-column halos come from its two neighbours
    on the mesh (a fragment travels once per core: a core's lanes share them), and every
    core works down its band at once (9.88 -> 8.78 ms on pimsim-nn; 7.67 with the rows'
    additions, which PEFT then lets the tasks after them follow: docs/benchmarks.md,
    "Issue #24, twelfth session"). The 28-, 14- and 7-pixel layers of 5-16 row tiles
    (sets on 2-13 cores each) so make a band of rows of every row tile on neighbouring
    cores, where its partial sums are added (7.67 -> 6.97 ms, "thirteenth session")."""
    rows, cols, cores = target.mesh_rows, target.mesh_cols, target.num_cores
    sets: dict[frozenset[int], list[int]] = {}
    for task in graph.tasks:
        if task.weights:
            sets.setdefault(task.weights, []).append(task.id)
    layers: dict[object, list[list[int]]] = {}  # a layer's tile sets' lanes
    for w, lanes in sets.items():
        layers.setdefault(graph.tile_layer.get(min(w), w), []).append(lanes)
    core, start = list(res.core_of), list(res.start_ns)
    position = graph.position
    moved: set[int] = set()

    def slotted(lanes: list[int]) -> None:
        """The k-th lane of every core (by position) in the k-th of the lanes' slots."""
        k: Counter[int] = Counter()
        nth = []
        for t in sorted(lanes, key=lambda t: position[t]):
            nth.append((k[core[t]], core[t], t))
            k[core[t]] += 1
        for (*_, t), s in zip(sorted(nth), sorted(start[t] for t in lanes), strict=True):
            start[t] = s
        moved.update(lanes)

    for layer in layers.values():
        if any(t not in position for lanes in layer for t in lanes):
            continue
        used = [sorted({core[t] for t in lanes}) for lanes in layer]
        for lanes, on in zip(layer, used, strict=True):
            if len(on) < cores:
                continue
            ys = {r: i for i, r in enumerate(sorted({position[t][0] for t in lanes}))}
            xs = {c: i for i, c in enumerate(sorted({position[t][1] for t in lanes}))}
            if len(ys) < rows or len(xs) < cols or len(ys) * len(xs) != len(lanes):
                continue
            home = {t: ys[position[t][0]] * rows // len(ys) * cols
                    + xs[position[t][1]] * cols // len(xs) for t in lanes}
            if len(set(Counter(home.values()).values())) > 1:
                continue  # bands of unequal lanes
            for t in lanes:
                core[t] = home[t]
            slotted(lanes)
        fewer = [(lanes, on) for lanes, on in zip(layer, used, strict=True) if len(on) < cores]
        if not fewer or min(len(on) for _, on in fewer) < 2:
            continue
        held = Counter(p for _, on in fewer for p in on)  # the layer's tiles a core holds
        bands = []
        for k, (lanes, on) in enumerate(fewer):
            ranked = sorted(lanes, key=lambda t: position[t])
            bands += [(k, ranked[b * len(ranked) // len(on):(b + 1) * len(ranked) // len(on)])
                      for b in range(len(on))]
        bands.sort(key=lambda b: (position[b[1][0]], b[0]))
        walk = [c for c in core_sequence(target, "rows") if c in held]  # mesh neighbours
        for p, (_, band) in zip([c for c in walk for _ in range(held[c])], bands, strict=True):
            for t in band:
                core[t] = p
        for lanes, _ in fewer:
            slotted(lanes)
    if not moved:
        return None
    for t in graph.topo_order:
        ins = sorted((u for u, _ in graph.preds[t] if u in moved), key=lambda u: position[u][1])
        if len(ins) > 1 and not graph.tasks[t].weights and t in position:
            core[t] = core[ins[position[t][0] % len(ins)]]
    for t in graph.topo_order:  # each task after its producers: an order without deadlock
        start[t] = max([start[t], *(start[u] + 1 for u, _ in graph.preds[t])])
    return _replanned(graph, target, res, core, start)


def share_lone_sets(graph: ComputeGraph, target: Target, res: MergeScheduleResult
                    ) -> MergeScheduleResult | None:
    """``res`` with every tile set of several crossbars whose lanes (more than one) all run
    on one core given a second core, the later half of its lanes by position: of the
    cores that can hold it once some of their one-crossbar sets (those that start last
    first) move to the nearest cores with a free crossbar, the one that moves the fewest,
    then the nearest. None when no set qualifies or no core can take one.

    Why: under pimsim-nn's protocol a layer's lanes on one core run one after another.
    ResNet-18's last convolution has nine sets of sixteen crossbars; the one no other core
    had room for ran its seven lanes on core 0 after the others had ended, the end of
    the inference (6,526-7,000 us of 7,016 us); on two cores 6,900 us (the replay
    `comm.deepen` refines, docs/benchmarks.md "Issue #24, fourteenth session")."""
    core = list(res.core_of)
    lanes_of: dict[frozenset[int], list[int]] = {}
    for task in graph.tasks:
        if task.weights:
            lanes_of.setdefault(task.weights, []).append(task.id)
    position = graph.position
    changed = False
    for w, lanes in lanes_of.items():
        home = {core[t] for t in lanes}
        if len(w) < 2 or len(lanes) < 2 or len(home) > 1 or any(t not in position
                                                                  for t in lanes):
            continue
        held = [set[int]() for _ in range(target.num_cores)]
        for task in graph.tasks:
            held[core[task.id]] |= task.weights
        free = [target.crossbars_per_core - len(h) for h in held]
        ones: list[list[frozenset[int]]] = [[] for _ in range(target.num_cores)]
        for t in sorted(range(graph.num_tasks), key=lambda t: -res.start_ns[t]):
            v = graph.tasks[t].weights  # the sets that start last move first
            if len(v) == 1 and v not in ones[core[t]]:
                ones[core[t]].append(v)
        (src,) = home
        fits = [(len(w) - free[p], target.hops(src, p), p) for p in range(target.num_cores)
                if p != src and free[p] + len(ones[p]) >= len(w)]
        if not fits:
            continue
        need, _, dst = min(fits)
        moves: list[tuple[frozenset[int], int]] = []
        for v in ones[dst][:max(0, need)]:
            room = [p for p in range(target.num_cores)
                    if p not in (src, dst) and (free[p] > 0 or v <= held[p])]
            if not room:
                break
            to = min(room, key=lambda p: (target.hops(dst, p), p))
            if not v <= held[to]:
                free[to] -= 1
                held[to] |= v
            moves.append((v, to))
        if len(moves) < need:
            continue
        for v, to in moves:
            for t in lanes_of[v]:
                if core[t] == dst:
                    core[t] = to
        ranked = sorted(lanes, key=lambda t: position[t])
        for t in ranked[len(ranked) // 2:]:
            core[t] = dst
        changed = True
    return _replanned(graph, target, res, core, list(res.start_ns)) if changed else None


def peft_schedule(graph: ComputeGraph, target: Target, copies: bool = True
                  ) -> MergeScheduleResult:
    """Capacity-aware PEFT with the state-dependent lookahead described in the module doc.
    ``copies=False`` keeps every crossbar tile on one core (pipeline mode without
    replication: its latency candidate must not hold copies the row's bound assumes absent)."""
    return _list_schedule(graph, target, lookahead=True, copies=copies)


def eft_schedule(graph: ComputeGraph, target: Target) -> MergeScheduleResult:
    """Same list scheduler without lookahead (EFT placement, HEFT-like), for comparison."""
    return _list_schedule(graph, target, lookahead=False)
