"""The communication cost model: what the simulator charges for moving data, in integer ns.

One module for every consumer of the model — PEFT reserves with it, CP-SAT's constraints are
derived from it, and :func:`replay` evaluates a finished schedule with it (the figure
reported as the schedule's estimate). It models the simulator's default options
(`raptor.sim.SimOptions()`), term by term:

* **Messages.** A graph fragment (:class:`raptor.solver.graph.Fragment`) crosses the mesh
  once per destination core, however many tasks there read it; same-core reads are free.
  Materialization sends exactly these messages, each after its producer (and its
  shared-memory stores) in :func:`send_order`, or later where the flow control below
  holds it.
* **Links.** :mod:`raptor.noc`'s routes and cut-through links (every directed link
  carries one message at a time, for its serialization), granted in injection-time order
  as in the simulator (simultaneous ones by `raptor.noc.inject_rank`, not by the order
  either happens to run its cores in); without waiting a message takes exactly
  ``Target.transfer_ns``. Under ``routing = "xy-yx"`` the replay picks each message's
  route when it is injected (`raptor.noc.Network.yx_sooner`), and the program follows.
* **Rendezvous.** A send completes when its receive is posted; the sender then continues
  and the data crosses on its own; the receiving task waits for the data. A posted receive
  costs nothing and never blocks, but its buffer occupies the receiver's local memory from
  the post on: posts and held sends follow :class:`_Replayer`, and materialization places
  them where the replay did (:attr:`Replay.posts`, :attr:`Replay.sends`).
* **Shared memory.** The chip serves one shared-memory request at a time: the part of a
  task that stores graph outputs (``Task.shared_ns``) queues, served by the chip's
  arbitration (`raptor.noc.memory_rank`: the lowest waiting core first), as in the
  simulator. Loads of
  function inputs inside compute bodies are part of the task's own cost (no queue).
* **Endpoint copies.** Inserting a received fragment into the consumer's input buffer is a
  local copy already in the consumer's cost (`raptor.solver.costs`); a region send is a DMA
  descriptor, so the sender pays nothing.

What it leaves out: lanes that materialization merges into one scheduled batch gather their
inputs once (a little cheaper) and start when all of them have arrived (possibly a little
later); on cores whose memory is planned task by task nothing is merged. Everything else is
what the simulator does, so the replayed makespan predicts the simulated latency.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any

import numpy as np

from raptor import noc
from raptor.noc import FreeLinks, shared_network
from raptor.solver.blocking import START, blocking_makespan, meeting_posts, merge_messages, refine
from raptor.solver.flowplan import Crossings, Message, ReceivePlan, split
from raptor.solver.graph import ComputeGraph
from raptor.target import Target


def send_order(graph: ComputeGraph, core_of: Sequence[int], priority: Sequence[int],
               crossing: Crossings | None = None) -> list[list[tuple[int, int]]]:
    """Per producer task, its messages as (fragment, destination core), most urgent first:
    by the earliest ``priority`` (planned start) of a reader on the destination, then the
    destination core and the fragment. Materialization orders its sends by the same rule.
    ``crossing``: the placement's reads across the mesh, when the caller has them."""
    graph.freeze()
    c = Crossings.of(graph, core_of) if crossing is None else crossing
    f, q = c.messages()
    at = c.least(np.asarray(priority, dtype=np.int64)[c.task])
    urgent = np.lexsort((f, q, at))
    urgent = urgent[np.argsort(c.producer[f[urgent]], kind="stable")]
    keys = c.keys
    return split([keys[i] for i in urgent.tolist()],
                 np.bincount(c.producer[f], minlength=graph.num_tasks))


@dataclass
class Replay:
    """A schedule played through the communication model (see :func:`replay`)."""

    start: list[int]
    end: list[int]
    makespan_ns: int
    messages: int
    bytes_moved: int
    link_busy_ns: list[int]
    """Per directed link (`raptor.noc` numbering), the time it carried messages."""
    arrival: dict[tuple[int, int], int] = field(default_factory=dict)
    """(fragment, core) -> when the fragment's message arrived there."""
    links: int = 0
    """How many directed links the mesh has (``link_busy_ns`` also numbers the missing
    links of border cores, which stay idle)."""
    posts: dict[tuple[int, int], int] = field(default_factory=dict)
    """(fragment, core) -> the point (see :data:`START`) where its receive is posted."""
    sends: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    """(fragment, core) -> (point, rank): where its sender sends it, and the rank of the
    send among all sends in the order they were made (a core makes its sends in rank
    order)."""
    memory_peak_bytes: list[int] = field(default_factory=list)
    """Per core, the most local memory the model expects it to hold (empty without a
    :class:`raptor.solver.graph.MemoryDemand`)."""
    forced_posts: int = 0
    """Receives posted beyond the memory budget because the program could not go on
    otherwise (every core involved was waiting on another)."""
    send_wait_ns: int = 0
    """Time senders spent waiting for their receive to be posted."""
    held_sends: int = 0
    """Sends a sender postponed to a later point, keeping the data meanwhile."""
    budget: list[int] = field(default_factory=list)
    """Per core, the bytes the posting policy planned to fill."""
    tight: set[int] = field(default_factory=set)
    """Cores where not every receive fits when posted at the start: their memory is
    planned task by task."""
    needed_bytes: list[int] = field(default_factory=list)
    """Per core, the most bytes its tasks hold at once with every receive posted just
    before its first reader and every send made at once: no posting can do with less."""
    left: dict[tuple[int, int], int] = field(default_factory=dict)
    """(fragment, core) -> when its sender made the send."""
    posted_ns: int = 0
    """The makespan with receives that never block (``makespan_ns`` under Raptor's
    protocol; under pimsim-nn's, ``makespan_ns`` is that of blocking receives)."""
    merged: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    """Under pimsim-nn's protocol, (fragment, core) -> the message it travels in, when
    that is another's (`raptor.solver.blocking.merge_messages`)."""
    flow: dict[tuple[int, int], int] = field(default_factory=dict)
    """Under pimsim-nn's protocol, the flow control's receive points (``posts`` before the
    blocking model moved them): none may move earlier (`deepen`)."""
    yx: set[tuple[int, int]] = field(default_factory=set)
    """(fragment, core) of the messages that took their YX route (the target's
    ``routing = "xy-yx"``: `raptor.noc.Network.yx_sooner` when each was injected, or as
    the program ``built`` recorded them); the program records them."""

    def link_utilization(self) -> tuple[float, float]:
        """(max, mean) over the mesh's links of busy time / makespan."""
        span = max(self.makespan_ns, 1)
        busy = self.link_busy_ns
        return (max(busy, default=0) / span, sum(busy) / max(self.links, 1) / span)


