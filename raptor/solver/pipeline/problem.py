"""The pipeline partitioning problem (docs/pipeline.md §1–2): groups in a topological chain,
their bounds, and the per-range tables every pipeline solver reads (heuristic, exact DP,
CP-SAT).

A stage may only cut between atoms (a batch's lanes, or a single task where its batch has
internal edges or lies on a cycle of the batch quotient graph); all users of a tile sit in
one group; adjacent groups fuse down to ``max_groups``, which bounds the DP and the CP-SAT
model. Range sums are O(1) lookups in (G+1)×(G+1) tables built with prefix sums.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt

from raptor.gc_pause import collector_paused
from raptor.noc import serial_cycles
from raptor.solver.costs import shared_write_ns
from raptor.solver.from_ir import GraphBuild
from raptor.solver.graph import ComputeGraph
from raptor.solver.pipeline.packing import packing_bound
from raptor.target import Target

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

INFEASIBLE = np.iinfo(np.int64).max // 4
"""Stand-in for "no value" in int64 tables (sums of a few stay below overflow)."""

DEFAULT_MAX_GROUPS = 64


class PipelineCapacityError(ValueError):
    """The target cannot hold the model's weights even with every stage on its own cores."""


@dataclass(frozen=True)
class Unit:
    """Tasks of one group that share crossbar tiles (one core without replication)."""

    tasks: tuple[int, ...]  # by cost, largest first
    tiles: frozenset[int]
    work: int


@dataclass(frozen=True)
class Group:
    id: int
    tasks: tuple[int, ...]  # topological order
    batches: tuple[int, ...]  # graph batch ids (-1 for a task without batch)
    work: int
    longest: int
    tiles: frozenset[int]
    crossbars: int  # crossbars at replication 1 (sum over units; > len(tiles) only when a
    # unit's tiles exceed one core and the unit had to be split)
    units: tuple[Unit, ...]
    max_replication: int  # beyond this, replication no longer lowers the group's bound


@dataclass(frozen=True)
class Publication:
    """One physical fragment a task publishes, and who reads it (task, bytes loaded)."""

    producer: int
    result: int
    slot: int
    bytes: int
    consumers: tuple[tuple[int, int], ...]


