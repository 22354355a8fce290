"""From a partition to physical cores (docs/pipeline.md §4): capacity verification
(:mod:`.pack`, with the recovery of :func:`realize`), topology placement on a serpentine
walk, a list schedule of every stage, evaluation and ranking (:func:`better`). Every
solver's partition goes through the same steps, so heuristic, DP and CP-SAT periods are
measured with one ruler.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from raptor.solver.costs import shared_read_ns, shared_write_ns
from raptor.solver.mesh import transfer_ns
from raptor.solver.pipeline.model import Partition, evaluate_partition
from raptor.solver.pipeline.pack import PackFailure, StagePacking, pack_stage
from raptor.solver.pipeline.problem import PipelineProblem, service_ns, topological_order
from raptor.target import Target

SEQUENCES = ("rows", "columns")
PRIORITIES = ("load", "arrival")
DEMAND_TIE = 0.01
_BIG = np.int64(1) << 50  # pushes a core behind every free time


def core_sequence(target: Target, kind: str) -> list[int]:
    """Serpentine walk over the mesh, by rows or by columns (consecutive cores adjacent)."""
    R, C = target.mesh_rows, target.mesh_cols
    if kind == "rows":
        return [r * C + (c if r % 2 == 0 else C - 1 - c) for r in range(R) for c in range(C)]
    return [(r if c % 2 == 0 else R - 1 - r) * C + c for c in range(C) for r in range(R)]


@dataclass(frozen=True)
class Boundary:
    """One publication that a later stage reads through shared memory."""

    producer: int
    result: int
    slot: int
    bytes: int
    producer_stage: int
    consumers: tuple[tuple[int, int, int], ...]  # (task, stage, bytes loaded)
    store_ns: int
    load_ns: int


@dataclass
class Placement:
    """A packed, placed and list-scheduled partition with its figures."""

    problem: PipelineProblem
    partition: Partition
    core_of: list[int]
    order: list[list[int]]  # per physical core, the execution order of one inference
    stage_of_task: list[int]
    stage_cores: list[list[int]]
    stage_load: list[int]
    stage_path: list[int]
    stage_completion: list[int]
    stage_crossbars: list[int]
    demand: int
    memory_ns: int
    boundaries: list[Boundary]
    recovery: list[str] = field(default_factory=list)

    @property
    def stage_span(self) -> list[int]:
        return [max(a, b) for a, b in zip(self.stage_load, self.stage_path, strict=True)]

    @property
    def max_span(self) -> int:
        return max(self.stage_span, default=0)

    @property
    def max_load(self) -> int:
        return max(self.stage_load, default=0)

    @property
    def period_ns(self) -> int:
        return max(self.max_span, self.memory_ns)

    @property
    def wave_period_ns(self) -> int:
        """Period if each stage's cores finish one inference before starting the next."""
        return max(max(self.stage_completion, default=0), self.memory_ns)


def better(a: Placement, b: Placement) -> bool:
    """The spec's placement ranking: is ``a`` preferred to ``b``?"""
    if abs(a.demand - b.demand) > DEMAND_TIE * max(a.demand, b.demand):
        return a.demand < b.demand
    ka = (a.max_span, max(a.stage_completion, default=0), a.max_load)
    kb = (b.max_span, max(b.stage_completion, default=0), b.max_load)
    return ka < kb


def boundaries(problem: PipelineProblem, stage_of_task: Sequence[int]) -> list[Boundary]:
    t = problem.target
    crossing = []
    for p in problem.publications:
        sp = stage_of_task[p.producer]
        later = tuple((v, stage_of_task[v], nb) for v, nb in p.consumers if stage_of_task[v] > sp)
        if later:
            crossing.append((p, sp, later))
    if not crossing:
        return []
    stores = service_ns(t, np.array([p.bytes for p, _, _ in crossing], dtype=np.int64),
                        t.shared_write_cycles)
    flat = np.array([nb for _, _, later in crossing for *_, nb in later], dtype=np.int64)
    loads = service_ns(t, flat, t.shared_read_cycles)
    per = np.add.reduceat(loads, np.cumsum([0] + [len(x) for _, _, x in crossing[:-1]]))
    return [Boundary(p.producer, p.result, p.slot, p.bytes, sp, later, int(st), int(ld))
            for (p, sp, later), st, ld in zip(crossing, stores, per, strict=True)]


