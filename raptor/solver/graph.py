"""IR-independent scheduling graph: one task per lane instance, weighted dependency edges.

The IR → ComputeGraph projection (publication map) lives outside the solver; everything in
``raptor.solver`` reads only this structure, so schedulers can be tested on synthetic graphs.

Build with :meth:`ComputeGraph.add_task` / :meth:`ComputeGraph.add_edge`, then call
:meth:`ComputeGraph.freeze` (checks ids, acyclicity, and computes the topological order and
adjacency arrays that the algorithms use). Parallel edges between the same pair are merged by
summing their bytes, since one producer → consumer transfer carries all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


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
    _frozen: bool = field(default=False, repr=False)
    # Filled by freeze(): adjacency as (neighbour, bytes) lists and a topological order.
    preds: list[list[tuple[int, int]]] = field(default_factory=list, repr=False)
    succs: list[list[tuple[int, int]]] = field(default_factory=list, repr=False)
    topo_order: list[int] = field(default_factory=list, repr=False)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def add_task(
        self,
        name: str,
        cost_ns: int,
        weights: Iterable[int] = (),
        batch: int = -1,
        lane: int = 0,
    ) -> int:
        """Append a task and return its id."""
        if self._frozen:
            raise GraphError("graph is frozen")
        if isinstance(cost_ns, bool) or not isinstance(cost_ns, int) or cost_ns < 0:
            raise GraphError(f"task {name!r}: cost_ns must be a non-negative int, got {cost_ns!r}")
        tid = len(self.tasks)
        self.tasks.append(Task(tid, name, cost_ns, frozenset(weights), batch, lane))
        return tid

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
        self._frozen = True
        return self

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
        return [t.cost_ns for t in self.tasks]

    def distinct_weights(self) -> frozenset[int]:
        out: set[int] = set()
        for t in self.tasks:
            out |= t.weights
        return frozenset(out)

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
        """Longest pure-work path from the start of each task to the end of the graph."""
        self.freeze()
        tail = [0] * self.num_tasks
        for t in reversed(self.topo_order):
            tail[t] = self.tasks[t].cost_ns + max((tail[s] for s, _ in self.succs[t]), default=0)
        return tail