MEETING_LEADS_NS = (2_000, 5_000)
"""Under pimsim-nn's protocol, how long before a message leaves its receive may be due
(`raptor.solver.blocking.meeting_posts`): each is tried, and posting just before the first
reader. On the default target, with the message order chosen, lead 0 / 2 / 5 / 20 us /
unbounded took yolo_neck 495 / 476 / 452 / 493 / 493 us and mobilenet_block 86.6 / 71.5 /
79.6 / 109 / 109 us (778 and 112 us before their first readers)."""

SKIPS = 8
"""Receives a decision point passes over (they do not fit yet) before it stops looking."""



class _Replayer:
    """The event loop: each core runs its tasks in order, a task starts when its core is
    free and its remote fragments have arrived; messages cross `raptor.noc`'s links and the
    shared memory serves one request at a time. When receives are posted and sends made is
    its flow control's (:class:`_FlowControl`)."""

    def __init__(self, graph: ComputeGraph, target: Target, core_of: Sequence[int],
                 core_tasks: Sequence[Sequence[int]], priority: Sequence[int],
                 contention: bool, budget: Sequence[int] | None = None,
                 built: Replay | None = None, xy: bool = False) -> None:
        self.g = graph
        self.net = shared_network(target)
        self.core_of = core_of
        self.progs = [list(ts) for ts in core_tasks]
        self.contention = contention
        self.priority = priority
        self.P = len(self.progs)
        self._init_events()
        self.flow = _FlowControl(self, target, budget) if built is None else \
            _Built(self, target, built)
        self.routed = set() if xy else None if built is None else built.yx
        """The messages routed YX as the program was built, or none (``xy``: every route
        XY); None: chosen here (`raptor.noc.Network.yx_sooner`)."""

    def _init_events(self) -> None:
        """The event loop's state: task times, the event heap, cores, links, counters."""
        n, P = self.g.num_tasks, self.P
        self.start, self.end = [0] * n, [0] * n
        self.crossing = Crossings.of(self.g, self.core_of)
        self.sends = send_order(self.g, self.core_of, self.priority, self.crossing)
        self.dur = self.g.durations(self.core_of)
        self.frag_bytes = [frag.bytes for frag in self.g.fragments]
        self.frag_core = self.crossing.frag_core.tolist()
        """Each fragment's bytes and its producer's core."""
        self.shared_ns = [task.shared_ns for task in self.g.tasks]
        self.arrival: dict[Message, int] = {}
        self.waiting: dict[Message, int] = {}  # (fragment, core) -> parked core
        self.pc, self.clock = [0] * P, [0] * P
        self.heap: list[tuple[int, int, int, Callable[[Any], None], object]] = []
        self.seq = itertools.count(1).__next__
        """The events' numbers, in the order they are pushed."""
        self.links = FreeLinks(self.net.num_links, self.contention)
        self.yx: set[Message] = set()
        """Messages sent over their YX route."""
        self.mem_free = self.messages = self.bytes = self.now = 0
        self.late = False
        """Whether an event ran at a time the loop had already passed: a flow-control
        decision took effect before the event that made it (see :func:`replay`)."""
        self.wait_data: list[int] = [-1] * P
        """Per core, the fragment it waits for (-1: none)."""

    def push(self, time: int, handler: Callable[[Any], None], payload: object, rank: int = 0
             ) -> None:
        """An event at ``time``: ``handler(payload)`` (`run_core`, `end_task` or `serve` of a
        core, `inject` of a message); among events at one time, lower ``rank`` first, then
        in the order they were pushed (as the simulator's)."""
        heappush(self.heap, (time, rank, self.seq(), handler, payload))

    def run(self) -> Replay:
        """Play the program (once: the flow control, which refers back to this replayer, is
        dropped at the end, so that no cycle is left for the collector, which the
        schedulers pause, to find)."""
        try:
            return self._run()
        finally:
            del self.flow

    def _run(self) -> Replay:
        for p in range(self.P):
            self.flow.decide(p, 0, START)
            self.push(0, self.run_core, p)
        heap, pop = self.heap, heappop
        while heap:
            time, _, _, handler, payload = pop(heap)
            if time < self.now:
                self.late = True
            self.now = time
            handler(payload)
        stuck = [p for p, prog in enumerate(self.progs) if self.pc[p] < len(prog)]
        if stuck:
            raise ValueError(f"per-core order contradicts the dependencies: cores {stuck} "
                             "wait forever")
        fl = self.flow
        peaks = [max(int(u.max(initial=0)), int(a.max(initial=0)))
                 for u, a in zip(fl.usage, fl.at_point, strict=True)]
        return Replay(self.start, self.end, max(self.clock, default=0), self.messages,
                      self.bytes, self.links.busy, self.arrival, self.net.target.mesh_links,
                      fl.posts, fl.send_at, peaks, fl.forced, fl.send_wait, fl.held_sends,
                      fl.cap, {q for q, ok in enumerate(fl.roomy) if not ok}, fl.needed,
                      fl.left, yx=self.yx)

    # -- where a core stands -----------------------------------------------------------
    def point(self, p: int) -> int:
        """The point core p is at (it has done the compute of the task before it)."""
        pc = self.pc[p]
        return self.progs[p][pc - 1] if pc else START

    # -- cores ---------------------------------------------------------------------------
    def run_core(self, p: int) -> None:
        """Run core ``p`` until it waits for a message, a rendezvous or the shared memory,
        or finishes. The point after a task that ends later than now is an event at its
        end: its posts and sends then see what the other cores did until then. (Running
        ahead, a core decided its later points before the others had run to them:
        ResNet-18's first lanes held sends for four points, 400 us, for receives posted
        when the first was made; 12,116 held sends and 3,460,811 ns estimated, 3,637
        and 3,409,988 with the points in time order.)"""
        prog, flow, arrival, shared_ns = self.progs[p], self.flow, self.arrival, self.shared_ns
        remote, pc, clocks = flow.remote, self.pc, self.clock
        flush = None if flow.unbounded else flow.flush  # else no send is ever left to do
        while True:
            if (flush is not None and not flush(p)) or pc[p] >= len(prog):
                return
            t = prog[pc[p]]
            ready = clocks[p]
            for f in remote[t]:
                a = arrival.get((f, p))
                if a is None:
                    self.waiting[(f, p)] = p
                    self.wait_data[p] = f
                    flow.parked_now(p)
                    return
                if a > ready:
                    ready = a
            self.wait_data[p] = -1
            self.start[t] = ready
            clocks[p] = clock = ready + self.dur[t] - shared_ns[t]
            if shared_ns[t]:
                self.push(clock, self.serve, p, noc.memory_rank(p, self.P))
                return
            if clock > self.now:  # its point comes after what other cores do before it
                self.push(clock, self.end_task, p)
                return
            self.finish(t, p)

    def end_task(self, p: int) -> None:
        """The point after core p's task comes: it finishes, and p runs on."""
        self.finish(self.progs[p][self.pc[p]], p)
        self.run_core(p)

    def finish(self, t: int, p: int) -> None:
        """Task t's compute is done: the point after it (`run_core` then sends)."""
        self.end[t] = self.clock[p]
        self.pc[p] += 1
        self.flow.after_task(p, self.sends[t])

    def serve(self, p: int) -> None:
        """Core p's stores, if the shared memory is free; else p asks again when it frees,
        so the requests waiting then are served from the lowest core (as the simulator's)."""
        if self.contention and self.mem_free > self.now:
            self.push(self.mem_free, self.serve, p, noc.memory_rank(p, self.P))
            return
        t = self.progs[p][self.pc[p]]
        task = self.g.tasks[t]
        begin = max(self.clock[p], self.now) if self.contention else self.clock[p]
        self.mem_free = self.clock[p] = begin + task.shared_ns
        self.finish(t, p)
        self.run_core(p)

    def inject(self, m: Message) -> None:
        """Message ``m`` takes the links now."""
        f, q = m
        net, p, links, nbytes, now = self.net, self.frag_core[f], self.links, \
            self.frag_bytes[f], self.now
        route, ser, transfer = net.timing(p, q, nbytes)
        routed = self.routed
        if m in routed if routed is not None else \
                net.choosing and net.yx_sooner(p, q, ser, now, links):
            route, ser, transfer = net.timing(p, q, nbytes, True)
            self.yx.add(m)
        self.arrival[m] = arrived = links.arrival(route, ser, transfer, net.hop_ns, now)
        if self.waiting and self.waiting.pop(m, None) is not None:
            self.push(arrived, self.run_core, q)


