"""The stream estimate (docs/pipeline.md §8): what the simulator should show for a
materialized pipeline program. Each core runs its per-inference program in a loop, so the
steady period is the longest cycle of that program per inference, between the busiest core
and the stage's one-inference completion (`wave_period_ns`). :func:`stream_estimate` plays
the program's steps task by task, inference after inference, as `SimOptions.ideal()` runs
them, then again as the default options do: every shared-memory access (output and
boundary stores, boundary loads, READY/FREE) queued at the serialized shared memory, each
send waiting for its receive to be posted (a core posts an iteration's receives when it
starts it, or where the flow control put them), each message waiting for the links of its
route (`raptor.noc`; YX where the flow chose it, `Replay.yx`), injections at one time
granted in `raptor.noc.inject_rank` order while their senders go on, as the simulator's;
`memory_ns` is the service one inference asks of it. A run of lanes materialized as one
batch (`StreamInfo.merged`) runs as the program does: once every lane's inputs are there,
its gathers (the union of the lanes' inputs, once; loads of inputs at the shared memory)
and the batch, then each lane's stores.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import statistics
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from raptor.ir.core import Operation
from raptor.ir.ops import LoadOp, ScheduledComputeBatchOp
from raptor.noc import FreeLinks, Network, inject_rank, memory_rank
from raptor.passes.stream import LoadGroup, StreamInfo
from raptor.solver.comm import START, Replay
from raptor.solver.costs import block_cost_ns, op_cost_ns, shared_read_ns, shared_write_ns
from raptor.solver.graph import ComputeGraph
from raptor.target import Target

COUNTER_BYTES = 4
"""One i32 counter word."""


class StreamDeadlock(ValueError):
    """The stream program's play met a wait that never ends (a send waiting on a receive
    its core posts only after the send's own core waits on it)."""


@dataclass
class StreamEstimate:
    ideal_period_ns: int
    """Period under the simulator's ideal options over `ends` (`steady_period`; a stream
    too short to tell: its mean interval)."""
    memory_ns: int
    """Serialized shared-memory service per inference."""
    period_ns: int
    """The steady period with the shared memory serving one access at a time (at least the
    memory service): the estimate beside the default simulation."""
    latency_ns: int
    """Median time one inference spends in the pipeline (ideal)."""
    ends: list[int] = field(default_factory=list)
    """When each inference's iteration ended on its last core (ideal)."""
    starts: list[int] = field(default_factory=list)
    posted: dict[tuple[int, int], int] = field(default_factory=dict)
    """Per message (fragment, receiving core), when its receive was posted in the contended
    play's last inference (`rank_by_posts` orders sends by it)."""
    inferences: int = 0
    """The stream length `period_ns` was measured over (`settled`): the simulated period
    needs as many."""

    @property
    def floor_ns(self) -> int:
        """max(ideal period, memory service): what contention can only lengthen (the judge
        skips a candidate whose floor is no shorter than a simulated period)."""
        return max(self.ideal_period_ns, self.memory_ns)


