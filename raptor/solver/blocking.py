"""The communication model under pimsim-nn's protocol: receives that block, in one message
order (the replay's pimsim-nn policy; `raptor.solver.comm.replay` calls it).

The flow-controlled replay (`raptor.solver.comm`) decides where materialization posts each
receive and makes each send; its receives never block. pimsim-nn's do, so the exporter runs
every core's sends and receives in one global message order, each receive just before its
first reader or before a send later in that order (`raptor.export.order`), and keeps the
faster of two orders: the channel numbers (the replay's send order) and the order messages
leave in a run whose receives do not block. This module plays the program materialization
builds from the replay in such an order, with pimsim-nn's message timing from `raptor.noc`
(request and reply flits, the sender's read, every flit charged the whole path, one message
at a time on each core's switch, the receiver's write; `raptor.sim.protocol.PimsimNN` runs
the same functions) and the shared-memory stores through the core's switch, one request at
a time chip-wide. Its makespan is the estimate under pimsim-nn's protocol. `refine` makes
the order and the receive posts again from such a run.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from raptor import noc
from raptor.solver.costs import shared_read_ns, shared_write_ns
from raptor.solver.graph import ComputeGraph, Task
from raptor.target import Target

Message = tuple[int, int]
"""(fragment, destination core)."""

_TASK, _SEND, _RECV = range(3)
START = -1
"""The point at a core program's start. Every other *point* of a program is named by the
task whose compute (with its shared-memory stores) it follows; the next task's compute
follows it. At a point the core posts receives, then does sends, in that order."""


class Frame(NamedTuple):
    """What `programs` and `blocking_makespan` need of a program that no message order or
    receive posts change (`frame`): a blocking run played again and again on one program
    (`refine`, 13 runs) builds it once."""

    keys: list[Message]
    """The messages that travel (`leaders`); a message is named by its index here."""
    sent: list[list[list[int]]]
    """Per core and position (0: its start, i + 1: after its i-th task), the messages it
    sends there, in rank order."""
    needs: list[list[int]]
    """Per task, the travelling messages it reads."""
    wire: list[int]
    """Per message, its bytes (a merged one's parts' together)."""
    pack: list[int]
    """Per message, the ns its sender takes to pack a merged one's parts (else 0)."""
    sender: list[int]
    """Per message, its sending core."""
    there: list[int]
    """Per message, one flit's ns from its sender to its receiver."""
    back: list[int]
    """Per message, one flit's ns from its receiver to its sender (the reply)."""
    read: list[int]
    """Per message, the ns its sender takes to read it (`raptor.noc.pimsim_read_cycles`)."""
    written: list[int]
    """Per message, the ns its receiver takes to write it, and the gap after."""
    nflits: list[int]
    """Per message, its flits."""


def frame(graph: ComputeGraph, target: Target, core_of: Sequence[int],
          progs: Sequence[Sequence[int]], sends: Mapping[Message, tuple[int, int]],
          merged: Mapping[Message, Message] | None = None) -> Frame:
    """The `Frame` of the program with these sends (message -> (point, rank)) and merges.
    A merged message carries its parts' bytes, packed by its sender first
    (`raptor.noc.pimsim_pack_cycles`)."""
    keys = leaders(sends, merged)
    index = {k: i for i, k in enumerate(keys)}
    alias = merged or {}
    frags = graph.fragments
    pos: dict[int, int] = {START: -1}
    for prog in progs:
        for i, t in enumerate(prog):
            pos[t] = i
    sent: list[list[list[tuple[int, int]]]] = [[[] for _ in range(len(prog) + 1)]
                                               for prog in progs]
    sender = [core_of[frags[k[0]].producer] for k in keys]
    for i, k in enumerate(keys):
        point, rank = sends[k]
        sent[sender[i]][pos[point] + 1].append((rank, i))
    needs: list[list[int]] = [[] for _ in range(graph.num_tasks)]
    for x, fs in enumerate(graph.reads):
        p = core_of[x]
        needs[x] = [index[alias.get((f, p), (f, p))] for f in fs
                    if core_of[frags[f].producer] != p]
    fbytes = graph.memory.fragment if graph.memory is not None else \
        [noc.wire_bytes(target, f.bytes) for f in frags]
    parts: list[list[int]] = [[fbytes[k[0]]] for k in keys]
    for k, lead in alias.items():
        parts[index[lead]].append(fbytes[k[0]])
    wire = [sum(ps) for ps in parts]
    ns, gap = target.ns, target.ns(noc.PIMSIM_GAP_CYCLES)
    sizes = {n: (ns(noc.pimsim_read_cycles(target, n)),
                 ns(noc.pimsim_write_cycles(target, n)) + gap, noc.flits(target, n))
             for n in set(wire)}  # a few sizes, many messages
    read, written, nflits = ([sizes[n][j] for n in wire] for j in range(3))
    flit = target.flit_ns
    return Frame(keys, [[[i for _, i in sorted(at)] for at in row] for row in sent], needs,
                 wire,
                 [target.ns(noc.pimsim_pack_cycles(target, ps)) if len(ps) > 1 else 0
                  for ps in parts],
                 sender, [flit(s, k[1]) for s, k in zip(sender, keys, strict=True)],
                 [flit(k[1], s) for s, k in zip(sender, keys, strict=True)],
                 read, written, nflits)


