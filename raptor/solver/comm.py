"""The communication cost model: what the simulator charges for moving data, in integer ns.

One module for every consumer of the model — PEFT reserves with it, CP-SAT's constraints are
derived from it, and :func:`replay` evaluates a finished schedule with it (the figure
reported as the schedule's estimate). It models the simulator's default options
(`raptor.sim.SimOptions()`), term by term:

* **Messages.** A graph fragment (:class:`raptor.solver.graph.Fragment`) crosses the mesh
  once per destination core, however many tasks there read it; same-core reads are free.
  Materialization sends exactly these messages, each right after its producer (and its
  shared-memory stores), ordered by :func:`send_order`.
* **Links.** XY routing (along the row, then the column); every directed link carries one
  message at a time. Cut-through: the head advances one hop per ``hop_ns`` and waits at a
  busy link; the link is then busy for the message's serialisation time
  ``ceil(bytes / flit_bytes) * flit_cycles``. Without waiting a message takes exactly
  ``Target.transfer_ns``. Links are granted in injection-time order, as in the simulator.
* **Rendezvous.** A send completes when its receive is posted; the sender then continues
  and the data crosses on its own. Materialization posts every receive at the start of its
  core's program (a posted receive costs nothing and never blocks), so no send ever waits
  for its partner and the protocol adds no time. The receiving task waits for the data.
* **Shared memory.** The chip serves one shared-memory request at a time: the part of a
  task that stores graph outputs (``Task.shared_ns``) queues, in request order. Loads of
  function inputs inside compute bodies are part of the task's own cost (no queue).
* **Endpoint copies.** Inserting a received fragment into the consumer's input buffer is a
  local copy already in the consumer's cost (`raptor.solver.costs`); a region send is a DMA
  descriptor, so the sender pays nothing.

What it leaves out: lanes that materialization merges into one scheduled batch gather their
inputs once (a little cheaper) and start when all of them have arrived (possibly a little
later). Everything else is what the simulator does, so the replayed makespan predicts the
simulated latency.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from raptor.solver.graph import ComputeGraph
from raptor.target import Target

EAST, WEST, SOUTH, NORTH = range(4)


class Network:
    """XY routes and message timing of a target's mesh (integer ns)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.P = target.num_cores
        self.cols = target.mesh_cols
        self.hop_ns = target.ns(target.hop_cycles)
        self.num_links = 4 * self.P
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._flits: dict[int, tuple[int, int]] = {}
        clock = target.clock_fraction
        self._num, self._den = clock.numerator, clock.denominator

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Directed links (``core * 4 + direction``) from ``src`` to ``dst``: the row first,
        then the column, as the simulator routes."""
        got = self._routes.get((src, dst))
        if got is not None:
            return got
        cols = self.cols
        r, c = divmod(src, cols)
        rd, cd = divmod(dst, cols)
        links = []
        while c != cd:
            links.append((r * cols + c) * 4 + (EAST if cd > c else WEST))
            c += 1 if cd > c else -1
        while r != rd:
            links.append((r * cols + c) * 4 + (SOUTH if rd > r else NORTH))
            r += 1 if rd > r else -1
        got = self._routes[(src, dst)] = tuple(links)
        return got

    def link_ends(self, link: int) -> tuple[int, int]:
        """The (from, to) cores of a directed link."""
        core, d = divmod(link, 4)
        step = (1, -1, self.cols, -self.cols)[d]
        return core, core + step

    def message(self, src: int, dst: int, nbytes: int) -> tuple[tuple[int, ...], int, int]:
        """(route, serialisation ns — how long it holds each link —, free-link transfer ns,
        i.e. ``Target.transfer_ns``) of a message."""
        links = self._routes.get((src, dst))
        if links is None:
            links = self.route(src, dst)
        flits = self._flits.get(nbytes)
        if flits is None:
            t = self.target
            cycles = -(-nbytes // t.flit_bytes) * t.flit_cycles
            flits = self._flits[nbytes] = (cycles, t.ns(cycles))
        if not links:
            return links, flits[1], 0
        cycles = len(links) * self.target.hop_cycles + flits[0]
        return links, flits[1], -(-cycles * self._den // self._num)  # Target.transfer_ns


class Timelines:
    """Busy intervals of ``n`` exclusive resources (links, the shared memory), kept sorted
    and disjoint, so that a list scheduler can reserve them out of time order (insertion,
    as it reserves core time)."""

    def __init__(self, n: int) -> None:
        self.starts: list[list[int]] = [[] for _ in range(n)]
        self.ends: list[list[int]] = [[] for _ in range(n)]

    def fit(self, r: int, t: int, dur: int) -> int:
        """Earliest start >= ``t`` of a free stretch of ``dur`` on resource ``r``."""
        if dur <= 0:
            return t
        starts, ends = self.starts[r], self.ends[r]
        i = bisect.bisect_right(ends, t)
        while i < len(starts) and starts[i] < t + dur:
            t = max(t, ends[i])
            i += 1
        return t

    def reserve(self, r: int, s: int, dur: int) -> None:
        """Mark [s, s + dur) busy (it must be free); touching intervals merge."""
        if dur <= 0:
            return
        starts, ends = self.starts[r], self.ends[r]
        e = s + dur
        i = bisect.bisect_right(ends, s)
        if i > 0 and ends[i - 1] == s:
            i -= 1
            s = starts[i]
            del starts[i], ends[i]
        if i < len(starts) and starts[i] == e:
            e = ends[i]
            del starts[i], ends[i]
        starts.insert(i, s)
        ends.insert(i, e)


class LinkPlanner:
    """Message reservations on the mesh links for a list scheduler: the same cut-through
    rule as :func:`replay`, but with insertion into idle link time."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self.links = Timelines(net.num_links)

    def arrival(self, src: int, dst: int, nbytes: int, inject: int, commit: bool) -> int:
        """When a message of ``nbytes`` injected at ``inject`` arrives (``commit``: reserve
        its links)."""
        links, ser, transfer = self.net.message(src, dst, nbytes)
        if not links:
            return inject
        hop = self.net.hop_ns
        head = inject - hop
        tl = self.links
        ends_of = tl.ends
        for link in links:
            head += hop
            ends = ends_of[link]
            if ends and ends[-1] > head:  # the link is busy at some point after head
                head = tl.fit(link, head, ser)
            if commit:
                tl.reserve(link, head, ser)
        return transfer + head - (len(links) - 1) * hop