def sync_ns(target: Target, bounds: Sequence[Boundary], core_of: Sequence[int]) -> int:
    """READY/FREE counting of the placed boundaries (`raptor.passes.stream`): per (producer
    core, consumer core) pair, each side waits on one counter word and signals another, four
    shared-memory accesses per inference."""
    pairs = {(core_of[b.producer], core_of[v]) for b in bounds for v, _, _ in b.consumers}
    return len(pairs) * 2 * (shared_read_ns(target, 4) + shared_write_ns(target, 4))


def _home(problem: PipelineProblem, part: Partition, replication: bool, notes: list[str]
          ) -> list[StagePacking] | PackFailure:
    """Capacity verification: every stage's units get homes on its cores."""
    packs: list[StagePacking] = []
    for s, (j, i) in enumerate(part.ranges(problem.num_groups)):
        res = pack_stage(problem, j, i, part.cores[s], part.replication[j:i])
        if isinstance(res, PackFailure) and replication and max(part.replication[j:i]) > 1:
            notes.append(f"stage {s}: replication dropped after: {res.message}")
            res = pack_stage(problem, j, i, part.cores[s], [1] * (i - j))
        if isinstance(res, PackFailure):
            return res
        if res.attempt != "first":
            notes.append(f"stage {s}: packed by the {res.attempt} attempt")
        packs.append(res)
    return packs