class _FlowControl(ReceivePlan):
    """The event loop, with the flow control of a core's local memory.

    Each core runs its tasks in order. At the point after a task the core posts receives
    (:meth:`decide`): its next task's (they must be), those whose senders already wait, those
    whose readers come too soon for a held message to arrive in time, then those whose
    senders plan to send before its next point — each only if it fits the budget until its
    first reader, with what every later task needs counted in advance (:meth:`static_usage`),
    so a post never takes what a later task must have. A core whose receives all fit at the
    start posts them there. Then it sends (:meth:`flush`): what it held back, then the task's
    messages (:func:`send_order`); a send whose receive is posted goes (rendezvous: at the
    post if that is later), else it is held to the next point when the sender may keep the
    data (:meth:`can_hold`), else the sender waits. A waiting core (:meth:`parked_now`) posts
    what waits for it and fits, sends what it holds that is wanted, and breaks a cycle of
    waiting cores by a hold or a forced post, so the program always completes. Without a
    :class:`raptor.solver.graph.MemoryDemand`, every receive is posted at the start and no
    send ever waits."""

    def __init__(self, r: _Replayer, target: Target, budget: Sequence[int] | None) -> None:
        """What each core has to send, holds back, has posted and waits for; what it
        receives and the memory it has for it."""
        self._start(r)
        pos, last = self._plan_receives()
        self._plan_memory(target, budget, pos, last)
        self.unbounded = self.mem is None
        """No local memory to plan: every receive is posted at the start, so no later point
        has receives to decide and no send waits or is held (the run's hot path)."""

    def _start(self, r: _Replayer) -> None:
        """The run's state: nothing sent, held, posted or waited for yet."""
        self.r = r
        P = r.P
        self.outbox: list[list[Message]] = [[] for _ in range(P)]
        """Per core, the sends still to do at its current point."""
        self.held: list[list[Message]] = [[] for _ in range(P)]
        """Per core, sends postponed to its next point."""
        self.holder: dict[Message, int] = {}
        self.kept_at: list[tuple[int, set[int]]] = [(-1, set()) for _ in range(P)]
        """Per core, (position, producers whose results its held sends keep there)."""
        self.posted: dict[Message, int] = {}
        self.posts: dict[Message, int] = {}
        self.send_at: dict[Message, tuple[int, int]] = {}
        self.left: dict[Message, int] = {}
        self.blocked_send: list[Message | None] = [None] * P
        self.sender_of: dict[Message, int] = {}  # unposted message -> its parked sender
        self.blocked_on: list[list[Message]] = [[] for _ in range(P)]
        self.forced = self.send_wait = self.held_sends = 0

    def parked(self, q: int) -> bool:
        """Whether q waits with nothing scheduled to wake it."""
        r = self.r
        if self.blocked_send[q] is not None:
            return True
        f = r.wait_data[q]
        return f >= 0 and (f, q) not in self.left  # not sent yet

    def waits_for(self, q: int) -> int:
        r = self.r
        blocked = self.blocked_send[q]
        if blocked is not None:
            return blocked[1]
        return r.core_of[r.g.fragments[r.wait_data[q]].producer]

    # -- receives --------------------------------------------------------------------------
    def fits(self, q: int, k: int, f: int) -> bool:
        """Whether posting (f, q) at position ``k`` keeps core q within its budget until
        the fragment's first reader."""
        return self.room((f, q), k) <= 0

    def post(self, q: int, keys: Iterable[Message], time: int) -> None:
        """Core q posts the receives of ``keys`` (messages to q, none posted yet) at its
        current point, at ``time``, in order."""
        r = self.r
        k, point, mem = r.pc[q], r.point(q), self.mem
        holders, senders = self.holder, self.sender_of
        keys = list(keys)
        if not self.unbounded:  # else no send waits: nothing reads when a receive was posted
            self.posted.update(dict.fromkeys(keys, time))  # a release below reads its own only
        self.posts.update(dict.fromkeys(keys, point))
        if mem is None and not holders and not senders:
            return  # nothing else to do (at the start, and on every core without memory)
        for key in keys:
            if mem is not None:
                lo = self.first[key]
                if k < lo:
                    self.held_bytes[q][:, k:lo] += mem.fragment[key[0]]
            holder = holders.get(key) if holders else None
            if holder is not None and self.blocked_send[holder] is None and \
                    self.parked(holder) and time <= max(r.clock[holder], r.now):
                self.release(holder, key)  # it waits for data anyway: it sends now
            sender = senders.pop(key, None) if senders else None
            if sender is not None:  # the rendezvous completes: the sender goes on
                self.blocked_on[q].remove(key)
                self.blocked_send[sender] = None
                self.outbox[sender].pop(0)
                self.send(sender, (key,))
                r.push(r.clock[sender], r.run_core, sender)

    def after_task(self, p: int, sends: list[Message]) -> None:
        """Core p has done a task: the receives of the point after it, then its sends
        (what it held back first)."""
        if self.unbounded:  # every receive was posted at the start: no send waits
            if sends:
                self.send(p, sends)
            return
        r = self.r
        self.decide(p, r.pc[p], r.clock[p])
        self.outbox[p] = [*self.held[p], *sends]
        self.held[p] = []

    def decide(self, q: int, k: int, time: int) -> None:
        """Core q's receives at the point before its task at position ``k``."""
        r = self.r
        prog = r.progs[q]
        posted = self.posted
        if k < len(prog):
            self.post(q, [(f, q) for f in self.remote[prog[k]] if (f, q) not in posted], time)
        for key in list(self.blocked_on[q]):  # senders already waiting first
            if self.fits(q, k, key[0]):
                self.post(q, (key,), time)
        pending = self.pending[q]
        if self.roomy[q]:
            # without a memory plan a receive posted again is the same post (`post` then
            # writes its dicts alone): no need to leave out those just posted
            self.post(q, pending if self.mem is None else
                      [key for key in pending if key not in posted], time)
            pending.clear()
            return
        # By the next point's planned time: receives whose readers come too soon after it
        # for a sender holding them to deliver in time (in reader order), then those whose
        # senders plan to send before it (in send order), each while it fits.
        nxt = r.priority[prog[k]] + r.dur[prog[k]] if k < len(prog) else 1 << 62
        self.scan(q, k, time, pending, lambda key: self.reader_plan[key] - nxt < self.lead[key])
        self.scan(q, k, time, self.early[q], lambda key: self.send_plan[key[0]] < nxt)

    def scan(self, q: int, k: int, time: int, queue: list[Message],
             due: Callable[[Message], bool]) -> None:
        """Post, from the head of ``queue`` (messages to core q in some order) while they
        are ``due``, those that fit; stop after ``SKIPS`` that do not."""
        i = skips = 0
        while i < len(queue) and skips < SKIPS:
            key = queue[i]
            if key in self.posted:
                del queue[i]
            elif not due(key):
                break
            elif self.fits(q, k, key[0]):
                self.post(q, (key,), time)
                del queue[i]
            else:
                skips += 1
                i += 1

    def post_time(self, q: int) -> int:
        """When a receive added now to parked core q's current point is posted: the
        receives of a point come before its sends, i.e. when its compute ended."""
        r = self.r
        if self.blocked_send[q] is not None:
            return r.end[r.progs[q][r.pc[q] - 1]]
        return r.clock[q]

    def parked_now(self, p: int) -> None:
        """Core p has just parked. It posts what waits for it and fits; a sender it waits
        for that is itself parked and holds its data sends it; a send it waits in is taken
        by its receiver if that one is parked and has room; a cycle of waiting cores is
        broken by forcing a post."""
        if self.unbounded:
            return
        r = self.r
        k = r.pc[p]
        for key in list(self.blocked_on[p]):
            if self.fits(p, k, key[0]):
                self.post(p, (key,), self.post_time(p))
        blocked = self.blocked_send[p]
        if blocked is None:
            self.send_held(p)
            wanted = (r.wait_data[p], p)
            holder = self.holder.get(wanted)
            if holder is not None and self.parked(holder) and self.blocked_send[holder] is None:
                self.release(holder, wanted)
                return
        else:
            q = blocked[1]
            if self.parked(q) and self.fits(q, r.pc[q], blocked[0]):
                self.post(q, (blocked,), self.post_time(q))
                return
        chain = [p]
        x = self.waits_for(p)
        while self.parked(x) and x not in chain:
            chain.append(x)
            x = self.waits_for(x)
        if x != p:
            return
        # a cycle: one of its waits is a send unless the order itself contradicts the
        # dependencies (`run` says so). A sender that can keep its message goes on;
        # otherwise the receiver with the most room takes one over its budget.
        sends = [(c, b) for c in chain if (b := self.blocked_send[c]) is not None]
        for c, key in sends:
            if self.can_hold(c, key, soon=True):
                self.sender_of.pop(key)
                self.blocked_on[key[1]].remove(key)
                self.blocked_send[c] = None
                self.outbox[c].pop(0)
                self.hold(c, key)
                r.push(r.clock[c], r.run_core, c)
                return
        if sends:
            _, key = min(sends, key=lambda s: self.room(s[1]))
            self.forced += 1
            self.post(key[1], (key,), self.post_time(key[1]))

    # -- sends -------------------------------------------------------------------------
    def send(self, p: int, keys: Sequence[Message]) -> None:
        """Core p sends ``keys`` at its point, in order, each once its receive is posted
        (the rendezvous: p waits until then)."""
        r = self.r
        clock, posted, send_at, left, holder = \
            r.clock, self.posted, self.send_at, self.left, self.holder
        point, P, frag_bytes, heap, seq, inject, rank = \
            r.point(p), r.P, r.frag_bytes, r.heap, r.seq, r.inject, noc.inject_rank
        wait = not self.unbounded  # else every receive was posted at the start: none waits
        nbytes = 0
        for key in keys:
            meet = clock[p]
            if wait and (got := posted[key]) > meet:
                self.send_wait += got - meet
                clock[p] = meet = got
            send_at[key] = (point, len(send_at))
            left[key] = meet
            if holder:
                holder.pop(key, None)
            f, q = key
            nbytes += frag_bytes[f]
            heappush(heap, (meet, rank(p, q, P), seq(), inject, key))  # `_Replayer.push`
        r.messages += len(keys)
        r.bytes += nbytes

    def release(self, p: int, key: Message) -> None:
        """Parked core p sends a message it holds at its current point (its receive is
        posted)."""
        self.held[p].remove(key)
        self.send(p, (key,))

    def send_held(self, p: int) -> None:
        """Core p, about to wait for data, sends what it holds whose receives are posted
        by now, or whose receivers wait for it."""
        r = self.r
        for key in list(self.held[p]):
            got = self.posted.get(key)
            if got is not None and (got <= r.clock[p] or r.wait_data[key[1]] == key[0]):
                self.release(p, key)

    def hold(self, p: int, key: Message) -> None:
        self.held[p].append(key)
        self.holder[key] = p
        self.held_sends += 1

    def can_hold(self, p: int, key: Message, soon: bool = False) -> bool:
        """Whether p may postpone ``key`` to its next point: it has a next task that ends
        before the reader is planned to start (unless ``soon``), and room to keep the data
        until then."""
        r = self.r
        pc, prog = r.pc[p], r.progs[p]
        if self.mem is None or pc >= len(prog):
            return False
        nxt = prog[pc]
        if not soon and self.reader_plan[key] < r.priority[nxt] + r.dur[nxt]:
            return False
        u = r.g.fragments[key[0]].producer
        at, kept = self.kept_at[p]
        if at != pc:
            at, kept = pc, set()
            self.kept_at[p] = (at, kept)
        if u in kept or self.kept_until[u] > pc:
            return True
        # kept through the next task and the point after it, where it may go
        need = self.mem.output[u]
        during = 0 if self.kept_until[u] == pc else need
        if int(self.usage[p][pc]) + during > self.cap[p] or \
                int(self.at_point[p][pc + 1]) + need > self.cap[p]:
            return False
        self.usage[p][pc] += during
        self.at_point[p][pc + 1] += need
        kept.add(u)
        return True

    def flush(self, p: int) -> bool:
        """Do core p's sends at its point; False when one waits for its receive."""
        r = self.r
        box = self.outbox[p]  # empty when unbounded (`after_task` sent at once)
        while box:
            key = box[0]
            got = self.posted.get(key)
            q = key[1]
            if got is None and self.parked(q) and self.fits(q, r.pc[q], key[0]):
                self.post(q, (key,), self.post_time(q))  # q is idle and has room: it takes it
                continue
            if got is not None and (got <= r.clock[p] or not self.can_hold(p, key)):
                box.pop(0)
                self.send(p, (key,))
                continue
            # a receive posted later than now: held (p may, said can_hold); an unposted one
            # held if p may (a receiver without room now will not post it soon)
            if got is not None or self.can_hold(p, key, soon=not self.fits(q, r.pc[q], key[0])):
                box.pop(0)
                self.hold(p, key)
                continue
            self.blocked_send[p] = key
            self.sender_of[key] = p
            self.blocked_on[q].append(key)
            self.parked_now(p)  # a post that resolves it wakes p up
            return False
        return True