def programs(framed: Frame, progs: Sequence[Sequence[int]], order: Mapping[Message, int],
             posts: Mapping[Message, int] | None = None) -> list[list[tuple[int, int]]]:
    """Each core's program in the blocking order of ``order`` (message -> place): its sends
    where the replay made them (`Frame.sent`), its tasks in order, and each receive before
    its first reader or before a send later in ``order``, whichever comes first; with
    ``posts`` (message -> point) also as soon as its point has passed and no send earlier
    in ``order`` is still to come (`raptor.export.order.blocking_order`, ``posted=True``).
    A message merged into another (`merge_messages`) has no send or receive of its own.
    Items are (kind, task or message index into `Frame.keys`)."""
    keys = framed.keys
    rank = [order[k] for k in keys]
    into: list[list[tuple[int, int]]] = [[] for _ in progs]
    posted_at: dict[tuple[int, int], list[int]] = {}
    for i, k in enumerate(keys):
        into[k[1]].append((rank[i], i))
        if posts is not None:
            posted_at.setdefault((k[1], posts[k]), []).append(i)
    out: list[list[tuple[int, int]]] = []
    by_rank = rank.__getitem__
    for p, prog in enumerate(progs):
        plain: list[tuple[int, int]] = []
        sent = framed.sent[p]
        for j, point in enumerate((START, *prog)):
            if point >= 0:
                plain.append((_TASK, point))
            got = posted_at.get((p, point))
            if got:
                plain.extend([(_RECV, i) for i in got])
            at = sent[j]
            if at:
                plain.extend([(_SEND, i) for i in (sorted(at, key=by_rank) if len(at) > 1
                                                   else at)])
        later = [1 << 62] * (len(plain) + 1)  # the rank of the next send from each item
        for j in range(len(plain) - 1, -1, -1):
            later[j] = rank[plain[j][1]] if plain[j][0] == _SEND else later[j + 1]
        mine = sorted(into[p])
        ops: list[tuple[int, int]] = []
        due: set[int] = set()
        nxt = 0

        def upto(o: int, mine: list[tuple[int, int]] = mine, ops: list[tuple[int, int]] = ops
                 ) -> None:
            nonlocal nxt
            while nxt < len(mine) and mine[nxt][0] <= o:
                ops.append((_RECV, mine[nxt][1]))
                nxt += 1

        for j, (kind, x) in enumerate(plain):
            if kind == _RECV:
                due.add(x)
                continue
            while nxt < len(mine) and mine[nxt][1] in due and mine[nxt][0] < later[j]:
                upto(mine[nxt][0])
            if kind == _TASK:
                need = framed.needs[x]
                if need:
                    upto(max([rank[i] for i in need]))
            else:
                upto(rank[x] - 1)
            ops.append((kind, x))
        upto(1 << 62)
        out.append(ops)
    return out