def steady_period(starts: Sequence[int], ends: Sequence[int], fill: int,
                  busiest_ns: int = 0) -> int | None:
    """A stream's long-run period: the mean interval between consecutive completions among
    those any longer stream shares, from the later of their middle and inference `fill` on,
    over the whole repeats of a pattern they end in (repeated twice, over at least half
    of them), rounded up, and at least `busiest_ns`, its busiest core's work per inference;
    None when fewer than two (a stream too short to tell). The simulator's
    `SimReport.period_ns` calls this.
    The busiest core: no stream completes inferences faster than one of its cores works
    one, but a core upstream of slack can fall behind for longer than a stream lasts while
    the completions, set by the cores after it, come faster: torch_cnn's skewed body
    completes every 16,020 ns over 64 inferences while its busiest core works 16,028 per
    inference, the MLP's spread at four MVM units every 2,354 ns over 8 (2,366 per
    inference on its core 0, which the completions show after 11).
    Shared: a completion no later than the last inference's start (`starts`, when its first
    core began it) happens before any core runs out of inferences, so a longer stream has it
    at the same time; the drain after it (the last inferences finishing with less
    contention) is left out. It put the ResNet block's stream at four MVM units at 20,824 ns
    over 8 inferences by the second half's mean, under its period lower bound of 25,600
    (25,003 over 64). From their middle: while the stream fills, cores work ahead and
    completions come early or late. Whole repeats: a steady state can repeat a pattern of
    intervals (the MLP's layered stream: 1,953, 1,953, 1,825, 1,953, 1,953, 2,081 ns),
    whose mean over part of a repeat is off (1,935 ns over 8 inferences, under its bound of
    1,953). The mean, not the median: a stream whose inferences end in bursts delivers one
    per mean interval (YOLO's neck: median 130,558 ns, one inference per 305,689 ns)."""
    if not ends:
        return None
    last = bisect.bisect_right(ends, starts[-1]) - 1
    if last < 1:
        return None
    first = min(max(fill - 1, last // 2), last - 1)
    gaps = [b - a for a, b in zip(ends[first:last], ends[first + 1:last + 1], strict=True)]
    span = len(gaps)
    for p in range(1, len(gaps) // 2 + 1):
        run = p  # the intervals at the window's end that repeat p apart
        while run < len(gaps) and gaps[-run - 1] == gaps[-run - 1 + p]:
            run += 1
        if run >= max(2 * p, (len(gaps) + 1) // 2):
            span = run // p * p
            break
    return max(-(-(ends[last] - ends[last - span]) // span), busiest_ns)


def _per_core_steps(n_tasks: int, core_of: Sequence[int], start: Sequence[int],
                    groups: Sequence[LoadGroup]) -> dict[int, list[int]]:
    """Each core's steps of one iteration in program order: tasks 0..n-1 by planned start,
    then load groups n..n+G-1 at their keys."""
    keys: list[tuple[tuple[int, int, int], int]] = [((start[t], 1, t), t) for t in range(n_tasks)]
    keys += [(g.key, n_tasks + i) for i, g in enumerate(groups)]
    core_step = [core_of[t] for t in range(n_tasks)] + [g.consumer for g in groups]
    per_core: dict[int, list[int]] = {}
    for _, step in sorted(keys, key=lambda k: (core_step[k[1]], k[0])):
        per_core.setdefault(core_step[step], []).append(step)
    return per_core


@dataclass(frozen=True, slots=True)
class _Message:
    """A stage-internal message of one iteration: sent after step `after` of its sender's
    core (in `rank` order among that step's sends), its receive posted at step `post` of
    the receiver's core (START: the iteration's start)."""

    key: tuple[int, int]
    """(fragment, receiving core)."""
    after: int
    rank: int
    post: int
    links: tuple[int, ...]
    serial_ns: int
    transfer_ns: int
    grant: int
    """Its rank among injections at one time (`raptor.noc.inject_rank`)."""


def _messages(graph: ComputeGraph, net: Network, core_of: Sequence[int],
              start: Sequence[int], stage_of: Sequence[int], flow: Replay | None
              ) -> tuple[list[list[_Message]], dict[int, list[_Message]]]:
    """The stage-internal messages each task waits for, and the messages sent after each
    step in send order. Where `flow` holds a message's send or posts its receive later,
    the program does too; else it is sent right after its producer (earliest reader
    first) and its receive posted at the iteration's start."""
    waits: list[list[_Message]] = [[] for _ in range(graph.num_tasks)]
    made: dict[tuple[int, int], _Message] = {}
    for t, frags in enumerate(graph.reads):
        q = core_of[t]
        for f in frags:
            frag = graph.fragments[f]
            u = frag.producer
            if core_of[u] == q or stage_of[u] != stage_of[t]:
                continue
            key = (f, q)
            msg = made.get(key)
            if msg is None:
                sent = flow.sends.get(key) if flow is not None else None
                after, rank = sent if sent is not None else (u, start[t])
                post = flow.posts.get(key, START) if flow is not None else START
                links, ser, transfer = net.timing(core_of[u], q, frag.bytes,
                                                  flow is not None and key in flow.yx)
                msg = made[key] = _Message(key, after, rank, post, links, ser, transfer,
                                           inject_rank(core_of[u], q, net.target.num_cores))
            waits[t].append(msg)
    sends: dict[int, list[_Message]] = {}
    for msg in sorted(made.values(), key=lambda m: (m.rank, m.key)):
        sends.setdefault(msg.after, []).append(msg)
    return waits, sends


def stream_estimate(graph: ComputeGraph, target: Target, core_of: Sequence[int],
                    start: Sequence[int], stage_of: Sequence[int], info: StreamInfo,
                    inferences: int, ring: int, stages: int, flow: Replay | None = None,
                    ideal: bool = True, lag: Sequence[int] = (), settle: bool = True
                    ) -> StreamEstimate:
    """Play the stream program of a pipeline placement (see the module docstring): once as
    the ideal options run it, once as the default options do (`period_ns`): the shared
    memory serving one access at a time, rendezvous sends, links carrying one message at a
    time. `start` are the planned starts that ordered each core's events, `info` the
    boundary plan materialization returned, `flow` the communication model whose receive
    posts and sends the program follows (`raptor.solver.comm.Replay`; default: receives
    posted at the iteration's start, each send right after its producer). `ideal` off: the
    ideal play is skipped and its fields hold the contended play's (half the cost, for a
    caller that ranks by `period_ns` and `posted` alone: `search_cuts`). `lag`: a skewed
    body's lag per task (`start` then the times that ordered it, `Skew.times`): iteration k runs
    each task on inference k - lag, a message's receive posted at the start of its
    producer's iteration. The period is measured over the stream length `settled` finds;
    `settle` off: over twice `inferences` alone (a search's many estimates)."""
    graph.freeze()
    n_tasks = graph.num_tasks
    groups = info.groups
    net = Network(target, "raptor")
    per_core = _per_core_steps(n_tasks, core_of, start, groups)
    waits, sends = _messages(graph, net, core_of, start, stage_of, flow)
    for run in info.merged:  # one batch: its first lane waits for every lane's inputs
        waits[run.lanes[0]] = list(dict.fromkeys(m for t in run.lanes for m in waits[t]))
    play = _Play(graph, target, net, core_of, info, per_core, waits, sends, ring,
                 list(lag) or [0] * n_tasks)
    starts, ends, busiest = play.run(inferences, False) if ideal else ([], [], 0)
    length, period, (cstarts, contended, busiest) = settled(
        lambda n: play.run(n, True), inferences, stages, LONGEST if settle else 2)
    if not ideal:
        starts, ends = cstarts, contended
    posted = {m.key: play.known[play.post_key(m, len(contended) - 1)] for m in play.messages}
    memory = sum(t.shared_ns for t in graph.tasks) + sum(map(sum, play.store_ns.values())) + \
        sum(ns for parts in play.parts.values() for shared, ns in parts if shared) + \
        sum(play.group_ns) + sum(len(ks) for ks in info.free_waits.values()) * play.wait_ns + \
        sum(len(ks) for ks in info.ready_signals.values()) * play.signal_ns
    # a stream too short to tell: its mean interval, drain included (under its long-run
    # period: `floor_ns` stays a floor)
    ideal_ns = steady_period(starts, ends, stages, busiest) or \
        (-(-(ends[-1] - ends[0]) // (len(ends) - 1)) if len(ends) > 1 else ends[-1])
    latency = int(statistics.median([e - s for s, e in zip(starts, ends, strict=True)]))
    return StreamEstimate(ideal_ns, memory, max(period, memory), latency, ends, starts, posted,
                          length)


SETTLED = 0.002
"""A stream of n inferences shows its long-run period once n and 2n give periods
(`steady_period`) within this fraction of each other."""
LONGEST = 4
"""`settled` doubles a stream at most to this many times its requested length."""


Played = tuple[list[int], list[int], int]
"""A play's per-inference starts and ends and its busiest core's work per inference."""


def settled(play: Callable[[int], Played], inferences: int, stages: int,
            longest: int = LONGEST) -> tuple[int, int, Played]:
    """(n, its period, the 2n stream's play): the shortest stream length n, from
    `inferences` doubling, whose period agrees with twice as long a stream's within
    `SETTLED` (the longest, `longest` times `inferences`, when none does; when even that is
    too short to tell, its mean interval, drain included); `play(n)` runs n
    inferences. One play of 2n gives both: n inferences' shared completions are the 2n
    stream's first ones (`steady_period`). Why: a stream's fill can outlast a short stream
    (the ResNet block's at four MVM units: 28,383 ns over 16 inferences, 25,664 over 32,
    25,600 long-run), and a fixed longer stream would cost every stream that needs none
    (ResNet-18's completes at exact intervals). A single inference's period is its end."""
    if inferences < 2:
        got = play(inferences)
        return inferences, got[1][-1], got
    n = inferences
    while True:
        got = starts, ends, busiest = play(2 * n)
        short = steady_period(starts[:n], ends[:n], stages, busiest)
        long = steady_period(starts, ends, stages, busiest)
        if short is not None and long is not None and abs(long - short) <= SETTLED * long:
            return n, short, got
        if 2 * n >= longest * inferences:  # none too short to tell: its mean interval
            return 2 * n, long or -(-(ends[-1] - ends[0]) // (len(ends) - 1)), got
        n *= 2


def _priced(op: Operation, target: Target) -> tuple[bool, int]:
    """(whether it is a shared-memory access, its ns) of a core-level op of a merged run,
    as the simulator charges it: a batch its lanes' bodies, a load at the shared memory."""
    if isinstance(op, ScheduledComputeBatchOp):
        return False, op.lanes * block_cost_ns(op.body, target)
    return isinstance(op, LoadOp), op_cost_ns(op, target)


_RESUME, _WAIT, _MEM, _INJECT = range(4)
"""What a core asks `_Play.run`'s loop: go on at a time, wait for a key, a shared-memory
access, a message injection."""
_POSTED, _DONE, _READY, _FREE, _ARRIVAL = range(5)
"""Keys a core waits for: (core, step, inference) a receive posted after a step (START: at
the iteration's start), (step, inference) done, (counter pair, inference) READY / FREE
signalled, ((fragment, core), inference) a message arrived (its key as it is: building
and hashing a flat copy of it per message cost twice as much)."""
_Key = tuple[Any, ...]


class _Play:
    """Plays of a stream program, inference after inference (`stream_estimate`)."""

    def __init__(self, graph: ComputeGraph, target: Target, net: Network,
                 core_of: Sequence[int], info: StreamInfo, per_core: dict[int, list[int]],
                 waits: list[list[_Message]], sends: dict[int, list[_Message]],
                 ring: int, lag: list[int]) -> None:
        self.net, self.info, self.per_core, self.waits = net, info, per_core, waits
        self.sends, self.ring, self.lag = sends, ring, lag
        self.posts = {m.post for ms in sends.values() for m in ms}
        """Steps after which a receive is posted."""
        self.senders = {m.after for ms in sends.values() for m in ms}
        self.messages = [m for ms in sends.values() for m in ms]
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.known: dict[_Key, int] = {}
        """The last `run`'s: when each key became known."""
        self.wake: Callable[[_Key, int], None] = lambda key, at: None
        """`run`'s: a key becomes known at a time; the cores waiting for it go on."""
        self.dur = graph.durations(core_of)
        self.shared = [t.shared_ns for t in graph.tasks]
        self.wait_ns = shared_read_ns(target, COUNTER_BYTES)
        self.signal_ns = shared_write_ns(target, COUNTER_BYTES)
        self.store_ns = {u: [shared_write_ns(target, nb) for _, nb in st]
                         for u, st in info.stores.items()}
        self.group_ns = [self.wait_ns + sum(shared_read_ns(target, nb) for *_, nb in g.loads)
                         + self.signal_ns for g in info.groups]
        self.group_parts = [[self.wait_ns, *(shared_read_ns(target, nb) for *_, nb in g.loads),
                             self.signal_ns] for g in info.groups]
        self.parts: dict[int, list[tuple[bool, int]]] = {}
        """Steps whose compute is not their task's own: a merged run's first lane computes
        the run (its ops as (at the shared memory?, ns)), its other lanes nothing."""
        for run in info.merged:
            self.parts[run.lanes[0]] = [_priced(op, target) for op in run.compute]
            self.parts.update({t: [] for t in run.lanes[1:]})

    def post_key(self, m: _Message, n: int) -> _Key:
        """The key of message m's receive posted for inference n: a post at the iteration's
        start is its iteration's (the producer's inference plus its lag), one after a step
        that step's inference's."""
        return (_POSTED, m.key[1], m.post, n + self.lag[m.after] if m.post == START else n)

    @cached_property
    def busiest(self) -> int:
        """The busiest core's work per inference (`steady_period`'s floor): what `_core`
        charges its steps, the waits left out (every inference asks the same of a core)."""
        n_tasks, info = len(self.waits), self.info

        def work(s: int) -> int:
            if s >= n_tasks:
                return sum(self.group_parts[s - n_tasks])
            parts = self.parts.get(s)
            return (self.dur[s] if parts is None else sum(ns for _, ns in parts)
                    + self.shared[s]) + sum(self.store_ns.get(s, ())) + \
                len(info.free_waits.get(s, ())) * self.wait_ns + \
                len(info.ready_signals.get(s, ())) * self.signal_ns

        return max((sum(map(work, steps)) for steps in self.per_core.values()), default=0)

    def run(self, inferences: int, contended: bool) -> Played:
        """Per inference, when its first core started it and its last core finished it,
        and the busiest core's work per inference (`busiest`).
        Each core runs its steps inference after inference; a core waits for what it reads
        (a message's arrival, READY, FREE) once it is known. `contended`: every shared-
        memory access and every message injection is a request served in time order, as
        the simulator's event loop serves them — the shared memory one access at a time,
        the links as `raptor.noc.FreeLinks` grants them — and a send first waits for its
        receive to be posted; else nothing waits (the ideal options)."""
        heap: list[tuple[int, int, int, int]] = []
        known: dict[_Key, int] = {}
        self.known = known
        parked: dict[_Key, list[int]] = {}
        cores = sorted(self.per_core)
        progs = {c: self._core(c, inferences, contended) for c in cores}
        pending: dict[int, tuple[Any, ...]] = {}
        injections: dict[int, tuple[_Message, int]] = {}
        """An injection event's (message, inference), by its sequence number."""
        starts = [-1] * inferences
        ends = [0] * inferences
        self.starts, self.ends = starts, ends
        links = FreeLinks(self.net.num_links)
        memory_free = 0
        cores_n = self.net.target.num_cores
        seq = itertools.count()

        def advance(c: int, got: int) -> None:
            """Send core c `got` (its clock, or the time a key it waited for became known)
            and run it until a request the loop must order (or its end). What needs no
            order is answered here: a key already known, a shared-memory access that
            waits for nothing (no contention, or no time), and an injection, which does
            not stop its core: like the simulator's sender it goes on, and the message
            takes the links at its own event, ranked among the injections of its time by
            `raptor.noc.inject_rank` after every other event of that time."""
            prog = progs[c]
            while True:
                try:
                    req = prog.send(got)
                except StopIteration:
                    return
                kind = req[0]
                if kind == _WAIT:
                    at = known.get(req[2])
                    if at is None:  # parked until it is known
                        pending[c] = req
                        parked.setdefault(req[2], []).append(c)
                        return
                    got = at
                elif kind == _INJECT:
                    k = next(seq)
                    injections[k] = (req[2], req[3])
                    heapq.heappush(heap, (req[1], req[2].grant, k, -1))
                    got = req[1]
                elif contended and req[2] > 0:  # a shared-memory access, served in order
                    pending[c] = req
                    heapq.heappush(heap, (req[1], memory_rank(c, cores_n), next(seq), c))
                    return
                else:
                    got = req[1] + req[2]

        def wake(key: _Key, at: int) -> None:
            known[key] = at
            for c in parked.pop(key, ()):
                heapq.heappush(heap, (max(pending[c][1], at), 0, next(seq), c))

        self.wake = wake
        for c in cores:
            next(progs[c])
            advance(c, 0)
        while heap:
            now, _, k, c = heapq.heappop(heap)
            if c < 0:
                m, n = injections.pop(k)
                wake((_ARRIVAL, m.key, n), self.net.pass_links(
                    m.links, m.serial_ns, m.transfer_ns, now, links))
                continue
            req = pending[c]
            if req[0] == _WAIT:  # what it waited for became known
                advance(c, known[req[2]])
                continue
            if memory_free > now:  # busy: asked again when it frees, lowest core first
                heapq.heappush(heap, (memory_free, memory_rank(c, cores_n), next(seq), c))
                continue
            memory_free = now + req[2]
            advance(c, memory_free)
        if parked:
            raise StreamDeadlock("the stream program's play deadlocked (a wait never met)")
        return starts, ends, self.busiest

    def _core(self, c: int, inferences: int, contended: bool
              ) -> Generator[tuple[Any, ...], int, None]:
        """Core c's program as requests to `run`'s loop (`advance`): it yields (_WAIT,
        clock, key) and is sent back when `key` became known, (_MEM, clock, ns) and
        (_INJECT, clock, message, inference) and is sent back its clock."""
        info, n_tasks, dur, ring = self.info, len(self.waits), self.dur, self.ring
        wait_ns, signal_ns = self.wait_ns, self.signal_ns
        steps = self.per_core[c]
        clock = yield (_RESUME,)

        lag = self.lag
        deepest = max((lag[s] for s in steps if s < n_tasks), default=0)
        # only the ideal play's receives wait for DONE, only the contended play's sends
        # for POSTED: neither play makes the keys the other waits for
        senders = frozenset() if contended else self.senders
        posts = self.posts if contended else frozenset()
        for it in range(inferences + max(lag, default=0)):
            if it < inferences and (self.starts[it] < 0 or clock < self.starts[it]):
                self.starts[it] = clock
            if contended:
                self.wake((_POSTED, c, START, it), clock)
            for s in steps:
                n = it - lag[s] if s < n_tasks else it
                if not 0 <= n < inferences:
                    continue
                if s >= n_tasks:
                    g = info.groups[s - n_tasks]
                    clock = max(clock, (yield (_WAIT, clock, (_READY, g.pair, n))))
                    for ns in self.group_parts[s - n_tasks]:
                        clock = yield (_MEM, clock, ns)
                    self.wake((_FREE, g.pair, n), clock)
                    continue
                for m in self.waits[s]:
                    if contended:
                        clock = max(clock, (yield (_WAIT, clock, (_ARRIVAL, m.key, n))))
                    else:
                        clock = max(clock, (yield (_WAIT, clock, (_DONE, m.after, n)))
                                    + m.transfer_ns)
                sh = self.shared[s]
                parts = self.parts.get(s)
                if parts is None:
                    clock += dur[s] - sh
                else:
                    for shared, ns in parts:
                        clock = (yield (_MEM, clock, ns)) if shared else clock + ns
                clock = yield (_MEM, clock, sh)  # its output stores end its run
                for k in info.free_waits.get(s, ()):
                    if n - ring >= 0:
                        clock = max(clock, (yield (_WAIT, clock, (_FREE, k, n - ring))))
                    clock = yield (_MEM, clock, wait_ns)
                for ns in self.store_ns.get(s, ()):
                    clock = yield (_MEM, clock, ns)
                for k in info.ready_signals.get(s, ()):
                    clock = yield (_MEM, clock, signal_ns)
                    self.wake((_READY, k, n), clock)
                if s in senders:
                    self.wake((_DONE, s, n), clock)
                if s in posts:
                    self.wake((_POSTED, c, s, n), clock)
                if contended:
                    for m in self.sends.get(s, ()):
                        clock = max(clock, (yield (_WAIT, clock, self.post_key(m, n))))
                        yield (_INJECT, clock, m, n)
            if 0 <= it - deepest < inferences:  # the iteration that ends its inference
                self.ends[it - deepest] = max(self.ends[it - deepest], clock)