class _Built(_FlowControl):
    """The flow of a program already built: its receives posted and its sends made at the
    points, and in the order, an earlier replay chose (``built``: what materialization
    placed), whatever the costs are now; a send waits for its receive. Replaying the same
    placement with new costs (a spilled program's loads and stores) must not decide the
    flow again: on mobilenet_block spilling on a 2x2 target, deciding again moved 13 posts
    and sends and put the estimate 5.8 % above the simulation.

    Only the run's times are read of it (a late replay's, `_timed_as_built`; a spilled
    program's makespan; the mesh's send times under pimsim-nn's protocol), so no memory is
    planned: its memory figures stay empty (the plan was about a quarter of a late
    replay's second run on ResNet-18)."""

    def __init__(self, r: _Replayer, target: Target, built: Replay) -> None:
        self._start(r)
        self._remote_reads()
        self.mem = None
        self.unbounded = False  # its sends wait for receives posted where it posted them
        self.cap, self.needed, self.roomy = [], [], []
        self.usage, self.at_point, self.held_bytes = [], [], []
        self.post_at: dict[tuple[int, int], list[Message]] = {}
        for key, point in built.posts.items():
            self.post_at.setdefault((key[1], point), []).append(key)
        self.send_here: dict[tuple[int, int], list[Message]] = {}
        frags = r.g.fragments
        for key in sorted(built.sends, key=lambda k: built.sends[k][1]):
            p = r.core_of[frags[key[0]].producer]
            self.send_here.setdefault((p, built.sends[key][0]), []).append(key)
        for p in range(r.P):
            self.outbox[p] = list(self.send_here.get((p, START), ()))

    def decide(self, q: int, k: int, time: int) -> None:
        self.post(q, [key for key in self.post_at.get((q, self.r.point(q)), ())
                      if key not in self.posted], time)

    def after_task(self, p: int, sends: list[Message]) -> None:
        self.decide(p, self.r.pc[p], self.r.clock[p])
        self.outbox[p] = list(self.send_here.get((p, self.r.point(p)), ()))

    def parked_now(self, p: int) -> None:
        """Nothing to decide: the program runs as built."""

    def flush(self, p: int) -> bool:
        box = self.outbox[p]
        while box:
            key = box[0]
            got = self.posted.get(key)
            if got is None:
                self.blocked_send[p] = key
                self.sender_of[key] = p
                self.blocked_on[key[1]].append(key)
                return False
            box.pop(0)
            self.send(p, (key,))
        return True