def meeting_posts(graph: ComputeGraph, core_of: Sequence[int], progs: Sequence[Sequence[int]],
                  start: Sequence[int], posts: Mapping[Message, int],
                  left: Mapping[Message, int], leads: Sequence[int | None],
                  sends: Mapping[Message, tuple[int, int]], order: Mapping[Message, int]
                  ) -> list[dict[Message, int]]:
    """Receives posted where their sender will be: each at the point before the first task
    of its core planned to start after the message left, less ``lead`` ns (``start``,
    ``left``: a run whose receives do not block), never earlier than ``posts`` (the flow
    control's points, which keep local memory within budget) nor after the point before
    its first reader (where every receive goes with ``lead`` None). pimsim-nn's `recv`
    blocks its core and its `send` waits for the `recv`: a receive left just before its
    first reader keeps the sender waiting through the receiver's computes before it, and
    the sender's own receivers behind it. Nor is one posted after a send of its core
    later in ``order`` (the blocking order puts it before that send): the program as
    materialized is then the blocking order but for receives posted earlier, and runs on
    Raptor's own mesh, where posted receives never block, as surely as on pimsim-nn.
    One set of posts per lead of ``leads``."""
    pos: dict[int, int] = {START: -1}
    for prog in progs:
        for i, t in enumerate(prog):
            pos[t] = i
    first: dict[Message, int] = {}
    for t, fs in enumerate(graph.reads):
        q = core_of[t]
        for f in fs:
            key = (f, q)
            if key in posts and pos[t] < first.get(key, 1 << 62):
                first[key] = pos[t]
    starts = [[start[t] for t in prog] for prog in progs]
    mine: list[list[tuple[int, int]]] = [[] for _ in progs]  # (rank, position) per core
    for key, (point, _) in sends.items():
        mine[core_of[graph.fragments[key[0]].producer]].append((order[key], pos[point]))
    for m in mine:
        m.sort()
    ranks = [[r for r, _ in m] for m in mine]
    outs: list[dict[Message, int]] = [{} for _ in leads]
    for key, point in posts.items():
        prog = progs[key[1]]
        latest = first[key]
        k = bisect.bisect_right(ranks[key[1]], order[key])
        if k < len(mine[key[1]]):  # a later send at position x: post by the point x
            latest = min(latest, mine[key[1]][k][1] + 1)
        for out, lead in zip(outs, leads, strict=True):
            at = latest if lead is None else \
                min(latest, bisect.bisect_right(starts[key[1]], left[key] - lead))
            # `at` tasks start before the message leaves (less lead)
            meet = prog[at - 1] if at else START
            out[key] = meet if pos[meet] > pos[point] else point
    return outs


def leaders(sends: Mapping[Message, tuple[int, int]],
            merged: Mapping[Message, Message] | None) -> list[Message]:
    """The messages that travel: those of ``sends`` not merged into another."""
    return list(sends) if not merged else [k for k in sends if k not in merged]


def merge_messages(graph: ComputeGraph, core_of: Sequence[int], progs: Sequence[Sequence[int]],
                   sends: Mapping[Message, tuple[int, int]], posts: Mapping[Message, int]
                   ) -> tuple[dict[Message, Message], dict[Message, int]]:
    """Fewer, larger messages where pimsim-nn's handshake dominates: the messages one core
    sends to one core at one point of its program (``sends``: message -> (point, rank))
    travel as one, in the place of the first of them by rank, its receive posted where
    the first of theirs was (``posts``). Their data is ready there for all of them, so
    no consumer waits for a later producer, and each core still walks the messages in one
    order, which keeps the blocking program deadlock-free. Returns (part -> the message
    it travels in, for every part but the first; the posts with each merged message's
    receive at its parts' first)."""
    frags = graph.fragments
    pos: dict[int, int] = {START: -1}
    for prog in progs:
        for i, t in enumerate(prog):
            pos[t] = i
    groups: dict[tuple[int, int, int], list[Message]] = {}
    for key in sorted(sends, key=lambda k: sends[k][1]):
        at = (core_of[frags[key[0]].producer], sends[key][0], key[1])
        groups.setdefault(at, []).append(key)
    merged: dict[Message, Message] = {}
    out = dict(posts)
    for group in groups.values():
        if len(group) < 2:
            continue
        lead = group[0]
        out[lead] = min((posts[k] for k in group), key=pos.__getitem__)
        for k in group[1:]:
            merged[k] = lead
    return merged, out