def send_order(graph: ComputeGraph, core_of: Sequence[int], priority: Sequence[int]
               ) -> list[list[tuple[int, int]]]:
    """Per producer task, its messages as (fragment, destination core), most urgent first:
    by the earliest ``priority`` (planned start) of a reader on the destination, then the
    destination core and the fragment. Materialization orders its sends by the same rule."""
    graph.freeze()
    urgency: dict[tuple[int, int], int] = {}
    for t, frags in enumerate(graph.reads):
        q = core_of[t]
        for f in frags:
            if core_of[graph.fragments[f].producer] != q:
                key = (f, q)
                prev = urgency.get(key)
                if prev is None or priority[t] < prev:
                    urgency[key] = priority[t]
    out: list[list[tuple[int, int]]] = [[] for _ in range(graph.num_tasks)]
    for (f, q), _ in sorted(urgency.items(), key=lambda kv: (kv[1], kv[0][1], kv[0][0])):
        out[graph.fragments[f].producer].append((f, q))
    return out


@dataclass
class Replay:
    """A schedule played through the communication model (see :func:`replay`)."""

    start: list[int]
    end: list[int]
    makespan_ns: int
    messages: int
    bytes_moved: int
    link_busy_ns: list[int]
    """Per directed link (``Network.route`` numbering), the time it carried messages."""
    arrival: dict[tuple[int, int], int] = field(default_factory=dict)
    """(fragment, core) -> when the fragment's message arrived there."""

    links: int = 0
    """How many directed links the mesh has (``link_busy_ns`` also numbers the missing
    links of border cores, which stay idle)."""

    def link_utilization(self) -> tuple[float, float]:
        """(max, mean) over the mesh's links of busy time / makespan."""
        span = max(self.makespan_ns, 1)
        busy = self.link_busy_ns
        return (max(busy, default=0) / span, sum(busy) / max(self.links, 1) / span)


_RUN, _INJECT, _MEM = range(3)


