"""IR-independent scheduling graph: one task per lane instance, weighted dependency edges.

Schedulers read only this structure (`raptor.solver.from_ir` builds it from IR), so they can
be tested on synthetic graphs. Build with `add_task` / `add_edge`, then `freeze` (checks ids
and acyclicity; parallel edges merge, summing their bytes: one transfer carries them all).

Edges carry dependencies; *fragments* say what travels: a piece of one producer's output that
crosses the mesh as one message per destination core, however many tasks there read it
(`add_fragment`, `add_read`). A graph without declared fragments gets one per edge.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def _read_only(*arrays: IntArray) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """The four arrays, made read-only (a graph's cached arrays are shared by callers)."""
    for a in arrays:
        a.flags.writeable = False
    a, b, c, d = arrays
    return a, b, c, d


class GraphError(ValueError):
    """Malformed compute graph (bad ids, self loops, cycles)."""


@dataclass(frozen=True)
class Task:
    """One schedulable instance.

    ``weights``: crossbar tile ids that must be resident on the executing core.
    ``batch``: group id shared by the interchangeable lanes of one graph batch (-1: none);
    consecutive tasks of one batch on a core merge into one scheduled_compute_batch.
    ``lane``: lane index inside the batch (informational, also used for stable ordering).
    """

    id: int
    name: str
    cost_ns: int
    weights: frozenset[int] = frozenset()
    batch: int = -1
    lane: int = 0
    shared_ns: int = 0
    """The part of ``cost_ns`` spent writing shared memory at the end of the task, which the
    chip serves one request at a time (the rest is the core's own work)."""
    load_bytes: int = 0
    """IR bytes the task reads from shared memory (function inputs) as it starts, priced in
    ``cost_ns`` as the core's own work; pimsim-nn's protocol queues them
    (`raptor.solver.blocking`)."""
    store_bytes: int = 0
    """IR bytes of the graph outputs it writes to shared memory (priced in ``shared_ns``)."""


@dataclass(frozen=True)
class Fragment:
    """``bytes`` of ``producer``'s output that travel as one message per destination core."""

    producer: int
    bytes: int


@dataclass
class MemoryDemand:
    """What the tasks of a graph need of their core's local memory, in bytes as the target
    stores activations. With it, the communication model posts receives only while they
    fit (:func:`raptor.solver.comm.replay`); without it, receives cost no memory."""

    scratch: list[int]
    """Per task: the buffers it builds while it runs (gathered inputs, intermediates, its
    results), not counting the received or local values it reads."""
    output: list[int]
    """Per task: its results, kept after it ends until its last reader on its core."""
    fragment: list[int]
    """Per fragment: the buffer a received copy occupies."""
    constants: list[list[int]] = field(default_factory=list)
    """Per task: the constants it reads as data (ids into ``constant``), resident on its
    core for the whole program."""
    constant: list[int] = field(default_factory=list)
    """Per constant id: its bytes."""


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    bytes: int


@dataclass
class ComputeGraph:
    """Tasks with ids 0..n-1 and edges src → dst carrying ``bytes`` of data."""

    tasks: list[Task] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    fragments: list[Fragment] = field(default_factory=list)
    reads: list[list[int]] = field(default_factory=list)
    """Fragment ids each task reads (filled per edge by freeze() when none were declared)."""
    local_reads: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """task -> (fragment, ns): extra work when the fragment's producer runs on the task's
    own core (a local value cropped, then inserted: two copies where a received crop needs
    one). See :meth:`durations`."""
    memory: MemoryDemand | None = None
    """Local memory the tasks need (None: not modelled)."""
    tile_layer: dict[int, str] = field(default_factory=dict)
    """Crossbar tile id -> the layer whose weight it holds (where known): the tiles of one
    layer's lanes compete for the same cores at the same time (PEFT's replica caps)."""
    position: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Task -> (row, column) where its output starts in the NCHW activation its readers
    see (where known: lowering's row-band lanes): PEFT's placement by position
    (`raptor.solver.peft.place_by_position`)."""
    _frozen: bool = field(default=False, repr=False)
    # Filled by freeze(): adjacency as (neighbour, bytes) lists and a topological order.
    preds: list[list[tuple[int, int]]] = field(default_factory=list, repr=False)
    succs: list[list[tuple[int, int]]] = field(default_factory=list, repr=False)
    topo_order: list[int] = field(default_factory=list, repr=False)
    _largest: Mapping[tuple[int, int], int] | None = field(default=None, init=False, repr=False)
    _costs: list[int] | None = field(default=None, init=False, repr=False)
    _tail: list[int] | None = field(default=None, init=False, repr=False)
    _weights: frozenset[int] | None = field(default=None, init=False, repr=False)
    _edge_arrays: tuple[IntArray, IntArray, IntArray, IntArray] | None = field(
        default=None, init=False, repr=False, compare=False)
    _read_arrays: tuple[IntArray, IntArray, IntArray, IntArray] | None = field(
        default=None, init=False, repr=False, compare=False)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def add_task(self, name: str, cost_ns: int, weights: Iterable[int] = (), batch: int = -1,
                 lane: int = 0, shared_ns: int = 0, load_bytes: int = 0,
                 store_bytes: int = 0) -> int:
        """Append a task and return its id."""
        if self._frozen:
            raise GraphError("graph is frozen")
        if isinstance(cost_ns, bool) or not isinstance(cost_ns, int) or cost_ns < 0:
            raise GraphError(f"task {name!r}: cost_ns must be a non-negative int, got {cost_ns!r}")
        if not 0 <= shared_ns <= cost_ns:
            raise GraphError(f"task {name!r}: shared_ns {shared_ns} outside 0..{cost_ns}")
        tid = len(self.tasks)
        self.tasks.append(Task(tid, name, cost_ns, frozenset(weights), batch, lane, shared_ns,
                               load_bytes, store_bytes))
        self.reads.append([])
        return tid

    def add_fragment(self, producer: int, nbytes: int) -> int:
        """Declare a fragment of ``producer``'s output; returns its id."""
        if self._frozen:
            raise GraphError("graph is frozen")
        if not 0 <= producer < len(self.tasks) or nbytes < 0:
            raise GraphError(f"fragment of task {producer} with {nbytes} bytes is invalid")
        self.fragments.append(Fragment(producer, nbytes))
        return len(self.fragments) - 1

    def add_read(self, task: int, fragment: int, local_ns: int = 0) -> None:
        """``task`` reads ``fragment`` (an edge from its producer must exist by freeze());
        ``local_ns``: its extra work when the producer runs on the same core."""
        if self._frozen:
            raise GraphError("graph is frozen")
        if not 0 <= fragment < len(self.fragments) or not 0 <= task < len(self.tasks):
            raise GraphError(f"read of fragment {fragment} by task {task} names nothing")
        if self.fragments[fragment].producer == task:
            raise GraphError(f"task {task} reads its own fragment {fragment}")
        if local_ns < 0:
            raise GraphError(f"task {task}: negative local read cost {local_ns}")
        self.reads[task].append(fragment)
        if local_ns:
            self.local_reads.setdefault(task, []).append((fragment, local_ns))

    def durations(self, core_of: Sequence[int]) -> list[int]:
        """Each task's run time under a placement: its cost plus its local reads' extra."""
        out = self.costs()
        frags = self.fragments
        for t, extra in self.local_reads.items():
            p = core_of[t]
            out[t] += sum(ns for f, ns in extra if core_of[frags[f].producer] == p)
        return out

    def max_durations(self) -> list[int]:
        """Each task's longest run time under any placement (every local read local)."""
        out = self.costs()
        for t, extra in self.local_reads.items():
            out[t] += sum(ns for _, ns in extra)
        return out

    def add_edge(self, src: int, dst: int, nbytes: int = 0) -> None:
        if self._frozen:
            raise GraphError("graph is frozen")
        n = len(self.tasks)
        if not (0 <= src < n and 0 <= dst < n):
            raise GraphError(f"edge {src} -> {dst} names a task outside 0..{n - 1}")
        if src == dst:
            raise GraphError(f"self loop on task {src} ({self.tasks[src].name})")
        if nbytes < 0:
            raise GraphError(f"edge {src} -> {dst}: negative bytes {nbytes}")
        self.edges.append(Edge(src, dst, nbytes))

    def freeze(self) -> ComputeGraph:
        """Merge parallel edges, build adjacency, check acyclicity; returns self."""
        if self._frozen:
            return self
        merged: dict[tuple[int, int], int] = {}
        for e in self.edges:
            merged[(e.src, e.dst)] = merged.get((e.src, e.dst), 0) + e.bytes
        self.edges = [Edge(s, d, b) for (s, d), b in sorted(merged.items())]
        n = len(self.tasks)
        self.preds = [[] for _ in range(n)]
        self.succs = [[] for _ in range(n)]
        for e in self.edges:
            self.succs[e.src].append((e.dst, e.bytes))
            self.preds[e.dst].append((e.src, e.bytes))
        indeg = [len(p) for p in self.preds]
        stack = [t for t in range(n - 1, -1, -1) if indeg[t] == 0]
        order: list[int] = []
        while stack:
            t = stack.pop()
            order.append(t)
            for s, _ in reversed(self.succs[t]):
                indeg[s] -= 1
                if indeg[s] == 0:
                    stack.append(s)
        if len(order) != n:
            cyc = self._find_cycle([t for t in range(n) if indeg[t] > 0])
            names = " -> ".join(f"{t}:{self.tasks[t].name}" for t in cyc)
            raise GraphError(f"dependency cycle: {names}")
        self.topo_order = order
        self._link_fragments()
        self._frozen = True
        return self

    def _link_fragments(self) -> None:
        if not self.fragments:
            for e in self.edges:
                self.reads[e.dst].append(len(self.fragments))
                self.fragments.append(Fragment(e.src, e.bytes))
            return
        pairs = {(e.src, e.dst) for e in self.edges}
        for t, frags in enumerate(self.reads):
            frags[:] = sorted(set(frags))
            for f in frags:
                u = self.fragments[f].producer
                if (u, t) not in pairs:
                    raise GraphError(f"task {t} reads fragment {f} of task {u} without an edge")

    def largest_message(self) -> Mapping[tuple[int, int], int]:
        """Per edge (u, v), the bytes of the largest fragment of u that v reads: without
        contention, v can start that long (plus hops) after u ends on another core. Made
        once (the frozen graph does not change; CP-SAT and LNS ask) from :meth:`edge_arrays`."""
        if self._largest is None:
            src, dst, _, largest = self.edge_arrays()
            self._largest = MappingProxyType(dict(zip(
                zip(src.tolist(), dst.tolist(), strict=True), largest.tolist(), strict=True)))
        return self._largest

    def edge_arrays(self) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """The edges as read-only arrays in `edges` order (by producer, then reader, which is
        also the order of the `succs` lists laid end to end): producers, readers, bytes and
        each edge's :meth:`largest_message`. Made once: the bounds and every retiming price
        all edges at once."""
        if self._edge_arrays is None:
            self.freeze()
            m, n = len(self.edges), self.num_tasks
            src, dst, nbytes = (np.fromiter(map(attrgetter(a), self.edges), np.int64, m)
                                for a in ("src", "dst", "bytes"))
            reader, frag, producer, frag_bytes = self.read_arrays()
            # each read's edge (the edges are sorted by producer, then reader; every read
            # has one, `freeze` checks), its largest fragment kept
            edge = np.searchsorted(src * n + dst, producer[frag] * n + reader)
            largest = np.zeros(m, dtype=np.int64)
            np.maximum.at(largest, edge, frag_bytes[frag])
            self._edge_arrays = _read_only(src, dst, nbytes, largest)
        return self._edge_arrays

    def read_arrays(self) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """The reads as read-only arrays, in task order (each task's `reads` in order): the
        reader and the fragment; and per fragment, its producer and bytes. Made once: the
        bounds, the edges' arrays and every replay's set-up take all reads at once."""
        if self._read_arrays is None:
            self.freeze()
            reads, frags = self.reads, self.fragments
            counts = np.fromiter(map(len, reads), np.int64, len(reads))
            self._read_arrays = _read_only(
                np.repeat(np.arange(len(reads), dtype=np.int64), counts),
                np.fromiter(itertools.chain.from_iterable(reads), np.int64, int(counts.sum())),
                *(np.fromiter(map(attrgetter(a), frags), np.int64, len(frags))
                  for a in ("producer", "bytes")))
        return self._read_arrays

    def _find_cycle(self, remaining: list[int]) -> list[int]:
        # Every task left after Kahn's algorithm has a remaining predecessor: walk backwards
        # until a task repeats.
        left = set(remaining)
        seen: dict[int, int] = {}
        path: list[int] = []
        t = remaining[0]
        while t not in seen:
            seen[t] = len(path)
            path.append(t)
            t = next(p for p, _ in self.preds[t] if p in left)
        cycle = [*path[seen[t]:], t]
        cycle.reverse()
        return cycle

    # -- derived quantities used by every algorithm --------------------------------------------

    def costs(self) -> list[int]:
        """Each task's cost (a new list; read once from the tasks of a frozen graph)."""
        if not self._frozen:
            return [t.cost_ns for t in self.tasks]
        if self._costs is None:
            self._costs = [t.cost_ns for t in self.tasks]
        return list(self._costs)

    def distinct_weights(self) -> frozenset[int]:
        """Every crossbar tile a task uses (made once per frozen graph: the capacity check,
        PEFT's tiles and the bounds all ask)."""
        if self._weights is not None:
            return self._weights
        weights = frozenset[int]().union(*(t.weights for t in self.tasks))
        if self._frozen:
            self._weights = weights
        return weights

    def top_levels(self) -> list[int]:
        """Earliest start of each task on unlimited cores without communication."""
        self.freeze()
        head = [0] * self.num_tasks
        for t in self.topo_order:
            end = head[t] + self.tasks[t].cost_ns
            for s, _ in self.succs[t]:
                head[s] = max(head[s], end)
        return head

    def bottom_levels(self) -> list[int]:
        """Longest pure-work path from the start of each task to the end of the graph (a new
        list; made once)."""
        self.freeze()
        if self._tail is not None:
            return list(self._tail)
        tail = self.costs()
        succs = self.succs
        for t in reversed(self.topo_order):
            below = 0
            for s, _ in succs[t]:
                if tail[s] > below:
                    below = tail[s]
            tail[t] += below
        self._tail = tail
        return list(tail)