def pimsim_shared_ns(target: Target, task: Task) -> tuple[int, int]:
    """A task's shared-memory loads and stores as pimsim-nn serves them: at the chip's
    activation precision (`raptor.noc.wire_bytes`) where Raptor's prices count the IR's."""
    store = task.shared_ns
    if task.store_bytes:
        store += shared_write_ns(target, noc.wire_bytes(target, task.store_bytes)) \
            - shared_write_ns(target, task.store_bytes)
    return shared_read_ns(target, noc.wire_bytes(target, task.load_bytes)), store


class Seen(NamedTuple):
    """What a blocking run saw (`blocking_makespan`'s ``seen``): when each task began
    (``start``, by task), when each travelling message's sender reached its send
    (``ready``) and when its receiver posted its receive (``posted``)."""

    start: list[int]
    ready: dict[Message, int]
    posted: dict[Message, int]


class Priced(NamedTuple):
    """A task as pimsim-nn runs it, in ns: ``lead`` before its global-memory load is
    requested, the ``load`` service, its ``work`` until its stores are requested, their
    ``store`` service, and the ``tail`` after it (`raptor.export.task_costs`)."""

    lead: int
    load: int
    work: int
    store: int
    tail: int


def target_priced(graph: ComputeGraph, target: Target, core_of: Sequence[int]) -> list[Priced]:
    """Each task as the target's op costs price it, its shared-memory traffic as pimsim-nn
    serves it (`pimsim_shared_ns`)."""
    out = []
    for d, task in zip(graph.durations(core_of), graph.tasks, strict=True):
        load, store = pimsim_shared_ns(target, task)
        out.append(Priced(0, load, d - task.shared_ns - shared_read_ns(target, task.load_bytes),
                          store, 0))
    return out