def replay(graph: ComputeGraph, target: Target, core_of: Sequence[int],
           core_tasks: Sequence[Sequence[int]], priority: Sequence[int] | None = None,
           contention: bool = True, budget: Sequence[int] | None = None,
           built: Replay | None = None, blocking: bool = True) -> Replay:
    """Play a placement and per-core order through the model, as the simulator would run
    the materialized program: each core runs its tasks in order, a task starts when its
    core is free and every fragment it reads has arrived, its messages leave when it ends
    (in :func:`send_order`, by ``priority``, default the per-core position) once their
    receives are posted, links and shared memory are granted in time order.
    ``contention=False`` frees links and memory (then, with every receive posted at the
    start, a task starts exactly at its :func:`raptor.solver.evaluate.retime` time).
    Receives and held sends follow :class:`_Replayer`, within ``budget`` bytes per core
    (default ``MEMORY_MARGIN`` of its local memory), or, for a program already built from
    the replay ``built``, where that one put them (:class:`_Built`; the message order and
    the routes too). Under ``routing = "xy-yx"`` each message's route is chosen as it is
    injected (`raptor.noc.Network.yx_sooner`), or every route is XY, whichever plays
    faster (:attr:`Replay.yx`).
    When a decision took effect at a time the event loop had passed (`_Replayer.late`), the
    times are those of the program so built, played again in time order as the simulator
    runs it (`_timed_as_built`; Raptor's protocol).
    ``blocking`` off: under pimsim-nn's protocol, only the run's task times are wanted, not
    the blocking model's makespan, order and posts (the estimate's blocking runs and
    `raptor.solver.blocking.refine`'s are skipped)."""
    graph.freeze()
    if priority is None:
        priority = [0] * graph.num_tasks
        for ts in core_tasks:
            for i, t in enumerate(ts):
                priority[t] = i

    def play(xy: bool) -> Replay:
        player = _Replayer(graph, target, core_of, core_tasks, priority, contention, budget,
                           built, xy)
        rep = player.run()
        if player.late and built is None and target.protocol == "raptor":
            rep = _timed_as_built(rep, _Replayer(graph, target, core_of, core_tasks, priority,
                                                 contention, budget, rep).run())
        return rep

    rep = play(False)
    if rep.yx and built is None:
        # each route is chosen greedily, when its message leaves: a YX one can delay later
        # messages it did not foresee (mobilenet_block at one unit: 67,418 ns with every
        # route XY, 68,188 chosen), so the program with every route XY is played too and
        # the faster kept (ties: XY)
        xy = play(True)
        if xy.makespan_ns <= rep.makespan_ns:
            rep = xy
    rep.posted_ns = rep.makespan_ns
    if built is not None:
        rep.sends, rep.merged = dict(built.sends), dict(built.merged)
        if target.protocol == "pimsim-nn" and rep.sends:
            got = blocking_makespan(graph, target, core_of, core_tasks, rep.sends,
                                    {k: rank for k, (_, rank) in rep.sends.items()},
                                    built.posts, built.merged)
            if got is not None:
                rep.makespan_ns = got
    elif target.protocol == "pimsim-nn" and rep.sends and blocking:
        def mesh(free: bool) -> dict[Message, int]:
            """When the messages of ``rep``'s program leave on Raptor's mesh (links free
            or not; empty if it cannot run there)."""
            try:
                return _Replayer(graph, dataclasses.replace(target, protocol="raptor"),
                                 core_of, core_tasks, priority, not free, budget, rep
                                 ).run().left
            except ValueError:
                return {}

        flow = rep.flow = dict(rep.posts)
        blocking_estimate(graph, target, core_of, core_tasks, rep, mesh)
        refined = refine(graph, target, core_of, core_tasks, rep.sends,
                         {k: rank for k, (_, rank) in rep.sends.items()}, rep.posts, flow)
        if refined is not None and refined[0] < rep.makespan_ns:
            rep.makespan_ns, ranked, rep.posts = refined
            rep.sends = {k: (point, ranked[k]) for k, (point, _) in rep.sends.items()}
        merge(graph, target, core_of, core_tasks, rep)
    return rep