@dataclass
class PipelineProblem:
    graph: ComputeGraph
    target: Target
    groups: list[Group]
    group_of: list[int]
    publications: list[Publication]
    baseline_ns: int
    """Shared-memory service per inference for the function's outputs."""
    bounds: IntArray
    """(G, P): lower bound on the busiest core's load from group g at replication r (col r-1)."""
    path: IntArray
    """(G+1, G+1): longest dependency path inside groups j..i-1 (0 where i <= j)."""
    mem_shared: IntArray
    """(G+1, G+1): shared-memory service of stage j..i-1, one store per shared publication."""
    mem_transfer: IntArray
    """Same with one store per consumer transfer (no sharing)."""
    mem_nominal: FloatArray
    """Unrounded per-transfer volumes at nominal per-byte service (phase 1)."""
    pair_memory: IntArray = field(repr=False)
    """(G, G): service charged when groups a < b land in different stages: loads of b's
    transfers from a, plus the stores of a's publications whose last reader group is b."""
    top_level: list[int] = field(repr=False)
    """Earliest start of each task without communication (arrival order for packing)."""
    work_prefix: IntArray = field(repr=False)
    crossbar_prefix: IntArray = field(repr=False)

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    @cached_property
    def bottom_level(self) -> list[int]:
        return self.graph.bottom_levels()

    @cached_property
    def preds_flit(self) -> list[list[tuple[int, int]]]:
        """Per task, (producer, flit cycles of the transfer) for each dependency."""
        return [[(u, serial_cycles(self.target, b)) for u, b in ps]
                for ps in self.graph.preds]

    @cached_property
    def tile_index(self) -> dict[int, int]:
        return {w: k for k, w in enumerate(sorted(self.graph.distinct_weights()))}

    @cached_property
    def dense_tiles(self) -> tuple[int, list[IntArray]]:
        """(number of distinct tiles, dense tile indices per task)."""
        idx = self.tile_index
        return len(idx), [np.array(sorted(idx[w] for w in t.weights), dtype=np.int64)
                          for t in self.graph.tasks]

    @cached_property
    def hops(self) -> IntArray:
        """(P, P) XY hops between cores."""
        r, c = np.divmod(np.arange(self.num_cores), self.target.mesh_cols)
        out: IntArray = np.abs(r[:, None] - r) + np.abs(c[:, None] - c)
        return out

    @cached_property
    def edge_arrays(self) -> tuple[IntArray, IntArray, IntArray]:
        """(src, dst, bytes) of every dependency edge, as arrays."""
        e = self.graph.edges
        return (np.array([x.src for x in e], dtype=np.int64),
                np.array([x.dst for x in e], dtype=np.int64),
                np.array([x.bytes for x in e], dtype=np.int64))

    @property
    def num_cores(self) -> int:
        return self.target.num_cores

    def work(self, j: int, i: int) -> int:
        return int(self.work_prefix[i] - self.work_prefix[j])

    def crossbars(self, j: int, i: int) -> int:
        return int(self.crossbar_prefix[i] - self.crossbar_prefix[j])

    @property
    def total_work(self) -> int:
        return int(self.work_prefix[-1])

    def memory(self, cuts: Sequence[int], sharing: bool = True) -> int:
        """Baseline plus the cross-stage service of the stages starting at ``cuts``."""
        table = self.mem_shared if sharing else self.mem_transfer
        ends = [*cuts[1:], self.num_groups]
        return self.baseline_ns + sum(int(table[j, i]) for j, i in zip(cuts, ends, strict=True))

    def lower_bound(self, replication: bool) -> int:
        """Period lower bound that holds for every partition: work / cores, the heaviest group
        at its best replication, the baseline shared-memory service."""
        P = self.num_cores
        r = P if replication else 1
        heaviest = int(self.bounds[:, r - 1].max()) if self.groups else 0
        return max(-(-self.total_work // P), heaviest, self.baseline_ns, 1)

    def period_bound(self, replication: bool) -> int:
        """`lower_bound` raised to the least load at which the tasks can be packed onto the
        cores at all (`packing.packing_bound`): what no stream's steady period goes below
        (the report's `period_lower_bound_ns`). The partitioners keep `lower_bound`, the
        period model's own bound."""
        return max(self.lower_bound(replication), self.packed_work)

    @cached_property
    def on_chip(self) -> PipelineProblem:
        """This problem with stage boundaries free of shared-memory service and stage times
        free of the dependency path: stages whose boundaries are messages over the mesh and
        whose cores run their loops on successive inferences (`layered_stream`), so spare
        cores balance loads; the outputs' stores stay."""
        zero = np.zeros_like(self.mem_shared)
        return dataclasses.replace(self, path=np.zeros_like(self.path), mem_shared=zero,
                                   mem_transfer=zero,
                                   mem_nominal=np.zeros_like(self.mem_nominal),
                                   pair_memory=np.zeros_like(self.pair_memory))

    @cached_property
    def packed_work(self) -> int:
        """The least load at which the tasks may be packed onto the cores (≥ work / cores)."""
        return packing_bound([t.cost_ns for t in self.graph.tasks], self.num_cores,
                             max(-(-self.total_work // self.num_cores), 1))


def _atoms(graph: ComputeGraph) -> list[list[int]]:
    """Batches as atoms, split where a batch has internal edges or sits on a quotient cycle."""
    split = {graph.tasks[e.src].batch for e in graph.edges
             if graph.tasks[e.src].batch == graph.tasks[e.dst].batch >= 0}
    while True:
        key = [t.batch if t.batch >= 0 and t.batch not in split else -1 - t.id for t in graph.tasks]
        quotient = nx.DiGraph(list({(key[e.src], key[e.dst]) for e in graph.edges}))
        if nx.is_directed_acyclic_graph(quotient):
            break
        split.update(k for c in nx.strongly_connected_components(quotient) if len(c) > 1
                     for k in c if k >= 0)
    members: dict[int, list[int]] = {}
    for t, k in enumerate(key):
        members.setdefault(k, []).append(t)
    return list(members.values())


def topological_order(succ: Sequence[Collection[int]], key: Sequence[Any] | None = None
                      ) -> list[int]:
    """Kahn's algorithm over successor lists, the ready node of least ``key`` (default: id)
    first; shorter than ``succ`` where there is a cycle. (networkx and graphlib take twice as
    long on ResNet-18.)"""
    indeg = [0] * len(succ)
    for vs in succ:
        for v in vs:
            indeg[v] += 1
    prio = range(len(succ)) if key is None else key
    heap = [(prio[v], v) for v, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (prio[w], w))
    return order


def _order_atoms(graph: ComputeGraph, atoms: list[list[int]]) -> list[list[int]]:
    """Topological order of the atom DAG, earliest top level first (ties: smallest tile, id)."""
    head = graph.top_levels()
    atom_of = {t: a for a, ts in enumerate(atoms) for t in ts}
    succ: list[set[int]] = [set() for _ in atoms]
    for e in graph.edges:
        succ[atom_of[e.src]].add(atom_of[e.dst])
    prio = [(min(head[t] for t in ts),
             min((w for t in ts for w in graph.tasks[t].weights), default=-1), min(ts))
            for ts in atoms]
    return [sorted(atoms[a]) for a in topological_order(succ, prio)]


def _segments(graph: ComputeGraph, atoms: list[list[int]], max_groups: int) -> list[list[int]]:
    """Group boundaries over the ordered atoms: never inside a tile's users, at most
    ``max_groups`` segments (adjacent segments with the smallest combined work fuse first)."""
    m = len(atoms)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for pos, ts in enumerate(atoms):
        for t in ts:
            for w in graph.tasks[t].weights:
                first.setdefault(w, pos)
                last[w] = pos
    cover = np.zeros(m + 1, dtype=np.int64)  # atoms p and p+1 glued where cover[p] > 0
    for w, lo in first.items():
        cover[lo] += 1
        cover[last[w]] -= 1
    ends = [0, *(np.flatnonzero(np.cumsum(cover)[:m] == 0) + 1).tolist()]  # the last is m
    segs = [list(range(a, b)) for a, b in itertools.pairwise(ends)]
    work = np.array([sum(graph.tasks[t].cost_ns for p in s for t in atoms[p]) for s in segs],
                    dtype=np.int64)
    while len(segs) > max_groups:  # ties: the leftmost pair
        a = int((work[:-1] + work[1:]).argmin())
        segs[a:a + 2] = [segs[a] + segs[a + 1]]
        work[a] += work[a + 1]
        work = np.delete(work, a + 1)
    return segs


def _units(graph: ComputeGraph, tasks: Sequence[int], cap: int) -> list[Unit]:
    """Tile-sharing components of ``tasks``; a component whose tiles exceed one core is split
    first-fit into pieces that fit (their shared tiles are then held twice)."""
    tiles_of = nx.utils.UnionFind()
    for t in tasks:
        tiles_of.union(*graph.tasks[t].weights)
    comps: dict[int, list[int]] = {}
    for t in tasks:
        ws = graph.tasks[t].weights
        if ws:
            comps.setdefault(tiles_of[min(ws)], []).append(t)
    units: list[Unit] = []
    for members in comps.values():
        pieces: list[tuple[set[int], list[int]]] = []
        for t in members:
            ws = graph.tasks[t].weights
            for tiles, ts in pieces:
                if len(tiles | ws) <= cap:
                    tiles |= ws
                    ts.append(t)
                    break
            else:
                pieces.append((set(ws), [t]))
        for tiles, ts in pieces:
            ts.sort(key=lambda t: (-graph.tasks[t].cost_ns, t))
            units.append(Unit(tuple(ts), frozenset(tiles), sum(graph.tasks[t].cost_ns for t in ts)))
    units.sort(key=lambda u: (-u.work, u.tasks))
    return units


def unit_bound(costs: Sequence[int], r: int) -> int:
    """Lower bound on the makespan of ``costs`` (largest first) on ``r`` cores: ceil(sum / r)
    and, for every m, the m+1 smallest of the m·r+1 largest (two of them share a core)."""
    c = np.asarray(costs, dtype=np.int64)
    n = len(c)
    if n == 0:
        return 0
    pre = np.concatenate([[0], np.cumsum(c)])
    m = np.arange(0, (n - 1) // r + 1)
    best = int((pre[m * r + 1] - pre[m * r - m]).max())
    return max(best, -(-int(pre[-1]) // r))


def _group_bounds(graph: ComputeGraph, group: Group, P: int) -> IntArray:
    out = np.full(P, group.longest, dtype=np.int64)
    cache: dict[tuple[int, ...], IntArray] = {}
    for u in group.units:
        costs = tuple(graph.tasks[t].cost_ns for t in u.tasks)
        if costs not in cache:
            vals = [unit_bound(costs, r) for r in range(1, min(P, len(costs)) + 1)]
            cache[costs] = np.array(vals + [vals[-1]] * (P - len(vals)), dtype=np.int64)
        np.maximum(out, cache[costs], out=out)
    return out


def _publications_from_graph(graph: ComputeGraph) -> list[Publication]:
    """Without IR: each task publishes one fragment (its largest outgoing transfer) that every
    consumer loads with its edge's bytes."""
    return [Publication(t, 0, 0, max(b for _, b in succ), tuple(succ))
            for t, succ in enumerate(graph.succs) if succ]


def publications_from_build(build: GraphBuild, target: Target) -> tuple[list[Publication], int]:
    """Physical publications (producer, result, slot) with their consumer loads, and the
    baseline service (the output stores), from the publication map. Function inputs are read
    inside each task's body, as part of its own cost, outside the shared-memory queue (as
    the simulator runs them), so they add nothing to the serialized service."""
    readers: defaultdict[tuple[int, int, int], Counter[int]] = defaultdict(Counter)
    sizes: dict[tuple[int, int, int], int] = {}
    insts = build.projection.instances
    for inst in insts:
        mine: set[tuple[int, int, int, object]] = set()
        for use in inst.uses:
            if use.kind == "arg":  # read inside the task's body, in its cost: not queued
                continue
            for p in use.pieces:
                key = (p.producer, p.result, p.slot)
                # a crop of a whole value is loaded alone (the bytes it reads), once
                part = (*key, None if p.crop is None else (p.crop, p.sizes))
                if p.producer == inst.id or part in mine:
                    continue
                mine.add(part)
                if key not in sizes:  # the store publishes the whole fragment
                    sizes[key] = insts[p.producer].fragment_type(p.result).nbytes
                readers[key][inst.id] += p.fragment.nbytes
    baseline = sum(shared_write_ns(target, p.fragment.nbytes) for ps in build.outputs for p in ps)
    pubs = [Publication(k[0], k[1], k[2], sizes[k], tuple(sorted(readers[k].items())))
            for k in sorted(readers)]
    return pubs, baseline


def build_problem(graph: ComputeGraph, target: Target, *, build: GraphBuild | None = None,
                  max_groups: int = DEFAULT_MAX_GROUPS) -> PipelineProblem:
    """Groups, bounds and range tables of ``graph`` on ``target``.

    With ``build`` (the IR's GraphBuild) the shared-memory demands use the physical
    publications and the function inputs/outputs; without it every task publishes one fragment
    and the baseline is zero. Raises :class:`PipelineCapacityError` when the weights cannot fit.
    The cyclic collector is paused meanwhile (it rescans the IR on every allocation burst).
    """
    with collector_paused():
        return _build_problem(graph, target, build, max_groups)


def _build_problem(graph: ComputeGraph, target: Target, build: GraphBuild | None,
                   max_groups: int) -> PipelineProblem:
    graph.freeze()
    P, cap = target.num_cores, target.crossbars_per_core
    for task in graph.tasks:
        if len(task.weights) > cap:
            raise PipelineCapacityError(
                f"task {task.id} ({task.name}) needs {len(task.weights)} crossbar tiles at once "
                f"but a core has {cap} crossbars")
    atoms = _order_atoms(graph, _atoms(graph))
    segs = _segments(graph, atoms, max(1, max_groups))
    group_of = [0] * graph.num_tasks
    groups: list[Group] = []
    for gid, seg in enumerate(segs):
        tasks = tuple(t for p in seg for t in atoms[p])
        for t in tasks:
            group_of[t] = gid
        units = _units(graph, tasks, cap)
        costs = [graph.tasks[t].cost_ns for t in tasks]
        tiles = frozenset().union(*(graph.tasks[t].weights for t in tasks))
        groups.append(Group(
            id=gid, tasks=tasks,
            batches=tuple(sorted({graph.tasks[t].batch for t in tasks})),
            work=sum(costs), longest=max(costs, default=0), tiles=tiles,
            crossbars=sum(len(u.tiles) for u in units), units=tuple(units),
            max_replication=min(P, max((len(u.tasks) for u in units), default=1)),
        ))
    crossbars = sum(g.crossbars for g in groups)
    if crossbars > target.crossbar_capacity:
        distinct = len(graph.distinct_weights())
        extra = f" ({distinct} distinct tiles + {crossbars - distinct} split copies)" \
            if crossbars > distinct else ""
        raise PipelineCapacityError(
            f"the pipeline needs {crossbars} crossbars{extra} but the target has "
            f"{target.num_cores} cores x {cap} crossbars = {target.crossbar_capacity}, even "
            f"with every stage on its own cores")
    if build is not None:
        pubs, baseline = publications_from_build(build, target)
    else:
        pubs, baseline = _publications_from_graph(graph), 0
    shared, transfer, nominal, pair = _memory_tables(target, len(groups), group_of, pubs)
    return PipelineProblem(
        graph=graph, target=target, groups=groups, group_of=group_of, publications=pubs,
        baseline_ns=baseline, path=_path_table(graph, groups, group_of),
        bounds=np.array([_group_bounds(graph, g, P) for g in groups], np.int64).reshape(-1, P),
        mem_shared=shared, mem_transfer=transfer, mem_nominal=nominal, pair_memory=pair,
        top_level=graph.top_levels(),
        work_prefix=np.cumsum([0, *(g.work for g in groups)], dtype=np.int64),
        crossbar_prefix=np.cumsum([0, *(g.crossbars for g in groups)], dtype=np.int64))


def _path_table(graph: ComputeGraph, groups: list[Group], group_of: list[int]) -> IntArray:
    """``path[j, i]``: longest task chain inside groups j..i-1, for all ranges in one sweep.

    ``d[t, j]`` is the longest chain ending at t among tasks of groups ≥ j (zero for j beyond
    t's group), so one pass in group order fills every range start at once."""
    G = len(groups)
    out = np.zeros((G + 1, G + 1), dtype=np.int64)
    if G == 0:
        return out
    d = np.zeros((graph.num_tasks, G), dtype=np.int64)
    pm = np.zeros((G, G), dtype=np.int64)  # pm[g, j]: longest chain ending in group g
    for g in groups:
        for t in g.tasks:
            preds = [u for u, _ in graph.preds[t]]
            row = d[preds].max(axis=0) if preds else np.zeros(G, dtype=np.int64)
            row = row + graph.tasks[t].cost_ns
            row[g.id + 1:] = 0
            d[t] = row
        if g.tasks:
            pm[g.id] = d[list(g.tasks)].max(axis=0)
    for j in range(G):
        out[j, j + 1:] = np.maximum.accumulate(pm[j:, j])
    return out


def _range_sum_tables(pairs: FloatArray, G: int) -> tuple[FloatArray, FloatArray]:
    """From pair demands ``pairs[a, b]`` (producer group a < consumer group b), the store
    table S[j, i] = Σ_{j≤a<i≤b} and the load table L[j, i] = Σ_{a<j≤b<i}."""
    # stores: C[a, i] = Σ_{b≥i} pairs[a, b]; S[j, i] = Σ_{a=j}^{i-1} C[a, i]
    C = np.zeros((G + 1, G + 1))
    C[:G, :G] = np.cumsum(pairs[:, ::-1], axis=1)[:, ::-1]
    E = np.cumsum(C[::-1], axis=0)[::-1]  # E[x, i] = Σ_{a≥x} C[a, i]
    idx = np.arange(G + 1)
    S = E - E[idx, idx][None, :]  # S[j, i] = E[j, i] - E[i, i]
    # loads: F[x, b] = Σ_{a<x} pairs[a, b]; L[j, i] = Σ_{b=j}^{i-1} F[j, b]
    F = np.zeros((G + 1, G + 1))
    F[1:, :G] = np.cumsum(pairs, axis=0)
    H = np.zeros((G + 1, G + 1))
    H[:, 1:] = np.cumsum(F[:, :G], axis=1)  # H[j, i] = Σ_{b<i} F[j, b]
    L = H - H[idx, idx][:, None]
    upper = np.triu(np.ones((G + 1, G + 1), dtype=bool), k=1)
    return np.where(upper, S, 0.0), np.where(upper, L, 0.0)


def service_ns(target: Target, nbytes: npt.NDArray[np.int64], cycles: int) -> IntArray:
    """Vectorized :func:`raptor.solver.costs.shared_read_ns` / ``shared_write_ns``."""
    clock = target.clock_fraction
    accesses = -(-nbytes // target.shared_access_bytes)
    out: IntArray = -(-(accesses * cycles) * clock.denominator // clock.numerator)
    return out


def _memory_tables(t: Target, G: int, gof: list[int], publications: list[Publication]
                   ) -> tuple[IntArray, IntArray, FloatArray, IntArray]:
    """Range tables (mem_shared, mem_transfer, mem_nominal) and pair_memory (the fields)."""
    stores: list[tuple[int, int, int]] = []  # (producer group, last reader group, bytes)
    loads: list[tuple[int, int, int]] = []  # (producer group, reader group, bytes)
    for p in publications:
        a = gof[p.producer]
        later = [(gof[v], nb) for v, nb in p.consumers if gof[v] > a]
        if later:
            stores.append((a, max(b for b, _ in later), p.bytes))
            loads.extend((a, b, nb) for b, nb in later)
    st_a, st_b, sb = np.array(stores, dtype=np.int64).reshape(-1, 3).T
    tr_a, tr_b, tb = np.array(loads, dtype=np.int64).reshape(-1, 3).T

    def pairs(a: IntArray, b: IntArray, val: FloatArray) -> FloatArray:
        out = np.zeros((G, G))
        np.add.at(out, (a, b), val)
        return out

    w, r = t.shared_write_cycles, t.shared_read_cycles
    store_sh = pairs(st_a, st_b, service_ns(t, sb, w).astype(float))
    load = pairs(tr_a, tr_b, service_ns(t, tb, r).astype(float))
    s_sh, _ = _range_sum_tables(store_sh, G)
    s_tr, _ = _range_sum_tables(pairs(tr_a, tr_b, service_ns(t, tb, w).astype(float)), G)
    _, ld = _range_sum_tables(load, G)
    nominal = tb.astype(float) / float(t.clock_fraction) / t.shared_access_bytes
    s_nom, _ = _range_sum_tables(pairs(tr_a, tr_b, nominal * w), G)
    _, l_nom = _range_sum_tables(pairs(tr_a, tr_b, nominal * r), G)
    return (np.rint(s_sh + ld).astype(np.int64), np.rint(s_tr + ld).astype(np.int64),
            s_nom + l_nom, np.rint(store_sh + load).astype(np.int64))