def blocking_makespan(graph: ComputeGraph, target: Target, core_of: Sequence[int],
                      progs: Sequence[Sequence[int]], sends: Mapping[Message, tuple[int, int]],
                      order: Mapping[Message, int], posts: Mapping[Message, int] | None = None,
                      merged: Mapping[Message, Message] | None = None,
                      priced: Sequence[Priced] | None = None,
                      seen: Seen | None = None, framed: Frame | None = None) -> int | None:
    """The makespan of the program `programs` builds, under pimsim-nn's protocol; None if
    it deadlocks (an order that contradicts the dependencies). Tasks cost what the
    target's op costs say, or ``priced`` (per task, pimsim-nn's own). ``framed``: the
    program's `frame`, if the caller has it."""
    if framed is None:
        framed = frame(graph, target, core_of, progs, sends, merged)
    keys, pack, sender = framed.keys, framed.pack, framed.sender
    there, back, read, written, nflits = (framed.there, framed.back, framed.read,
                                          framed.written, framed.nflits)
    ops = programs(framed, progs, order, posts)
    if priced is None:
        priced = target_priced(graph, target, core_of)
    queued = [(c.load, c.store) for c in priced]
    own = [c.work for c in priced]
    ns = target.ns
    setup, gap = ns(noc.PIMSIM_SCALAR_CYCLES), ns(noc.PIMSIM_GAP_CYCLES)
    P = len(progs)
    pc, clock, switch, phase = [0] * P, [0] * P, [0] * P, [0] * P
    request = [0] * len(keys)
    posted = [-1] * len(keys)  # when its receive was posted (-1: not yet)
    sender_waits = [False] * len(keys)
    # (time, rank, core): runs (rank 0) before memory requests (`noc.pimsim_memory_rank`)
    # at the same time, so every request made at a time is in before one is served (the
    # highest core first, as pimsim-nn; served in run order, all cores' first loads
    # went from core 0 up)
    heap: list[tuple[int, int, int]] = []
    mem_rank = [noc.pimsim_memory_rank(p, P) for p in range(P)]
    mem_free = 0
    began, ready, saw = (seen.start, seen.ready, seen.posted) if seen is not None else \
        (None, None, None)
    transfer_ns, request_ns = noc.pimsim_transfer, noc.pimsim_request

    def transfer(i: int) -> None:
        """Message i's request and receive are both there: time it, wake the other side."""
        q, s = keys[i][1], sender[i]
        switch[q], done, _, arrival = transfer_ns(request[i], posted[i], switch[q], switch[s],
                                                  back[i], there[i], read[i], nflits[i])
        clock[s] = done + gap
        switch[s] = arrival
        clock[q] = arrival + written[i]

    def run(p: int) -> None:
        prog = ops[p]
        while pc[p] < len(prog):
            kind, x = prog[pc[p]]
            if kind == _TASK:  # loads, own work, stores; the shared memory through the
                # core's switch and the chip's one port, ties from the highest core
                if phase[p] == 0 and began is not None:
                    began[x] = clock[p]
                if phase[p] == 0 and queued[x][0]:
                    phase[p] = 1
                    clock[p] += priced[x].lead
                    heapq.heappush(heap, (max(clock[p], switch[p]), mem_rank[p], p))
                    return
                if phase[p] < 2:
                    clock[p] += own[x]
                    if queued[x][1]:
                        phase[p] = 2
                        heapq.heappush(heap, (max(clock[p], switch[p]), mem_rank[p], p))
                        return
                clock[p] += priced[x].tail
                phase[p] = 0
            elif kind == _SEND:
                clock[p] += pack[x]
                if ready is not None:
                    ready[keys[x]] = clock[p]
                request[x], switch[p] = request_ns(clock[p] + setup, switch[p], there[x])
                clock[p] += setup
                if posted[x] < 0:
                    sender_waits[x] = True
                    return
                transfer(x)
                q = keys[x][1]
                heapq.heappush(heap, (clock[q], 0, q))
                pc[q] += 1
            else:
                clock[p] += setup
                posted[x] = clock[p]
                if saw is not None:
                    saw[keys[x]] = clock[p]
                if not sender_waits[x]:
                    return
                sender_waits[x] = False
                transfer(x)
                s = sender[x]
                pc[s] += 1
                heapq.heappush(heap, (clock[s], 0, s))
            pc[p] += 1

    for p in range(P):
        heapq.heappush(heap, (0, 0, p))
    while heap:
        now, rank, p = heapq.heappop(heap)
        if rank:  # a memory request: served when the port is free
            t = ops[p][pc[p]][1]
            mem_free = clock[p] = switch[p] = max(now, mem_free) + queued[t][phase[p] - 1]
            phase[p] += phase[p] == 2
        run(p)
    if any(pc[p] < len(ops[p]) for p in range(P)):
        return None
    return max(clock, default=0)


REFINE_ROUNDS = 6
"""Rounds of `refine`, each trying every lead of `REFINE_LEADS_NS` (one blocking run
each). ResNet-18's estimate on pimsim-nn: 14.16 ms unrefined, 11.99 after 6 rounds, 11.88 after 10
for 55 % more of `refine`'s CPU. The replay a program is built from is refined further
(`raptor.solver.comm.deepen`)."""

REFINE_LEADS_NS = (0, 2_000)
"""How long before its sender's send `refine` posts a receive (`meeting_posts`'s lead):
the run's times place it only approximately, and which lead is faster changes from round
to round."""


def pulls_receives(graph: ComputeGraph, core_of: Sequence[int],
                   progs: Sequence[Sequence[int]], sends: Mapping[Message, tuple[int, int]],
                   order: Mapping[Message, int], flow: Mapping[Message, int]) -> bool:
    """Whether ``order`` puts some receive before where the flow control posted it
    (``flow``). The blocking program takes its core's receives in the order, each before
    every send of its core later in the order and before every reader of a receive later
    in the order (`raptor.export.order.blocking_order`): one of those at or before the
    receive's point pulls it there, and the local memory the flow control kept within
    budget overflows."""
    pos: dict[int, int] = {START: -1}
    for prog in progs:
        for i, t in enumerate(prog):
            pos[t] = i
    # per core and position, the highest rank sent or read up to there (a running maximum)
    top: list[list[int]] = [[-1] * (len(prog) + 1) for prog in progs]
    for key, (point, _) in sends.items():
        row = top[core_of[graph.fragments[key[0]].producer]]
        row[pos[point] + 1] = max(row[pos[point] + 1], order[key])
    for t, fs in enumerate(graph.reads):
        q = core_of[t]
        for f in fs:
            if (f, q) in flow:
                top[q][pos[t]] = max(top[q][pos[t]], order[(f, q)])
    for row in top:
        for i in range(1, len(row)):
            row[i] = max(row[i], row[i - 1])
    return any(top[key[1]][pos[point]] > order[key] for key, point in flow.items()
               if pos[point] >= 0)