def critical_path(graph: ComputeGraph, core_of: Sequence[int],
                  core_tasks: Sequence[Sequence[int]], rep: Replay) -> list[tuple[int, int]]:
    """The path that fixed ``rep``'s makespan, read back from the task that ends last: at
    each task whichever came later, the message that arrived last (the step's fragment) or
    its core's previous task (fragment -1), latest step first."""
    before = {b: a for ts in core_tasks for a, b in itertools.pairwise(ts)}
    steps: list[tuple[int, int]] = []
    t: int | None = max(range(graph.num_tasks), key=lambda x: rep.end[x])
    while t is not None:
        q = core_of[t]
        free = rep.end[before[t]] if t in before else 0
        came, frag = max(((rep.arrival[(f, q)], f) for f in graph.reads[t]
                          if core_of[graph.fragments[f].producer] != q), default=(-1, -1))
        if came > free:
            steps.append((t, frag))
            t = graph.fragments[frag].producer
        else:
            steps.append((t, -1))
            t = before.get(t)
    return steps


def _timed_as_built(rep: Replay, built: Replay) -> Replay:
    """``rep``'s flow (its posts, sends and memory plan) with the times of the program built
    from it (``built``, its replay as `_Built`). The flow control decides some posts at an
    event later than the point they go to (a parked core takes a receive it has room for
    now), so their sends leave at a time the event loop has passed, after messages injected
    later took the links: played in time order, as the simulator runs the program built,
    the times change (ResNet-18 with partial sums in 4 channel chunks: 3,560,585 ns in the
    order decided, 3,561,084 simulated)."""
    return dataclasses.replace(
        rep, start=built.start, end=built.end, makespan_ns=built.makespan_ns,
        messages=built.messages, bytes_moved=built.bytes_moved,
        link_busy_ns=built.link_busy_ns, arrival=built.arrival, left=built.left,
        send_wait_ns=built.send_wait_ns)


DEEPEN_ROUNDS = 20
"""Rounds of `deepen`, two blocking runs each (the two orders, lead 0). ResNet-18's kept
replay (default target, estimate under pimsim-nn): 11.75 ms after `refine`, then 11.37
after 6 rounds, 11.05 after 10, 10.69 after 20 (pimsim-nn 10,989,811 -> 10,692,970 ns).
Fewer rounds of `refine` on every replay to pay for it rank the candidates otherwise:
with 3, torch_cnn_torchscript took 42,902 ns on pimsim-nn instead of 40,199, yolo_neck
380,014 instead of 366,126."""


