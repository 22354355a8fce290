"""The stream estimate (docs/pipeline.md §8): what the simulator should show for a
materialized pipeline program. Each core runs its per-inference program in a loop, so the
steady period is the longest cycle of that program per inference, between the busiest core
and the stage's one-inference completion (`wave_period_ns`). :func:`stream_estimate` plays
the program's steps task by task, inference after inference, as `SimOptions.ideal()` runs
them, then again as the default options do: every shared-memory access (output and
boundary stores, boundary loads, READY/FREE) queued at the serialized shared memory, each
send waiting for its receive to be posted (a core posts an iteration's receives when it
starts it, or where the flow control put them), each message waiting for the links of its
route (`raptor.noc`); `memory_ns` is the service one inference asks of it. Left out: the
gathers of merged lanes.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from raptor.noc import Network, Timelines
from raptor.passes.stream import LoadGroup, StreamInfo
from raptor.solver.comm import START, Replay
from raptor.solver.costs import shared_read_ns, shared_write_ns
from raptor.solver.graph import ComputeGraph
from raptor.solver.pipeline.problem import topological_order
from raptor.target import Target

COUNTER_BYTES = 4
"""One i32 counter word."""


@dataclass
class StreamEstimate:
    ideal_period_ns: int
    """Steady period under the simulator's ideal options."""
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

    @property
    def floor_ns(self) -> int:
        """max(ideal period, memory service): what contention can only lengthen (the judge
        skips a candidate whose floor is no shorter than a simulated period)."""
        return max(self.ideal_period_ns, self.memory_ns)


def steady_period(ends: Sequence[int], fill: int) -> int | None:
    """Median interval between consecutive completions from inference `fill` on (all of
    them when the stream is shorter); the simulator's `SimReport.period_ns` is the same."""
    if len(ends) < 2:
        return None
    steps = [b - a for a, b in itertools.pairwise(ends)]
    tail = steps[max(0, fill - 1):] or steps
    return int(statistics.median(tail))


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
                links, ser, transfer = net.timing(core_of[u], q, frag.bytes)
                msg = made[key] = _Message(key, after, rank, post, links, ser, transfer)
            waits[t].append(msg)
    sends: dict[int, list[_Message]] = {}
    for msg in sorted(made.values(), key=lambda m: (m.rank, m.key)):
        sends.setdefault(msg.after, []).append(msg)
    return waits, sends


def _iteration_order(prev_on_core: dict[int, int], waits: list[list[_Message]],
                     groups: Sequence[LoadGroup], signaller: Mapping[int, int],
                     posts: bool) -> list[int] | None:
    """A topological order of one iteration's steps: core order, messages, READY, and with
    `posts` each posting step before the step its message is sent after; None if there is
    none."""
    n_tasks = len(waits)
    succ: list[list[int]] = [[] for _ in range(n_tasks + len(groups))]
    for b, a in prev_on_core.items():
        succ[a].append(b)
    for t in range(n_tasks):
        for m in waits[t]:
            succ[m.after].append(t)
            if posts and m.post != START:
                succ[m.post].append(m.after)
    for i, g in enumerate(groups):
        succ[signaller[g.pair]].append(n_tasks + i)
    order = topological_order(succ)
    return order if len(order) == len(succ) else None


def stream_estimate(graph: ComputeGraph, target: Target, core_of: Sequence[int],
                    start: Sequence[int], stage_of: Sequence[int], info: StreamInfo,
                    inferences: int, ring: int, stages: int, flow: Replay | None = None
                    ) -> StreamEstimate:
    """Play the stream program of a pipeline placement (see the module docstring): once as
    the ideal options run it, once as the default options do (`period_ns`): the shared
    memory serving one access at a time, rendezvous sends, links carrying one message at a
    time. `start` are the planned starts that ordered each core's events, `info` the
    boundary plan materialization returned, `flow` the communication model whose receive
    posts and sends the program follows (`raptor.solver.comm.Replay`; default: receives
    posted at the iteration's start, each send right after its producer)."""
    graph.freeze()
    n_tasks = graph.num_tasks
    groups = info.groups
    net = Network(target, "raptor")
    per_core = _per_core_steps(n_tasks, core_of, start, groups)
    waits, sends = _messages(graph, net, core_of, start, stage_of, flow)
    signaller = {k: u for u, ks in info.ready_signals.items() for k in ks}
    prev_on_core = {b: a for steps in per_core.values() for a, b in itertools.pairwise(steps)}
    order = _iteration_order(prev_on_core, waits, groups, signaller, False)
    if order is None:
        raise ValueError("the stream program's per-core order contradicts its dependencies")
    posted = _iteration_order(prev_on_core, waits, groups, signaller, True) or order
    play = _Play(graph, target, net, core_of, info, per_core, waits, sends, prev_on_core, ring)
    starts, ends = play.run(order, inferences, False)
    _, contended = play.run(posted, inferences, True)
    memory = sum(t.shared_ns for t in graph.tasks) + sum(map(sum, play.store_ns.values())) + \
        sum(play.group_ns) + sum(len(ks) for ks in info.free_waits.values()) * play.wait_ns + \
        sum(len(ks) for ks in info.ready_signals.values()) * play.signal_ns
    ideal = steady_period(ends, stages) or (ends[-1] if ends else 0)
    period = steady_period(contended, stages) or (contended[-1] if contended else 0)
    latency = int(statistics.median([e - s for s, e in zip(starts, ends, strict=True)]))
    return StreamEstimate(ideal, memory, max(period, memory), latency, ends, starts)