class PostGraph(NamedTuple):
    """The constraints `respecting_posts` orders messages by, which no order changes
    (`post_graph`): nodes are the messages (by index into ``keys``), then one barrier per
    core and position."""

    keys: list[Message]
    after: list[list[int]]
    """Per node, the nodes that must come after it."""
    needs: list[int]
    """Per node, how many nodes must come before it."""


def post_graph(graph: ComputeGraph, core_of: Sequence[int], progs: Sequence[Sequence[int]],
               sends: Mapping[Message, tuple[int, int]], flow: Mapping[Message, int]
               ) -> PostGraph:
    """Each message before every send of its receiving core before its flow post (``flow``)
    and every receive read there up to its post. A core's prefixes chain through one
    barrier per position, so the constraints stay linear in the program."""
    pos: dict[int, int] = {START: -1}
    for prog in progs:
        for i, t in enumerate(prog):
            pos[t] = i
    keys = list(sends)
    index = {k: i for i, k in enumerate(keys)}
    base = [len(keys)]  # barrier (core, i) is node base[core] + i: items up to position i
    for prog in progs:
        base.append(base[-1] + len(prog) + 1)
    n = base[-1]
    after: list[list[int]] = [[] for _ in range(n)]
    for q, prog in enumerate(progs):
        for i in range(len(prog)):
            after[base[q] + i].append(base[q] + i + 1)
    for key, (point, _) in sends.items():  # a send at a point precedes the next position
        after[index[key]].append(base[core_of[graph.fragments[key[0]].producer]]
                                 + pos[point] + 1)
    for t, fs in enumerate(graph.reads):
        q = core_of[t]
        for f in fs:
            if (f, q) in flow:
                after[index[(f, q)]].append(base[q] + pos[t])
    for key, point in flow.items():
        if pos[point] >= 0:
            after[base[key[1]] + pos[point]].append(index[key])
    needs = [0] * n
    for succ in after:
        for j in succ:
            needs[j] += 1
    return PostGraph(keys, after, needs)


def respecting_posts(graph: ComputeGraph, core_of: Sequence[int],
                     progs: Sequence[Sequence[int]], sends: Mapping[Message, tuple[int, int]],
                     order: Mapping[Message, int], flow: Mapping[Message, int],
                     constraints: PostGraph | None = None) -> dict[Message, int] | None:
    """``order`` made one that pulls no receive (`pulls_receives`): the constraints of
    `post_graph` (``constraints``, if the caller has them), otherwise as close to
    ``order`` as they allow (the messages taken by rank as soon as those are in;
    ``order`` itself if it pulls none). None if no order does."""
    if constraints is None:
        constraints = post_graph(graph, core_of, progs, sends, flow)
    keys, after = constraints.keys, constraints.after
    needs = list(constraints.needs)
    m = len(keys)
    ready = [(-1 if j >= m else order[keys[j]], j) for j in range(len(needs)) if not needs[j]]
    heapq.heapify(ready)
    out: dict[Message, int] = {}
    while ready:
        _, j = heapq.heappop(ready)
        if j < m:
            out[keys[j]] = len(out)
        for k in after[j]:
            needs[k] -= 1
            if not needs[k]:
                heapq.heappush(ready, (-1 if k >= m else order[keys[k]], k))
    return out if len(out) == m else None