def deepen(graph: ComputeGraph, target: Target, core_of: Sequence[int],
           core_tasks: Sequence[Sequence[int]], rep: Replay) -> Replay:
    """Under pimsim-nn's protocol, the replay a program is built from refined further: every
    replay's `refine` ranks the schedules, the one built gets `DEEPEN_ROUNDS` more rounds,
    also trying the order in which messages meet their receives (`refine`'s ``meet``).
    A replay that merged messages (`merge`) is refined with them apart (each merged
    message's receive from the flow control's post), and kept merged unless that is
    faster: ResNet-18 with its last convolution's one-core tile set on two cores, 7,130,574
    ns merged, 6,899,656 refined apart. ``rep`` if nothing is faster."""
    if target.protocol != "pimsim-nn" or not rep.flow:
        return rep
    order = {k: rank for k, (_, rank) in rep.sends.items()}
    carriers = set(rep.merged.values())
    posts = {k: rep.flow[k] if k in carriers else at for k, at in rep.posts.items()}
    got = refine(graph, target, core_of, core_tasks, rep.sends, order, posts, rep.flow,
                 DEEPEN_ROUNDS, meet=True, leads=(0,))
    if got is None or got[0] >= rep.makespan_ns:
        return rep
    return dataclasses.replace(rep, makespan_ns=got[0], posts=got[2], merged={}, sends={
        k: (point, got[1][k]) for k, (point, _) in rep.sends.items()})


def _input_run(graph: ComputeGraph, tasks: Sequence[int]) -> int:
    """How many of a core's ``tasks`` lead it reading no fragment (their inputs come from
    global memory: a stem's lanes)."""
    k = 0
    while k < len(tasks) and not graph.reads[tasks[k]]:
        k += 1
    return k


def inputs_first(graph: ComputeGraph, target: Target, core_of: Sequence[int],
                 core_tasks: Sequence[Sequence[int]], rep: Replay) -> Replay:
    """Under pimsim-nn's protocol, ``rep`` with each core's leading run of tasks that read
    no fragment (their inputs come from global memory: a stem's lanes) computed before any
    of its messages: the sends and receive posts at the run's points go to its end (posts
    only move later, as `Replay.flow` allows). For a stream: a core starts an inference
    once it ended the last, and a send blocks until its receiver is there, so a lane's
    send to a core still ending the last inference kept the sender from its next lanes
    (ResNet-18: lanes started from 5.6 ms, sends blocked up to 1.4 ms, every core's stem
    ended at 7.7 ms; pimsim-nn's period 6.84 ms, then 6.71). A latency program gains a
    little too (ResNet-18 on pimsim-nn 6,897,855 ns, then 6,870,355: its lanes wait less
    for receivers still computing theirs). ``rep`` if no core has such a run of two tasks
    or more, or if the program so built deadlocks or is slower under the blocking model."""
    if target.protocol != "pimsim-nn":
        return rep
    end: dict[int, int] = {}  # a core's run: its points, then the point at its end
    inside: dict[int, set[int]] = {}
    for c, tasks in enumerate(core_tasks):
        k = _input_run(graph, tasks)
        if k >= 2:
            end[c], inside[c] = tasks[k - 1], {START, *tasks[:k - 1]}
    if not end:
        return rep

    def later(point: int, core: int) -> int:
        return end[core] if point in inside.get(core, ()) else point

    sends = {k: (later(point, core_of[graph.fragments[k[0]].producer]), rank)
             for k, (point, rank) in rep.sends.items()}
    posts = {k: later(point, k[1]) for k, point in rep.posts.items()}
    order = {k: rank for k, (_, rank) in sends.items()}
    got = blocking_makespan(graph, target, core_of, core_tasks, sends, order, posts,
                            rep.merged)
    if got is None or got > rep.makespan_ns:
        return rep
    return dataclasses.replace(rep, makespan_ns=got, sends=sends, posts=posts)



def lanes_moved(graph: ComputeGraph, target: Target, core_of: Sequence[int],
                core_tasks: Sequence[Sequence[int]], rep: Replay
                ) -> tuple[list[int], list[list[int]], Replay] | None:
    """Under pimsim-nn's protocol, for a stream: each core whose last task ends within the
    shortest leading input lane (a task that reads no fragment: a stem's lane) of ``rep``'s
    last end gives its last such lane (one it does not read itself) to a core that ends
    earlier, which computes it first (one of the lane's receivers when it has gained none
    yet, so that message becomes a local read, else the lowest-numbered core of those that
    gained least), the lane's sends ranked before all others. Why: a stream's core starts
    an inference once it ended the last, so the late cores computed their lanes after it
    while the next inference's layers waited for them (ResNet-18: 26 late cores, 7 lanes
    each; one lane moved, pimsim-nn's period 6,711,493 ns, then 6,655,303, docs/
    benchmarks.md). The placement and ``rep`` with it (makespan under the blocking model),
    or None when no lane moves or the program deadlocks. A latency program is slower
    so (6.92 to 7.00 ms on ResNet-18's estimate): the judge keeps it by its period."""
    if target.protocol != "pimsim-nn":
        return None
    runs = [list(tasks[:_input_run(graph, tasks)]) for tasks in core_tasks]
    ends = [rep.end[ts[-1]] if ts else 0 for ts in core_tasks]
    last = max(ends, default=0)
    lane = min((graph.tasks[t].cost_ns for run in runs for t in run), default=0)
    late = [c for c, run in enumerate(runs) if run and last - ends[c] < lane]
    early = [c for c in range(len(core_tasks)) if c not in late and runs[c]]
    if not late or not early:
        return None
    made: dict[int, list[int]] = {}
    for fi, f in enumerate(graph.fragments):
        made.setdefault(f.producer, []).append(fi)
    to: dict[int, set[int]] = {}
    for fr, dest in rep.sends:
        to.setdefault(fr, set()).add(dest)
    cores, order = list(core_of), [list(ts) for ts in core_tasks]
    sends, posts, flow = dict(rep.sends), dict(rep.posts), dict(rep.flow)
    gained = dict.fromkeys(early, 0)
    for c in late:
        own = [t for t in reversed(runs[c]) if t in made
               and not any(f in graph.reads[x] for x in order[c] for f in made[t])]
        if not own:
            continue
        t, frs = own[0], set(made[own[0]])
        fewest = min(gained.values())
        near = [e for e in early if gained[e] == fewest
                and any(e in to.get(f, ()) for f in frs)]
        e = near[0] if near else min(early, key=lambda d: (gained[d], d))
        gained[e] += 1
        i = order[c].index(t)
        before = order[c][i - 1] if i else START
        del order[c][i]
        for key, point in posts.items():
            if point == t and key[1] == c:
                posts[key] = before
        for key, point in flow.items():
            if point == t and key[1] == c:
                flow[key] = before
        for key, (point, rank) in sends.items():
            if point == t and key[0] not in frs:
                sends[key] = (before, rank)
        order[e].insert(0, t)
        cores[t] = e
        for key in [key for key in sends if key[0] in frs]:
            if key[1] == e:  # now read where it is made
                del sends[key]
                posts.pop(key, None)
                flow.pop(key, None)
            else:
                sends[key] = (sends[key][0], -1)
        ranked = sorted(sends, key=lambda key: sends[key][1])
        sends = {key: (sends[key][0], r) for r, key in enumerate(ranked)}
    if not any(gained.values()):
        return None
    ranks = {key: r for key, (_, r) in sends.items()}
    got = blocking_makespan(graph, target, cores, order, sends, ranks, posts, {})
    if got is None:
        return None
    return cores, order, dataclasses.replace(rep, makespan_ns=got, sends=sends, posts=posts,
                                             flow=flow, merged={})