class _Replayer:
    def __init__(self, graph: ComputeGraph, target: Target, core_of: Sequence[int],
                 core_tasks: Sequence[Sequence[int]], priority: Sequence[int],
                 contention: bool) -> None:
        self.g = graph
        self.net = Network(target)
        self.core_of = core_of
        self.progs = [list(ts) for ts in core_tasks]
        self.contention = contention
        n = graph.num_tasks
        self.start = [0] * n
        self.end = [0] * n
        self.sends = send_order(graph, core_of, priority)
        self.dur = graph.durations(core_of)
        self.arrival: dict[tuple[int, int], int] = {}
        self.waiting: dict[tuple[int, int], int] = {}  # (fragment, core) -> parked core
        self.pc = [0] * len(self.progs)
        self.clock = [0] * len(self.progs)
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.link_free = [0] * self.net.num_links
        self.link_busy = [0] * self.net.num_links
        self.mem_free = 0
        self.messages = 0
        self.bytes = 0

    def push(self, time: int, kind: int, payload: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, kind, payload))

    def run(self) -> Replay:
        for p in range(len(self.progs)):
            self.push(0, _RUN, p)
        while self.heap:
            time, _, kind, payload = heapq.heappop(self.heap)
            if kind == _RUN:
                self.run_core(payload)
            elif kind == _INJECT:
                self.inject(payload, time)
            else:
                self.serve(payload)
        stuck = [p for p, prog in enumerate(self.progs) if self.pc[p] < len(prog)]
        if stuck:
            raise ValueError(f"per-core order contradicts the dependencies: cores {stuck} "
                             "wait forever")
        t = self.net.target
        links = 2 * (t.mesh_rows * (t.mesh_cols - 1) + t.mesh_cols * (t.mesh_rows - 1))
        return Replay(self.start, self.end, max(self.clock, default=0), self.messages,
                      self.bytes, self.link_busy, self.arrival, links)

    def run_core(self, p: int) -> None:
        """Run core ``p`` until it waits for a message not yet injected, queues a
        shared-memory request, or finishes."""
        g, prog = self.g, self.progs[p]
        core_of, clock = self.core_of, self.clock[p]
        while self.pc[p] < len(prog):
            t = prog[self.pc[p]]
            ready = clock
            for f in g.reads[t]:
                u = g.fragments[f].producer
                if core_of[u] == p:
                    continue
                a = self.arrival.get((f, p))
                if a is None:
                    self.clock[p] = clock
                    self.waiting[(f, p)] = p
                    return
                ready = max(ready, a)
            task = g.tasks[t]
            self.start[t] = ready
            clock = ready + self.dur[t] - task.shared_ns
            if task.shared_ns:
                self.clock[p] = clock
                self.push(clock, _MEM, p)
                return
            self.finish(t, p, clock)
        self.clock[p] = clock

    def finish(self, t: int, p: int, clock: int) -> None:
        self.end[t] = clock
        self.clock[p] = clock
        self.pc[p] += 1
        for f, q in self.sends[t]:
            self.messages += 1
            self.bytes += self.g.fragments[f].bytes
            self.push(clock, _INJECT, f * len(self.progs) + q)

    def serve(self, p: int) -> None:
        t = self.progs[p][self.pc[p]]
        task = self.g.tasks[t]
        begin = max(self.clock[p], self.mem_free) if self.contention else self.clock[p]
        done = begin + task.shared_ns
        self.mem_free = done
        self.finish(t, p, done)
        self.run_core(p)

    def inject(self, key: int, now: int) -> None:
        f, q = divmod(key, len(self.progs))
        nbytes = self.g.fragments[f].bytes
        src = self.core_of[self.g.fragments[f].producer]
        links, ser, transfer = self.net.message(src, q, nbytes)
        delay = 0
        if links:
            hop = self.net.hop_ns
            head = now - hop
            free, busy = self.link_free, self.link_busy
            for link in links:
                head += hop
                if self.contention and free[link] > head:
                    head = free[link]
                free[link] = head + ser
                busy[link] += ser
            delay = head - (now + (len(links) - 1) * hop)
        arrived = now + transfer + delay
        self.arrival[(f, q)] = arrived
        if self.waiting.pop((f, q), None) is not None:
            self.push(arrived, _RUN, q)


def replay(graph: ComputeGraph, target: Target, core_of: Sequence[int],
           core_tasks: Sequence[Sequence[int]], priority: Sequence[int] | None = None,
           contention: bool = True) -> Replay:
    """Play a placement and per-core order through the model, as the simulator would run
    the materialized program: each core runs its tasks in order, a task starts when its
    core is free and every fragment it reads has arrived, its messages leave when it ends
    (in :func:`send_order`, by ``priority``, default the per-core position), links and
    shared memory are granted in time order. ``contention=False`` frees links and memory
    (then a task starts exactly at its :func:`raptor.solver.evaluate.retime` time)."""
    graph.freeze()
    if priority is None:
        priority = [0] * graph.num_tasks
        for ts in core_tasks:
            for i, t in enumerate(ts):
                priority[t] = i
    return _Replayer(graph, target, core_of, core_tasks, priority, contention).run()