def refine(graph: ComputeGraph, target: Target, core_of: Sequence[int],
           progs: Sequence[Sequence[int]], sends: Mapping[Message, tuple[int, int]],
           order: Mapping[Message, int], posts: Mapping[Message, int],
           flow: Mapping[Message, int], rounds: int | None = None, meet: bool = False,
           leads: tuple[int, ...] = REFINE_LEADS_NS
           ) -> tuple[int, dict[Message, int], dict[Message, int]] | None:
    """The message order and receive posts made from the program's own blocking run, each
    round from the last round's run: messages ranked by when their senders reached them
    (`noc.pimsim_message_order`), each receive posted where its sender was
    (`meeting_posts` with the run's task starts; ``flow``: the flow control's posts), the
    order first made to pull no receive ahead of ``flow`` (`respecting_posts`). The
    order and posts planned from a run whose receives do not block meet a blocking run
    3-4 times longer, where senders and receivers come at other times. Each round's
    fastest run seeds the next, even when slower than the fastest so far (with one lead a
    round, stopping there ended higher on four of six of ResNet-18's replays, by up to
    3.1 %). ``rounds``: default `REFINE_ROUNDS`; ``leads``: `meeting_posts`' leads tried
    each round. With ``meet``, each round also tries the order of when each message could
    meet its receive (`meeting_order`), posted with lead 0. Returns (makespan, order,
    posts) of the fastest, or None if the program as given deadlocks."""
    keys = list(sends)
    senders = [core_of[graph.fragments[k[0]].producer] for k in keys]
    priced = target_priced(graph, target, core_of)
    framed = frame(graph, target, core_of, progs, sends)
    constraints = post_graph(graph, core_of, progs, sends, flow)
    seen = Seen([0] * graph.num_tasks, {}, {})
    best = blocking_makespan(graph, target, core_of, progs, sends, order, posts, priced=priced,
                             seen=seen, framed=framed)
    if best is None:
        return None
    out = (best, dict(order), dict(posts))
    played: tuple[dict[Message, int], dict[Message, int]] | None = None
    for _ in range(REFINE_ROUNDS if rounds is None else rounds):
        tried: list[tuple[int, int, int, dict[Message, int], dict[Message, int], Seen]] = []
        kinds: list[tuple[int, list[int], tuple[int, ...]]] = [
            (0, [seen.ready[k] for k in keys], leads)]
        if meet:
            kinds.append((1, meeting_order(keys, senders, sends, seen), (0,)))
        for kind, times, leads in kinds:
            made = noc.pimsim_message_order([(t, s, sends[k][1]) for t, s, k in
                                             zip(times, senders, keys, strict=True)])
            ranked = respecting_posts(graph, core_of, progs, sends,
                                      {keys[i]: r for r, i in enumerate(made)}, flow,
                                      constraints)
            if ranked is None:  # what it returns pulls no receive (`post_graph`)
                continue
            for lead, moved in zip(leads, meeting_posts(
                    graph, core_of, progs, seen.start, flow, seen.ready, leads, sends, ranked),
                    strict=True):
                now = Seen([0] * graph.num_tasks, {}, {})
                got = blocking_makespan(graph, target, core_of, progs, sends, ranked, moved,
                                        priced=priced, seen=now, framed=framed)
                if got is not None:
                    tried.append((got, lead, kind, ranked, moved, now))
        if not tried:
            break
        got, _, _, ranked, moved, seen = min(tried, key=lambda c: (c[0], c[1], c[2]))
        if got < out[0]:
            out = (got, ranked, moved)
        if played == (ranked, moved):  # the run the last round played: so would the rest
            break
        played = (ranked, moved)
    return out


def meeting_order(keys: Sequence[Message], senders: Sequence[int],
                  sends: Mapping[Message, tuple[int, int]], seen: Seen) -> list[int]:
    """Per message, when it could have met its receive in the run ``seen``: once its sender
    reached the point it is sent at (its first send there) and its receive was posted.
    Ranked by these times, a sender's messages at one point go to the receivers that wait
    first: in the run's own order one whose receiver came late kept the sender, and every
    receiver behind it, waiting."""
    reach: dict[tuple[int, int], int] = {}
    for k, s in zip(keys, senders, strict=True):
        at = (s, sends[k][0])
        reach[at] = min(reach.get(at, 1 << 62), seen.ready[k])
    return [max(reach[(s, sends[k][0])], seen.posted[k])
            for k, s in zip(keys, senders, strict=True)]