def lower_bound_budgets(problem: PipelineProblem, cuts: Sequence[int]) -> Partition | None:
    """Restart budgets: ceil(crossbars / capacity) cores per stage, no replication, spare
    cores one by one to the stage whose crossbars fill its cores most."""
    G, P, cap = problem.num_groups, problem.num_cores, problem.target.crossbars_per_core
    ranges = list(zip(cuts, [*cuts[1:], G], strict=True))
    x = [problem.crossbars(j, i) for j, i in ranges]
    cores = [max(1, -(-xs // cap)) for xs in x]
    if sum(cores) > P:
        return None
    for _ in range(P - sum(cores)):
        s = max(range(len(ranges)),
                key=lambda s: (x[s] / cores[s], problem.work(*ranges[s]) / cores[s], -s))
        cores[s] += 1
    return Partition(tuple(cuts), tuple(cores), (1,) * G)


def realize(problem: PipelineProblem, part: Partition, replication: bool,
            follow: bool = False, limits: Sequence[int] | None = None, window: bool = False
            ) -> Placement | PackFailure:
    """Home, place, list-schedule and evaluate ``part``; the best by :func:`better`.
    ``follow``: tasks without crossbars go right after their last same-stage producer, on
    its core (see :class:`_ListSchedule`); ``limits``: the load each stage's list schedule
    keeps its cores within (default: the model's stage times); ``window``: keep each core's
    window (its first task's start to its last task's end) within them instead."""
    stage_of_task = (np.searchsorted(part.cuts, problem.group_of, side="right") - 1).tolist()
    bounds_list = boundaries(problem, stage_of_task)
    memory = problem.baseline_ns + sum(b.store_ns + b.load_ns for b in bounds_list)
    notes: list[str] = []
    homes = _home(problem, part, replication, notes)
    if isinstance(homes, PackFailure):
        notes.append(f"budgets restarted from lower bounds after: {homes.message}")
        lb = lower_bound_budgets(problem, part.cuts)
        if lb is None:
            return homes
        part = lb
        homes = _home(problem, part, False, notes)
        if isinstance(homes, PackFailure):
            return homes
    best: Placement | None = None
    # On a square mesh the column walk is the row walk's transpose, which XY distances
    # do not see: it would give the same figures.
    kinds = SEQUENCES[:1] if problem.target.mesh_rows == problem.target.mesh_cols else SEQUENCES
    for kind in kinds:
        seq = core_sequence(problem.target, kind)
        chunks = [seq[e - k:e] for k, e in zip(part.cores, itertools.accumulate(part.cores),
                                                strict=True)]
        for priority in PRIORITIES:
            cand = _ListSchedule(problem, part, homes, chunks, stage_of_task, replication,
                                 follow, limits, window).run(priority)
            cand.memory_ns = memory + sync_ns(problem.target, bounds_list, cand.core_of)
            cand.boundaries = bounds_list
            cand.recovery = list(notes)
            if best is None or better(cand, best):
                best = cand
    assert best is not None
    return best


class _ListSchedule:
    """EFT list schedule of every stage on its cores (the stage starts at 0; inputs from
    earlier stages wait in shared memory). Candidate cores per task, as in capacity-aware
    PEFT: the cores of its same-stage producers, the cores holding its tiles (its unit's home
    or a replica) and the earliest-free core (with room for a replica when it has tiles and
    replication is on). Cores whose load stays within the stage's model time are preferred
    (so the busiest core keeps near the model's bound), then the earliest finish with NoC
    delays, then cores that already hold the tiles. ``load`` priority: highest bottom level
    first; ``arrival``: earliest top level first. With ``follow``, a task without tiles that
    has a same-stage producer goes to the core of the one that ends last (as latency mode's
    `raptor.solver.peft.follow_producers`: the fragments it reads then wait in no other
    core's local memory).

    State: the cores holding each tile, per-core free time and load (also per stage in chunk
    order, for the vectorized earliest-core search), each unit's replica budget, and the
    schedule built so far."""

    def __init__(self, problem: PipelineProblem, part: Partition, homes: list[StagePacking],
                 chunks: list[list[int]], stage_of_task: list[int], replication: bool,
                 follow: bool, limits: Sequence[int] | None = None,
                 window: bool = False) -> None:
        graph, target = problem.graph, problem.target
        n, P = graph.num_tasks, problem.num_cores
        self.problem, self.part, self.chunks, self.sot = problem, part, chunks, stage_of_task
        self.replication, self.follow = replication, follow
        self.cap = target.crossbars_per_core
        self.num, self.den = target.clock_fraction.as_integer_ratio()
        self.hop_c = (problem.hops * target.hop_cycles).tolist()
        self.holders: dict[int, set[int]] = {}  # tile -> cores holding it
        self.used_tiles: list[set[int]] = [set() for _ in range(P)]
        for pk, chunk in zip(homes, chunks, strict=True):
            for c, ts in enumerate(pk.tiles):
                for w in ts:
                    self.holders.setdefault(w, set()).add(chunk[c])
                self.used_tiles[chunk[c]] |= ts
        self.free, self.load = [0] * P, [0] * P  # per core
        self.window = window
        self.explicit = limits is not None
        """Keep windows, not loads, within the limit: in a stream a core starts inference
        n + 1 once its last task of inference n ends, so its window bounds the period."""
        self.first = [-1] * P  # per core, its first task's start (-1: none yet)
        self.limit = [max(t, 1) for t in (
            evaluate_partition(problem, part).stage_times if limits is None else limits)]
        sot = stage_of_task
        self.costs = [t.cost_ns for t in graph.tasks]
        self.same_preds = problem.preds_flit if len(chunks) == 1 else \
            [[(u, fc) for u, fc in ps if sot[u] == sot[t]]
             for t, ps in enumerate(problem.preds_flit)]
        self.stage_set = [set(ch) for ch in chunks]
        self.chunk_arr = [np.asarray(ch, dtype=np.int64) for ch in chunks]
        # per stage, free time and load of its cores in chunk order (views, no fancy indexing)
        self.free_s = [np.zeros(len(ch), dtype=np.int64) for ch in chunks]
        self.load_s = [np.zeros(len(ch), dtype=np.int64) for ch in chunks]
        self.first_s = [np.full(len(ch), -1, dtype=np.int64) for ch in chunks]
        self.local = {c: k for ch in chunks for k, c in enumerate(ch)}
        self.end, self.core_of = [0] * n, [-1] * n  # per task
        self.order: list[list[int]] = [[] for _ in range(P)]
        self.completion = [0] * len(chunks)
        self.replica_budgets()
        ntiles, self.task_tiles = problem.dense_tiles
        self.resident = np.zeros((P, ntiles), dtype=np.bool_)
        for c in range(P):
            if self.used_tiles[c]:
                self.resident[c, [problem.tile_index[w] for w in self.used_tiles[c]]] = True
        self.nres = self.resident.sum(axis=1)

    def replica_budgets(self) -> None:
        """Replicas: each unit may add copies in proportion to its work (keeping windows: as
        many as fit), out of the crossbars its stage has spare after the homes, so early
        units cannot take the room of heavy later ones."""
        problem, chunks, cap = self.problem, self.chunks, self.cap
        self.unit_of = [-1] * problem.graph.num_tasks
        self.copies: list[int] = []
        self.allowed: list[int] = []
        for s_idx, (j, i) in enumerate(self.part.ranges(problem.num_groups)):
            units = [u for g in problem.groups[j:i] for u in g.units]
            spare = sum(cap - len(self.used_tiles[c]) for c in chunks[s_idx])
            total = sum(x.work for x in units) or 1
            for unit in units:
                home = len(set.intersection(*(self.holders.get(w, set()) for w in unit.tiles)))
                # keeping windows, a light unit needs copies too: its home may be a core
                # busy at the other end of the inference
                extra = (spare if self.window else spare * unit.work // total) // \
                    max(len(unit.tiles), 1)
                for t in unit.tasks:
                    self.unit_of[t] = len(self.copies)
                self.copies.append(home)
                self.allowed.append(min(len(chunks[s_idx]), len(unit.tasks), home + extra))

    def run(self, priority: str) -> Placement:
        """Schedule every task, ready tasks in ``priority`` order."""
        problem, sot = self.problem, self.sot
        n = problem.graph.num_tasks
        indeg = [len(x) for x in self.same_preds]
        tl, bl = problem.top_level, problem.bottom_level
        key = [(-bl[t], 0, t) for t in range(n)] if priority == "load" else \
            [(tl[t], -bl[t], t) for t in range(n)]
        heap = [(key[t], t) for t in range(n) if indeg[t] == 0]
        heapq.heapify(heap)
        succs = problem.graph.succs
        while heap:
            _, t = heapq.heappop(heap)
            s = sot[t]
            cands, hold = self.candidates(t, s)
            c, f = self.best_core(t, s, cands, hold)
            self.commit(t, s, c, f, hold)
            for v, _ in succs[t]:
                if sot[v] == s:
                    indeg[v] -= 1
                    if indeg[v] == 0:
                        heapq.heappush(heap, (key[v], v))
        return self.placement()

    def earliest(self, s: int, t: int) -> int:
        """Earliest-free stage core (with room for t's tiles), within the model time if
        possible (-1: no core has room)."""
        used = self.free_s[s] - np.maximum(self.first_s[s], 0) if self.window else \
            self.load_s[s]
        keys = self.free_s[s] + (used > self.limit[s] - self.costs[t]) * _BIG
        if self.window:  # a core in use whose window holds t before a fresh one
            keys = keys + (self.first_s[s] < 0) * (_BIG // 2)
        idx = self.task_tiles[t]
        if len(idx):
            ch = self.chunk_arr[s]
            need = len(idx) - self.resident[ch[:, None], idx].sum(axis=1)
            keys = np.where(need <= self.cap - self.nres[ch], keys, 4 * _BIG)
        i = int(keys.argmin())
        return self.chunks[s][i] if keys[i] < 4 * _BIG else -1

    def candidates(self, t: int, s: int) -> tuple[set[int], set[int]]:
        """Task t's candidate cores, and those of them that hold its tiles."""
        tiles = self.problem.graph.tasks[t].weights
        same, core_of, used_tiles = self.same_preds[t], self.core_of, self.used_tiles
        cands = {core_of[u] for u, _ in same}
        hold: set[int] = set()
        if tiles:
            hold = set.intersection(*(self.holders.get(w, set()) for w in tiles)) \
                & self.stage_set[s]
            u_id = self.unit_of[t]
            # of many holders, those of its producers and the two that are free first
            free = self.free
            near = hold if len(hold) <= 2 else \
                (hold & cands) | set(sorted(hold, key=lambda c: (free[c], c))[:2])
            if self.replication and (not hold or self.copies[u_id] < self.allowed[u_id]):
                cands = {c for c in cands
                         if len(tiles - used_tiles[c]) <= self.cap - len(used_tiles[c])}
                c = self.earliest(s, t)
                if c >= 0:
                    cands.add(c)
                cands |= near
            else:
                cands = near
        elif self.follow and same:
            end = self.end
            cands = {core_of[max((u for u, _ in same), key=lambda u: (end[u], u))]}
        else:
            cands.add(self.earliest(s, t))
        return cands, hold

    def best_core(self, t: int, s: int, cands: set[int], hold: set[int]) -> tuple[int, int]:
        """The candidate core for t (the earliest finish, preferring cores within the stage's
        model time, then tile holders) and t's finish there."""
        num, den, hop_c = self.num, self.den, self.hop_c
        end, core_of, free, load = self.end, self.core_of, self.free, self.load
        same = self.same_preds[t]
        best: tuple[int, int, int, int, int, int] | None = None
        cost = self.costs[t]
        if num == den:
            # integer ns per cycle: per producer core, the latest end and latest end + flits
            by_core: dict[int, list[int]] = {}
            for u, fc in same:
                e = end[u]
                x = by_core.get(core_of[u])
                if x is None:
                    by_core[core_of[u]] = [e, e + fc]
                else:
                    if e > x[0]:
                        x[0] = e
                    if e + fc > x[1]:
                        x[1] = e + fc
        for c in cands:
            est = free[c]
            if num == den:
                for cu, (e, efc) in by_core.items():
                    arrive = e if cu == c else efc + hop_c[cu][c]
                    if arrive > est:
                        est = arrive
            else:
                for u, fc in same:
                    cu = core_of[u]
                    arrive = end[u] if cu == c else end[u] + -(-((hop_c[cu][c] + fc) * den) // num)
                    if arrive > est:
                        est = arrive
            used = load[c] if not self.window else \
                est - self.first[c] if self.first[c] >= 0 else 0
            over = int(used + cost > self.limit[s])
            fresh = int(self.window and self.first[c] < 0)
            # beyond every core's limit (explicit limits only): the least load or window
            excess = used + cost if over and self.explicit else 0
            k = (over, excess, fresh, est + cost, int(c not in hold), c)
            if best is None or k < best:
                best = k
        assert best is not None
        return best[5], best[3]

    def commit(self, t: int, s: int, c: int, f: int, hold: set[int]) -> None:
        """Run t on core c until f: its tiles become resident there (a replica when c did not
        hold them), and the core's free time, load and order advance."""
        tiles = self.problem.graph.tasks[t].weights
        if tiles and not tiles <= self.used_tiles[c]:
            if c not in hold:
                self.copies[self.unit_of[t]] += 1
            for w in tiles:
                self.holders.setdefault(w, set()).add(c)
            self.used_tiles[c] |= tiles
            self.resident[c, self.task_tiles[t]] = True
            self.nres[c] = len(self.used_tiles[c])
        cost = self.costs[t]
        self.end[t] = f
        self.free[c] = f
        self.load[c] += cost
        self.free_s[s][self.local[c]] = f
        self.load_s[s][self.local[c]] += cost
        self.core_of[t] = c
        if self.first[c] < 0:
            self.first[c] = f - cost
            self.first_s[s][self.local[c]] = f - cost
        self.order[c].append(t)
        self.completion[s] = max(self.completion[s], f)

    def placement(self) -> Placement:
        return measure(self.problem, self.part, self.chunks, self.core_of, self.order,
                       self.sot, self.completion)


def measure(problem: PipelineProblem, part: Partition, chunks: list[list[int]],
            core_of: list[int], order: list[list[int]], sot: list[int],
            completion: list[int]) -> Placement:
    """A placed schedule's per-stage figures and per-core demand (compute plus the NoC time
    of its intra-stage transfers in and out); shared memory is the caller's."""
    graph, target, P = problem.graph, problem.target, problem.num_cores
    costs = [t.cost_ns for t in graph.tasks]
    core_load = [0] * P
    used: list[set[int]] = [set() for _ in range(P)]
    for t in range(graph.num_tasks):
        core_load[core_of[t]] += costs[t]
        used[core_of[t]] |= graph.tasks[t].weights
    cores = np.asarray(core_of, dtype=np.int64)
    src, dst, nbytes = problem.edge_arrays
    sarr = np.asarray(sot, dtype=np.int64)
    tr = np.where(sarr[src] == sarr[dst],
                  transfer_ns(target, cores[src], cores[dst], nbytes), 0)
    demand = np.asarray(core_load, dtype=np.int64) + \
        np.bincount(cores[src], weights=tr, minlength=P).astype(np.int64) + \
        np.bincount(cores[dst], weights=tr, minlength=P).astype(np.int64)
    return Placement(
        problem=problem, partition=part, core_of=core_of, order=order,
        stage_of_task=sot, stage_cores=chunks,
        stage_load=[max(core_load[c] for c in ch) for ch in chunks],
        stage_path=[int(problem.path[j, i]) for j, i in part.ranges(problem.num_groups)],
        stage_completion=completion,
        stage_crossbars=[sum(len(used[c]) for c in ch) for ch in chunks],
        demand=int(demand.max()), memory_ns=0, boundaries=[],
    )


def asap_starts(problem: PipelineProblem, core_of: Sequence[int],
                order: Sequence[Sequence[int]], core_range: Sequence[int] | None = None
                ) -> list[int]:
    """One inference alone through the placed program: earliest starts under the per-core
    order and NoC transfer delays on every edge (what the latency validator checks).
    `core_range` (a layered stream's range of each core): edges between ranges left out,
    their data there at the start, as a stream's deferred sends leave it (`defer_sends`)."""
    src, dst, nbytes = problem.edge_arrays
    cores = np.asarray(core_of, dtype=np.int64)
    if core_range is not None:
        rng = np.asarray(core_range, dtype=np.int64)[cores]
        keep = rng[src] == rng[dst]
        src, dst, nbytes = src[keep], dst[keep], nbytes[keep]
    delay = transfer_ns(problem.target, cores[src], cores[dst], nbytes).tolist()
    out: list[list[tuple[int, int]]] = [[] for _ in range(problem.graph.num_tasks)]
    for u, v, d in zip(src.tolist(), dst.tolist(), delay, strict=True):
        out[u].append((v, d))
    for tasks in order:
        for a, b in itertools.pairwise(tasks):
            out[a].append((b, 0))
    topo = topological_order([[v for v, _ in es] for es in out])
    if len(topo) != len(out):
        raise AssertionError("per-core order contradicts the dependencies")
    costs = problem.graph.durations(core_of)  # local reads included, as MergeScheduleResult's
    start = [0] * len(out)
    for u in topo:
        end = start[u] + costs[u]
        for v, d in out[u]:
            if end + d > start[v]:
                start[v] = end + d
    return start


@dataclass(frozen=True)
class Skew:
    """A skewed (software-pipelined) stream body (docs/pipeline.md §6): in iteration k task
    t works on inference k - lag[t]; a core orders its body by planned start minus lag
    times `shift_ns`, so a lagged task fills the time its core is idle early in the
    iteration."""

    shift_ns: int
    lag: tuple[int, ...]

    def times(self, core_of: Sequence[int], start: Sequence[int], end: Sequence[int]
              ) -> tuple[list[int], list[int]]:
        """The times that order each core's iteration: planned times moved into the
        iteration that runs them (minus lag times `shift_ns`), then each core's tasks in
        that order one after another, so that a task's sends (made at its end) stay before
        the core's next task, as the stream estimate plays them."""
        moved = [t - k * self.shift_ns for t, k in zip(start, self.lag, strict=True)]
        new_start, new_end = list(moved), [0] * len(moved)
        free: dict[int, int] = {}
        for t in sorted(range(len(moved)), key=lambda t: (moved[t], t)):
            c = core_of[t]
            new_start[t] = max(moved[t], free.get(c, moved[t]))
            new_end[t] = free[c] = new_start[t] + end[t] - start[t]
        return new_start, new_end


def skew_lags(start: Sequence[int], shift_ns: int) -> Skew:
    """Every task planned to start at or after `shift_ns` at lag 1, the others at lag 0:
    monotone along every dependency (a consumer starts after its producers end)."""
    return Skew(shift_ns, tuple(int(t >= shift_ns) for t in start))