def merge(graph: ComputeGraph, target: Target, core_of: Sequence[int],
          core_tasks: Sequence[Sequence[int]], rep: Replay) -> None:
    """Under pimsim-nn's protocol, ``rep``'s messages from one core to one core at one
    point travel as one (`raptor.solver.blocking.merge_messages`) when that is faster
    under the blocking model: each message saves a handshake and a rendezvous, and pays
    for packing its parts."""
    merged, posts = merge_messages(graph, core_of, core_tasks, rep.sends, rep.posts)
    if not merged:
        return
    order = {k: rank for k, (_, rank) in rep.sends.items()}
    got = blocking_makespan(graph, target, core_of, core_tasks, rep.sends, order, posts,
                            merged)
    if got is not None and got < rep.makespan_ns:
        rep.makespan_ns, rep.posts, rep.merged = got, posts, merged


def blocking_estimate(graph: ComputeGraph, target: Target, core_of: Sequence[int],
                      core_tasks: Sequence[Sequence[int]], rep: Replay,
                      mesh: Callable[[bool], Mapping[Message, int]]) -> None:
    """Under pimsim-nn's protocol: ``rep``'s makespan becomes that of its program in
    pimsim-nn's blocking order (`raptor.solver.blocking`), in the faster of two message
    orders (`noc.pimsim_message_order`): when the messages left in its run, and when they
    leave (``mesh``) as the same program runs on Raptor's mesh, whose faster messages let
    the producers' order show (yolo_neck's export on Raptor's model of pimsim-nn: 867,736
    ns without it, 782,134 with it). The replay's own send order, never the faster on the
    examples or ResNet-18 (361,151 against 117,080 ns on mobilenet_block), is played only
    if both deadlock. A core's sends keep their order in each. Then the receive posts
    (`blocking.meeting_posts`) and a last order, from the program so posted on Raptor's
    free mesh. The ranks of ``rep.sends`` (materialization's channel numbers, the
    exporter's channel order) and ``rep.posts`` become the fastest."""
    keys = list(rep.sends)
    orders = []
    for when in (rep.left, mesh(False)):
        if len(when) < len(keys):
            continue
        made = noc.pimsim_message_order([(when[k], core_of[graph.fragments[k[0]].producer],
                                          rep.sends[k][1]) for k in keys])
        orders.append({keys[i]: r for r, i in enumerate(made)})
    best = [blocking_makespan(graph, target, core_of, core_tasks, rep.sends, order)
            for order in orders]
    ok = [(b, i) for i, b in enumerate(best) if b is not None]
    if not ok:
        orders.append({k: rank for k, (_, rank) in rep.sends.items()})
        got = blocking_makespan(graph, target, core_of, core_tasks, rep.sends, orders[-1])
        if got is None:
            return
        ok = [(got, len(orders) - 1)]
    rep.makespan_ns, i = min(ok)
    rep.sends = {k: (point, orders[i][k]) for k, (point, _) in rep.sends.items()}
    # then where the receives are posted: just before their first readers (what the
    # orders were judged with), or where their senders will be (`meeting_posts`)
    choices: list[tuple[int, int, int | None, dict[Message, int]]] = []
    flow = rep.posts
    leads = (None, *MEETING_LEADS_NS)
    for lead, posts in zip(leads, meeting_posts(graph, core_of, core_tasks, rep.start, flow,
                                                rep.left, leads, rep.sends, orders[i]),
                           strict=True):
        got = rep.makespan_ns if lead is None else blocking_makespan(
            graph, target, core_of, core_tasks, rep.sends, orders[i], posts)
        if got is not None:
            choices.append((got, len(choices), lead, posts))
    if not choices:
        return
    rep.makespan_ns, _, lead, rep.posts = min(choices)
    # the program with these posts on Raptor's free mesh: its send order, a last candidate
    free = mesh(True)
    if len(free) < len(keys):
        return
    made = noc.pimsim_message_order([(free[k], core_of[graph.fragments[k[0]].producer],
                                      rep.sends[k][1]) for k in keys])
    order = {keys[i]: r for r, i in enumerate(made)}
    posts, = meeting_posts(graph, core_of, core_tasks, rep.start, flow, rep.left, (lead,),
                           rep.sends, order)
    got = blocking_makespan(graph, target, core_of, core_tasks, rep.sends, order, posts)
    if got is not None and got < rep.makespan_ns:
        rep.makespan_ns, rep.posts = got, posts
        rep.sends = {k: (point, order[k]) for k, (point, _) in rep.sends.items()}