class _Play:
    """Plays of a stream program, inference after inference (`stream_estimate`)."""

    def __init__(self, graph: ComputeGraph, target: Target, net: Network,
                 core_of: Sequence[int], info: StreamInfo, per_core: dict[int, list[int]],
                 waits: list[list[_Message]], sends: dict[int, list[_Message]],
                 prev_on_core: dict[int, int], ring: int) -> None:
        self.net, self.info, self.per_core, self.waits = net, info, per_core, waits
        self.sends, self.prev_on_core, self.ring = sends, prev_on_core, ring
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

    def run(self, order: list[int], inferences: int, contended: bool
            ) -> tuple[list[int], list[int]]:
        """Per inference, when its first core started it and its last core finished it,
        visiting each iteration's steps in `order`. `contended`: every shared-memory
        access waits for the memory (`raptor.noc.Timelines`, one resource), a send for its
        receive to be posted, a message for the links of its route (`Network.pass_links`);
        else none of them waits (the ideal options)."""
        info, groups, waits, sends = self.info, self.info.groups, self.waits, self.sends
        n_tasks, dur, ring = len(waits), self.dur, self.ring
        wait_ns, signal_ns = self.wait_ns, self.signal_ns
        memory, links = Timelines(1), Timelines(self.net.num_links)

        def access(clock: int, ns: int) -> int:
            if not contended or ns <= 0:
                return clock + ns
            at = memory.fit(0, clock, ns)
            memory.reserve(0, at, ns)
            return at + ns

        first_on_core = {steps[0]: c for c, steps in self.per_core.items()}
        last_on_core = {c: steps[-1] for c, steps in self.per_core.items()}
        ready_at: list[list[int]] = [[0] * inferences for _ in info.pairs]
        free_at: list[list[int]] = [[0] * inferences for _ in info.pairs]
        core_free = dict.fromkeys(self.per_core, 0)
        end = [0] * (n_tasks + len(groups))
        done = [0] * (n_tasks + len(groups))
        arrival: dict[tuple[int, int], int] = {}
        starts, ends = [], []
        for n in range(inferences):
            began = dict(core_free)  # each core's iteration start: its START receives
            starts.append(min(core_free.values(), default=0))
            for s in order:
                p = self.prev_on_core.get(s)
                clock = end[p] if p is not None else core_free[first_on_core[s]]
                if s >= n_tasks:
                    g = groups[s - n_tasks]
                    clock = max(clock, ready_at[g.pair][n])
                    for ns in self.group_parts[s - n_tasks]:
                        clock = access(clock, ns)
                    free_at[g.pair][n] = clock
                    end[s] = done[s] = clock
                    continue
                for m in waits[s]:
                    clock = max(clock, arrival[m.key] if contended
                                else done[m.after] + m.transfer_ns)
                sh = self.shared[s]
                clock = access(clock + dur[s] - sh, sh)  # its output stores end its run
                for k in info.free_waits.get(s, ()):
                    if n - ring >= 0:
                        clock = max(clock, free_at[k][n - ring])
                    clock = access(clock, wait_ns)
                for ns in self.store_ns.get(s, ()):
                    clock = access(clock, ns)
                for k in info.ready_signals.get(s, ()):
                    clock = access(clock, signal_ns)
                    ready_at[k][n] = clock
                done[s] = clock
                if contended:
                    for m in sends.get(s, ()):
                        q = m.key[1]
                        clock = max(clock, began[q] if m.post == START else done[m.post])
                        arrival[m.key] = self.net.pass_links(m.links, m.serial_ns,
                                                             m.transfer_ns, clock, links)
                end[s] = clock
            for c, last in last_on_core.items():
                core_free[c] = end[last]
            ends.append(max(core_free.values(), default=0))
        return starts, ends
