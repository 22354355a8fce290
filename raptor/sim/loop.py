"""The simulator's event loop, compiled (`raptor.jit`): every run, on Raptor's mesh (rendezvous
or buffered sends, streams with their counters, traced or not) or under pimsim-nn's protocol
(`protocol.PimsimNN`: the `_pim_*` kernels, on `pimsim`'s costs).

The cores' programs are flattened once per `Program` into integer arrays (`Flat`), and the
whole timing part of the run (`_loop`: the event heap, every core's clock, the posted
receives, parked senders and unclaimed buffered messages, link walks, the shared-memory
queue, stores and counters) is one call with no Python object inside. It returns what the
run leaves behind, in arrays: the order of computes and memory accesses for the numerics
(the stream's race check, `SharedMemory.check_race`, runs on it), the trace's spans as
codes (`SPAN_*`, turned into `Trace.recorded`'s tuples here), the messages in the order
they were injected and the link walks when logged, and each core's state (a deadlock is
reported by `Engine.why` from it).

A message is its send: the k-th send of a channel meets the channel's k-th receive (numbered
`Instr.msg`). A receive is posted at its core's clock and costs nothing; a rendezvous send
waits for it (plus `rendezvous_ns`), a buffered one never waits (its message, if it arrives
before the receive is posted, is delivered then); the message then crosses `raptor.noc`'s
cut-through links (contended when `link_contention`), granted in injection-time order
(simultaneous ones by `raptor.noc.inject_rank`), and the value is ready at its receiver when
it arrives. Shared-memory requests are served one at a time chip-wide when `shared_queueing`
(simultaneous ones by `raptor.noc.memory_rank`); a load waits for the stores it reads; a
`pim.wait` parks until its counter has its threshold of completed `pim.signal`s.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from raptor import noc
from raptor.ir.core import Value
from raptor.jit import kernel
from raptor.sim.program import COMPUTE, LOAD, RECV, SEND, SIGNAL, STORE, WAIT, Instr, Program
from raptor.sim.protocol import (
    GLOBAL_QUEUE,
    INJECT,
    MEM,
    RECEIVE_NOTE,
    RUN,
    PimsimNN,
    handshake_note,
    post_wait,
    rendezvous_note,
)
from raptor.sim.report import BLOCKED, COMM, MEMORY, QUEUE
from raptor.sim.shared import STORES_WAIT, count_wait

if TYPE_CHECKING:
    from raptor.sim.engine import Engine

(SPAN_COMPUTE, SPAN_OPERANDS, SPAN_POST, SPAN_RENDEZVOUS, SPAN_STORES, SPAN_QUEUE, SPAN_MEMORY,
 SPAN_COUNT, SPAN_RECEIVE, SPAN_HANDSHAKE, SPAN_GLOBAL) = range(11)
"""What a span record (code, core, start, duration, instruction) of `_loop` is."""

(CORE_PC, CORE_CLOCK, CORE_BUSY, CORE_BLOCKED, CORE_DONE, CORE_SLOT, CORE_STORE, CORE_COUNT,
 CORE_WAKE, CORE_SYNC, CORE_SWITCH, CORE_REQUEST) = range(12)
"""The columns of `_loop`'s core state (`engine.Core`'s fields of the same names; the
`pim.wait` a core is parked on by its instruction's index). pimsim-nn's protocol: the slot
a posted blocking receive waits for, when the core's switch is free, when its send's
request reaches the receiver."""

GLOBAL = WAIT + 1
"""pimsim-nn's protocol: the kind of a compute on the global memory (queued like a load)."""

PIMSIM_ARRAYS = 9
"""pimsim-nn's per-instruction arrays after `Flat.arrays` (`pimsim`): before, busy, after,
memory held, message bytes, flits, flit out, flit back, the receiver's write."""

I64 = np.int64

Heap = list[tuple[int, int, int, int, int]]
"""The event heap: (time, rank, sequence number, event, payload) (`Engine.push`)."""


@dataclass
class Flat:
    """A program's instructions as arrays, indexed by the instruction's place in all the
    cores' programs laid end to end (core by core, in `Program.cores`' order; `arrays`,
    in `_core`'s order). Per core: `begin` (its first instruction; `begin[k + 1]` ends
    it), its id and its memory rank. Per instruction: kind, cost, the arrival slots it
    waits for (`wait_slots` from `waits[i]` to `waits[i + 1]`), its message, rank and
    receiving core (by index) and the slot its message arrives in (sends), its route (links
    likewise, serialization and transfer time), and for loads and stores the stores it
    waits for (`deps` likewise), its store's number and its bytes."""

    instrs: list[Instr]
    arrays: tuple[np.ndarray, ...]
    counters: list[tuple[Value, int]]
    """The counters (`Instr.counter`) by number (`arrays`' counter of a signal or wait)."""
    spans: list[tuple[int, int, str, str] | None] | None = None
    """Per instruction, a compute's `Instr.span` (made on the first traced run)."""
    pimsim: tuple[np.ndarray, ...] | None = None
    """`arrays` for pimsim-nn's protocol (`pimsim`, made on the first run under it: the
    program's timings and target are the same in every run)."""


def flat(program: Program, num_cores: int) -> Flat | None:
    """`program` as arrays (made once, kept on it), or None if it holds nothing."""
    if program.flat is not None:
        return program.flat
    instrs = [ins for prog in program.cores.values() for ins in prog]
    if not instrs:
        return None
    n = len(instrs)

    def cols(objs: list[Any], *attrs: str) -> list[np.ndarray]:
        """Integer fields of `objs`, one array each (one pass: the objects are scattered
        in memory, and each visit is a cache miss)."""
        got = np.fromiter(chain.from_iterable(map(attrgetter(*attrs), objs)), I64,
                          len(objs) * len(attrs))
        return [np.ascontiguousarray(c) for c in got.reshape(len(objs), len(attrs)).T]

    def csr(seqs: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, np.ndarray]:
        """Tuples laid end to end: where each starts (and ends), and their items."""
        starts = np.zeros(n + 1, I64)
        starts[1:] = np.fromiter(map(len, seqs), I64, n)
        return np.cumsum(starts, out=starts), np.fromiter(chain(*seqs, [-1]), I64)

    kind, cost, msg, rank, peer, store_id, nbytes, first, threshold = cols(
        instrs, "kind", "cost", "msg", "rank", "peer", "store_id", "nbytes", "first",
        "threshold")
    numbers: dict[tuple[Value, int], int] = {}
    counter = np.fromiter((-1 if ins.counter is None else numbers.setdefault(ins.counter,
                           len(numbers)) for ins in instrs), I64, n)
    signals = np.zeros(len(numbers) + 1, I64)  # per counter: where its signals' times start
    signals[1:] = np.bincount(counter[kind == SIGNAL], minlength=len(numbers))
    routes, waits, deps, made = zip(
        *map(attrgetter("route", "wait_slots", "deps", "slots_out"), instrs), strict=True)
    serial, transfer = cols(list(routes), "serial_ns", "transfer_ns")
    index = np.full(max(program.cores, default=0) + 2, -1, I64)  # core id -> index; -1 -> -1
    index[list(program.cores)] = np.arange(len(program.cores))
    slot = np.full(n, -1, I64)  # a send's: the slot its value arrives in
    sends = np.flatnonzero(kind == SEND).tolist()
    slot[sends] = [made[g][0] for g in sends]
    recvs = np.flatnonzero(kind == RECV).tolist()  # a receive's: the slot of its value
    slot[recvs] = [made[g][0] for g in recvs]
    sender = np.full(program.messages + 1, -1, I64)  # per message: its send
    sender[msg[sends]] = sends
    program.flat = Flat(instrs, (
        np.cumsum([0, *map(len, program.cores.values())], dtype=I64),
        np.array(list(program.cores), I64),
        np.array([noc.memory_rank(cid, num_cores) for cid in program.cores], I64),
        kind, cost, *csr(waits), msg, rank, np.where(kind == SEND, index[peer], -1), slot,
        *csr(tuple(r.links for r in routes)), serial, transfer, *csr(deps), store_id, nbytes,
        first, counter, threshold, np.cumsum(signals), sender), list(numbers))
    return program.flat


def pimsim(f: Flat, proto: PimsimNN) -> tuple[np.ndarray, ...]:
    """`f`'s arrays for pimsim-nn's protocol: its memory ranks and kinds (`GLOBAL`), then
    the op costs of `PimsimNN.timing` in ns and each send's flits (`PIMSIM_ARRAYS`)."""
    target, arrays = proto.target, f.arrays
    tms = [proto.timing(ins) for ins in f.instrs]
    before, busy, after, memory, nbytes = (np.array(c, I64) for c in zip(
        *((tm.before, tm.busy, tm.after, tm.memory, tm.nbytes) for tm in tms), strict=True))
    timed = np.array([ins.timing is not None for ins in f.instrs])
    kind = arrays[3].copy()
    kind[(kind == COMPUTE) & timed & (memory != 0)] = GLOBAL
    fwd, back, landed = (np.zeros(len(tms), I64) for _ in range(3))
    for g in np.flatnonzero(kind == SEND).tolist():
        ins = f.instrs[g]
        assert ins.partner is not None
        rtm = proto.timing(ins.partner)
        fwd[g] = proto.flit_ns(ins.core, ins.peer)
        back[g] = proto.flit_ns(ins.peer, ins.core)
        landed[g] = target.ns(rtm.busy) + target.ns(rtm.after)
    return (*arrays[:2], np.array([noc.pimsim_memory_rank(c, target.num_cores)
                                        for c in arrays[1].tolist()], I64), kind,
            *arrays[4:], target.ns(before), target.ns(busy), target.ns(after),
            np.where(timed, target.ns(memory), arrays[4]), nbytes, noc.flits(target, nbytes),
            fwd, back, landed)


_MESH_ONLY = tuple(np.zeros(1, I64) for _ in range(PIMSIM_ARRAYS))
"""The pimsim-nn arrays of a run on Raptor's mesh (never read)."""


def run(engine: Engine, f: Flat) -> None:
    """`engine`'s run by `_loop`: its cores, order, trace and report as a run leaves them."""
    program, opts = engine.program, engine.opts
    traced = opts.trace
    n = len(f.instrs)
    state = np.zeros((len(engine.cores), 12), I64)
    state[:, CORE_SLOT:CORE_COUNT + 1] = -1
    state[:, CORE_SYNC] = -1
    starts = np.full((len(engine.cores), max(f.arrays[19].max(), 0) + 1), -1, I64)  # by `first`
    signals = f.arrays[22]
    tally = np.zeros(len(signals), I64)  # per counter: its signals completed
    times = np.empty(signals[-1] + 1, I64)  # their times, sorted, from `signals[counter]`
    arrival = np.full(len(engine.arrival) + 1, -1, I64)
    spans = np.empty((4 * n + 1 if traced else 1, 5), I64)  # pages touched only if used
    sent = np.empty((program.messages + 1 if traced else 1, 4), I64)
    order = np.empty(n + 1, I64)
    order_at = np.empty(n + 1, I64)
    counts = np.zeros(N_COUNTS, I64)
    proto = engine.proto
    log = proto.log
    walks = np.empty((program.messages + 1 if log is not None else 1, 2), I64)
    pim = isinstance(proto, PimsimNN)
    cfg = (proto.hop, opts.rendezvous_ns, int(opts.link_contention),
           int(opts.shared_queueing), int(traced), int(program.inferences > 0),
           int(opts.mode == "buffered"), int(log is not None), int(pim))
    if isinstance(proto, PimsimNN):
        if f.pimsim is None:
            f.pimsim = pimsim(f, proto)
        arrays = f.pimsim
    else:
        arrays = (*f.arrays, *_MESH_ONLY)
    _loop(arrays, (state, arrival, spans, sent, order, counts, starts, order_at, tally, times,
                   walks), program.messages, proto.net.num_links, len(program.stores) + 1, cfg)
    if log is not None:  # `_inject`'s log of its walks
        walked = [f.instrs[g].route for g in walks[:counts[N_WALKS], 0].tolist()]
        log.routes += [r.links for r in walked]
        log.serial += [r.serial_ns for r in walked]
        log.starts += walks[:counts[N_WALKS], 1].tolist()
    for st, row, began in zip(engine.cores, state.tolist(), starts.tolist(), strict=True):
        st.pc, st.clock, st.busy, st.blocked, done, st.wait_slot, st.wait_store, wait = row[:8]
        st.done = bool(done)
        st.wait_count = f.instrs[wait] if wait >= 0 else None
        if program.inferences:
            st.starts = {i: t for i, t in enumerate(began) if t >= 0}
    engine.arrival[:] = arrival[:-1].tolist()
    engine.memory.counts = {c: times[signals[i]:signals[i] + tally[i]].tolist()
                            for i, c in enumerate(f.counters)}
    ran = order[:counts[N_ORDER]].tolist()
    if program.written:  # a stream: its loads and stores checked in the order they ran
        for g, at in zip(ran, order_at[:len(ran)].tolist(), strict=True):
            if f.instrs[g].region is not None:
                engine.now = at
                engine.memory.check_race(f.instrs[g])
    engine.order[:] = itemgetter(*ran)(f.instrs) if len(ran) > 1 else [f.instrs[g] for g in ran]
    rep = engine.report
    (rep.shared_reads, rep.shared_read_bytes, rep.shared_writes, rep.shared_write_bytes,
     rep.signals, rep.waits) = counts[N_LOADS:N_WAITS + 1].tolist()
    if proto.counts:
        rep.messages, rep.message_bytes = counts[N_MESSAGES:N_MESSAGE_BYTES + 1].tolist()
    if traced:
        rows = sent[:counts[N_SENT], :4 if pim else 2].tolist()
        engine.trace.sent[:] = map(tuple, rows)
        assert engine.spans is not None
        engine.spans[:] = _spans(spans[:counts[N_SPANS]].tolist(), f)


def _spans(records: list[list[int]], f: Flat) -> list[object]:
    """`_loop`'s span records as `Trace.recorded` holds them (a compute's as its start and
    `Instr.span`)."""
    if f.spans is None:
        f.spans = [ins.span or ins.spanned() if ins.kind == COMPUTE else None
                   for ins in f.instrs]
    computes, instrs = f.spans, f.instrs
    return [(start, computes[g]) if code == SPAN_COMPUTE
            else _span(code, cid, start, dur, instrs[g]) for code, cid, start, dur, g in records]


def _span(code: int, cid: int, start: int, dur: int, ins: Instr) -> object:
    """The `Trace.spans` tuple of a record other than a compute's."""
    if code == SPAN_OPERANDS:
        return (cid, start, dur, "blocked", BLOCKED, ins.waiting)
    if code == SPAN_POST:
        return (cid, start, dur, "blocked", BLOCKED, post_wait(ins))
    if code == SPAN_RENDEZVOUS:
        return (cid, start, dur, "rendezvous", COMM, rendezvous_note(ins))
    if code == SPAN_STORES:
        return (cid, start, dur, "blocked", BLOCKED, STORES_WAIT)
    if code == SPAN_QUEUE:
        return (cid, start, dur, "blocked", BLOCKED, QUEUE)
    if code == SPAN_COUNT:
        return (cid, start, dur, "blocked", BLOCKED, count_wait(ins))
    if code == SPAN_RECEIVE:
        return (cid, start, dur, "spat.channel_receive", COMM, RECEIVE_NOTE)
    if code == SPAN_HANDSHAKE:
        return (cid, start, dur, "spat.channel_send", COMM, handshake_note(ins))
    if code == SPAN_GLOBAL:
        return (cid, start, dur, "blocked", BLOCKED, GLOBAL_QUEUE)
    return (cid, start, dur, ins.label, MEMORY, ins.where)


(N_ORDER, N_LOADS, N_LOAD_BYTES, N_STORES, N_STORE_BYTES, N_SIGNALS, N_WAITS, N_SPANS, N_SENT,
 N_WALKS, N_SEQ, N_MESSAGES, N_MESSAGE_BYTES, N_FREE, N_COUNTS) = range(15)
"""`_loop`'s counters: the order's length, the report's shared-memory and counter figures,
the span, message and link-walk records written, the last event's sequence number;
pimsim-nn's protocol: the messages and their bytes (`PimsimNN.counts`), when the global
memory is free."""


@kernel
def _push(heap: Heap, counts: np.ndarray, time: int,
          rank: int, event: int, payload: int) -> None:
    """An event (`Engine.push`): among those at one time, lower rank first, then in the
    order they were pushed."""
    counts[N_SEQ] += 1
    heapq.heappush(heap, (time, rank, counts[N_SEQ], event, payload))


@kernel
def _record(spans: np.ndarray, counts: np.ndarray, code: int, cid: int, start: int,
            duration: int, g: int) -> None:
    """A span record (`SPAN_*`) of instruction `g`."""
    row = spans[counts[N_SPANS]]
    row[0], row[1], row[2], row[3], row[4] = code, cid, start, duration, g
    counts[N_SPANS] += 1


HOP, RENDEZVOUS, CONTENTION, QUEUED, TRACED, STREAM, BUFFERED, LOGGED, PIMSIM = range(9)
"""`_loop`'s settings (`cfg`): the mesh's hop, `SimOptions.rendezvous_ns`,
`link_contention`, `shared_queueing`, `trace`, whether the program is a stream, whether
sends are buffered, whether link walks are logged (`Mesh.log`), and whether the protocol
is pimsim-nn's (`PimsimNN`)."""


@kernel
def _inject(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
            mesh: tuple[np.ndarray, ...], cfg: tuple[int, ...], g: int, at: int,
            arrival: int, traced: int, nbytes: int) -> int:
    """Message `g` injected at `at` arrives at `arrival` (-1: walk its links first;
    pimsim-nn's protocol records it as arrived at `traced`, of `nbytes`); returns the core
    waiting for it, no longer waiting (-1: none). A buffered message whose receive is not
    posted yet waits for it (`_core` delivers it)."""
    msg, peer, slot, links, link_ids, serial, transfer = (
        prog[7], prog[9], prog[10], prog[11], prog[12], prog[13], prog[14])
    state, arrived, sent, counts, walks = out[0], out[1], out[3], out[5], out[10]
    if arrival < 0:
        if cfg[LOGGED]:
            walks[counts[N_WALKS], 0] = g
            walks[counts[N_WALKS], 1] = at
            counts[N_WALKS] += 1
        free, hop = mesh[2], cfg[HOP]
        head, ser = at - hop, serial[g]
        for j in range(links[g], links[g + 1]):
            head += hop
            link = link_ids[j]
            if free[link] > head:
                head = free[link]
            free[link] = head + ser
        arrival = transfer[g] + head - (links[g + 1] - links[g] - 1) * hop
    m = msg[g]
    if cfg[BUFFERED] and mesh[10][m] >= 0:
        mesh[11][m] = arrival
        return -1
    if cfg[TRACED]:
        sent[counts[N_SENT], 0] = m
        sent[counts[N_SENT], 1] = at
        sent[counts[N_SENT], 2] = traced
        sent[counts[N_SENT], 3] = nbytes
        counts[N_SENT] += 1
    v = slot[g]
    arrived[v] = arrival
    k = peer[g]
    if state[k, CORE_SLOT] == v:
        state[k, CORE_SLOT] = -1
        return k
    return -1


@kernel
def _launch(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
            mesh: tuple[np.ndarray, ...], heap: Heap,
            cfg: tuple[int, ...], g: int, at: int, now: int) -> None:
    """Message `g` leaves at `at`, onto the links (an `INJECT` event) or
    straight to its receiver, which runs next at `now` if it waits for it."""
    links = prog[11]
    if cfg[CONTENTION] and links[g] < links[g + 1]:
        _push(heap, out[5], at, prog[8][g], INJECT, g)
        return
    k = _inject(prog, out, mesh, cfg, g, at, at + prog[14][g], 0, 0)
    if k >= 0:
        _push(heap, out[5], now, 0, RUN, k)


@kernel
def _handshake(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
               mesh: tuple[np.ndarray, ...], heap: Heap,
               cfg: tuple[int, ...], k: int, g: int, posted: int, now: int) -> None:
    """Rendezvous: core `k`'s send `g` waits for its receive posted at `posted`,
    pays the rendezvous, and leaves."""
    state, spans, counts = out[0], out[2], out[5]
    cid, clock, rz = prog[1][k], state[k, CORE_CLOCK], cfg[RENDEZVOUS]
    if posted > clock:
        if cfg[TRACED]:
            _record(spans, counts, SPAN_POST, cid, clock, posted - clock, g)
        state[k, CORE_BLOCKED] += posted - clock
        clock = posted
    if rz:
        if cfg[TRACED]:
            _record(spans, counts, SPAN_RENDEZVOUS, cid, clock, rz, g)
        state[k, CORE_BUSY] += rz
        clock += rz
    state[k, CORE_CLOCK] = clock
    _launch(prog, out, mesh, heap, cfg, g, clock, now)


@kernel
def _access(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
            mesh: tuple[np.ndarray, ...], heap: Heap,
            cfg: tuple[int, ...], k: int, g: int, start: int, now: int) -> None:
    """Core `k`'s load, store or counter access `g` from `start`; a store wakes the
    loads waiting for it, a signal the waits it satisfies."""
    state, spans, counts = out[0], out[2], out[5]
    cid, cost, clock = prog[1][k], prog[4][g], state[k, CORE_CLOCK]
    if start > clock:
        if cfg[TRACED]:
            _record(spans, counts, SPAN_QUEUE, cid, clock, start - clock, g)
        state[k, CORE_BLOCKED] += start - clock
    if cfg[TRACED]:
        _record(spans, counts, SPAN_MEMORY, cid, start, cost, g)
    state[k, CORE_BUSY] += cost
    state[k, CORE_CLOCK] = start + cost
    kd = prog[3][g]
    if kd >= SIGNAL:  # counters carry no data: not part of the numerics
        if kd == SIGNAL:
            counts[N_SIGNALS] += 1
            _signalled(prog, out, mesh, heap, g, start + cost, now)
        else:
            counts[N_WAITS] += 1
        return
    _accessed(prog, out, mesh, heap, g, start + cost, now)


@kernel
def _accessed(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
              mesh: tuple[np.ndarray, ...], heap: Heap, g: int, end: int, now: int) -> None:
    """Access `g` (a load, store or pimsim-nn's compute on the global memory) done at
    `end`: in the order, counted; a store wakes the loads waiting for it."""
    state, counts = out[0], out[5]
    out[4][counts[N_ORDER]] = g
    out[7][counts[N_ORDER]] = now
    counts[N_ORDER] += 1
    kd = prog[3][g]
    if kd == LOAD:
        counts[N_LOADS] += 1
        counts[N_LOAD_BYTES] += prog[18][g]
    if kd != STORE:
        return
    counts[N_STORES] += 1
    counts[N_STORE_BYTES] += prog[18][g]
    sid = prog[17][g]
    done, first, after = mesh[3], mesh[4], mesh[6]
    done[sid] = end
    w = first[sid]
    first[sid] = -1
    while w >= 0:
        state[w, CORE_STORE] = -1
        _push(heap, counts, now, 0, RUN, w)
        w = after[w]


@kernel
def _signalled(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
               mesh: tuple[np.ndarray, ...], heap: Heap, g: int, end: int, now: int) -> None:
    """Signal `g` completed at `end`; the cores parked on its
    counter whose threshold it reaches run again."""
    state, counts, tally, times = out[0], out[5], out[8], out[9]
    first, last, after = mesh[7], mesh[8], mesh[9]
    c = prog[20][g]
    base = prog[22][c]
    i = base + tally[c]
    while i > base and times[i - 1] > end:  # `bisect.insort`
        times[i] = times[i - 1]
        i -= 1
    times[i] = end
    tally[c] += 1
    prev, w = -1, first[c]
    while w >= 0:
        nxt = after[w]
        need = prog[21][state[w, CORE_COUNT]]
        if tally[c] >= need:
            state[w, CORE_WAKE] = times[base + need - 1]
            _push(heap, counts, max(now, state[w, CORE_CLOCK]), 0, RUN, w)
            if prev < 0:
                first[c] = nxt
            else:
                after[prev] = nxt
            if last[c] == w:
                last[c] = prev
        else:
            prev = w
        w = nxt


@kernel
def _counter_ready(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
                   mesh: tuple[np.ndarray, ...], k: int, g: int, traced: int) -> bool:
    """Whether core `k`'s wait `g` has its count (the core
    blocks until the signal that made it completes); False parks the core on the counter."""
    state, spans, counts, tally, times = out[0], out[2], out[5], out[8], out[9]
    cid, clock = prog[1][k], state[k, CORE_CLOCK]
    if state[k, CORE_COUNT] == g and state[k, CORE_WAKE] > clock:  # woken by a signal
        if traced:
            _record(spans, counts, SPAN_COUNT, cid, clock, state[k, CORE_WAKE] - clock, g)
        state[k, CORE_BLOCKED] += state[k, CORE_WAKE] - clock
        clock = state[k, CORE_CLOCK] = state[k, CORE_WAKE]
    state[k, CORE_COUNT] = -1
    c, need = prog[20][g], prog[21][g]
    if tally[c] >= need:  # a threshold of 0 or less is always reached
        if need > 0 and times[prog[22][c] + need - 1] > clock:
            at = times[prog[22][c] + need - 1]
            if traced:
                _record(spans, counts, SPAN_COUNT, cid, clock, at - clock, g)
            state[k, CORE_BLOCKED] += at - clock
            state[k, CORE_CLOCK] = at
        return True
    state[k, CORE_COUNT] = g
    _park(mesh[7], mesh[8], mesh[9], c, k)
    return False


@kernel
def _park(first: np.ndarray, last: np.ndarray, after: np.ndarray, key: int, k: int) -> None:
    """Core `k` queued last among the cores waiting on `key` (a store, a counter): `first`
    and `last` per key, `after` per core, so that they wake in the order they parked."""
    if first[key] < 0:
        first[key] = k
    else:
        after[last[key]] = k
    last[key], after[k] = k, -1


@kernel
def _stores_ready(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
                  mesh: tuple[np.ndarray, ...], k: int, g: int, traced: int) -> bool:
    """Whether the stores core `k`'s load or store `g` reads are done (the core blocks
    until the last); False parks the core on the first not done."""
    state, spans, counts = out[0], out[2], out[5]
    done, first, last, after = mesh[3], mesh[4], mesh[5], mesh[6]
    clock = ready = state[k, CORE_CLOCK]
    for j in range(prog[15][g], prog[15][g + 1]):
        sid = prog[16][j]
        if done[sid] < 0:
            state[k, CORE_STORE] = sid
            _park(first, last, after, sid, k)
            return False
        if done[sid] > ready:
            ready = done[sid]
    if ready > clock:
        if traced:
            _record(spans, counts, SPAN_STORES, prog[1][k], clock, ready - clock, g)
        state[k, CORE_BLOCKED] += ready - clock
        state[k, CORE_CLOCK] = ready
    return True


@kernel
def _resume(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...], k: int, g: int,
            traced: int) -> bool:
    """pimsim-nn: core `k`'s blocking receive `g` is done once its data is written (the
    clock advances to it); False parks the core on it."""
    state, spans, counts = out[0], out[2], out[5]
    v = state[k, CORE_SYNC]
    a = out[1][v]
    if a < 0:
        state[k, CORE_SLOT] = v
        return False
    clock = state[k, CORE_CLOCK]
    if a > clock:
        if traced:
            _record(spans, counts, SPAN_RECEIVE, prog[1][k], clock, a - clock, g)
        state[k, CORE_BLOCKED] += a - clock
        state[k, CORE_CLOCK] = a
    state[k, CORE_SYNC] = -1
    return True


@kernel
def _pim_handshake(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
                   mesh: tuple[np.ndarray, ...], heap: Heap, cfg: tuple[int, ...], k: int,
                   g: int, posted: int, now: int) -> None:
    """pimsim-nn (`PimsimNN.handshake`): core `k`'s send `g` meets its receive posted at
    `posted`: the receiver's reply, the sender's read, the message on the sender's switch;
    the receiver's core continues once the data is written."""
    state, spans, counts = out[0], out[2], out[5]
    r, busy, after, nbytes = prog[9][g], prog[25][g], prog[26][g], prog[28][g]
    reply, done, start, arrival = noc.pimsim_transfer(
        state[k, CORE_REQUEST], posted, state[r, CORE_SWITCH], state[k, CORE_SWITCH],
        prog[31][g], prog[30][g], busy, prog[29][g])
    state[r, CORE_SWITCH] = reply
    clock = state[k, CORE_CLOCK]
    if cfg[TRACED]:
        _record(spans, counts, SPAN_HANDSHAKE, prog[1][k], clock, done - clock, g)
    state[k, CORE_BLOCKED] += reply - clock
    state[k, CORE_BUSY] += busy + after
    state[k, CORE_CLOCK] = done + after
    state[k, CORE_SWITCH] = arrival
    counts[N_MESSAGES] += 1
    counts[N_MESSAGE_BYTES] += nbytes
    w = _inject(prog, out, mesh, cfg, g, start, arrival + prog[32][g], arrival, nbytes)
    if w >= 0:
        _push(heap, counts, now, 0, RUN, w)


@kernel
def _pim_access(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
                mesh: tuple[np.ndarray, ...], heap: Heap, cfg: tuple[int, ...], k: int,
                g: int, start: int, now: int) -> None:
    """pimsim-nn (`PimsimNN.access`): core `k`'s op `g` holds the global memory from
    `start` (>= its request); its local work runs around that, and the core's switch
    waits for the memory's response."""
    state, spans, counts = out[0], out[2], out[5]
    cid, cost, clock = prog[1][k], prog[4][g], state[k, CORE_CLOCK]
    request = clock + prog[24][g]
    wait = start - request
    if wait > 0:
        if cfg[TRACED]:
            _record(spans, counts, SPAN_GLOBAL, cid, request, wait, g)
        state[k, CORE_BLOCKED] += wait
    if cfg[TRACED]:
        _record(spans, counts, SPAN_MEMORY, cid, clock, cost + wait, g)
    state[k, CORE_BUSY] += cost
    state[k, CORE_CLOCK] = clock + cost + wait
    counts[N_FREE] = state[k, CORE_SWITCH] = start + prog[27][g]
    _accessed(prog, out, mesh, heap, g, clock + cost + wait, now)


@kernel
def _pim_step(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
              mesh: tuple[np.ndarray, ...], heap: Heap, cfg: tuple[int, ...], k: int,
              g: int, now: int) -> bool:
    """pimsim-nn: core `k`'s receive, send or global-memory op `g` (its register setup
    first); False when the core parks or its request goes to the heap."""
    state, counts = out[0], out[5]
    posted, parked = mesh[0], mesh[1]
    kd, m, before = prog[3][g], prog[7][g], prog[24][g]
    clock = state[k, CORE_CLOCK]
    if kd == RECV:  # posted after its setup; blocks until written
        state[k, CORE_CLOCK] = clock + before
        state[k, CORE_BUSY] += before
        s = parked[m]
        if s >= 0:
            parked[m] = -1
            _pim_handshake(prog, out, mesh, heap, cfg, s, prog[0][s] + state[s, CORE_PC],
                           clock + before, now)
            state[s, CORE_PC] += 1
            _push(heap, counts, state[s, CORE_CLOCK], 0, RUN, s)
        else:
            posted[m] = clock + before
        state[k, CORE_SYNC] = prog[10][g]
        return _resume(prog, out, k, g, cfg[TRACED])
    if kd == SEND:  # its request through the switch, then the reply (`_pim_handshake`)
        state[k, CORE_REQUEST], state[k, CORE_SWITCH] = noc.pimsim_request(
            clock + before, state[k, CORE_SWITCH], prog[30][g])
        state[k, CORE_CLOCK] = clock + before
        state[k, CORE_BUSY] += before
        if posted[m] < 0:
            parked[m] = k
            return False
        _pim_handshake(prog, out, mesh, heap, cfg, k, g, posted[m], now)
        return True
    if not _stores_ready(prog, out, mesh, k, g, cfg[TRACED]):
        return False
    at = max(state[k, CORE_CLOCK] + before, state[k, CORE_SWITCH])
    if cfg[QUEUED]:
        _push(heap, counts, at, prog[2][k], MEM, k)
        return False
    _pim_access(prog, out, mesh, heap, cfg, k, g, at, now)
    return True


@kernel
def _core(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...],
          mesh: tuple[np.ndarray, ...], heap: Heap,
          cfg: tuple[int, ...], k: int, now: int) -> None:
    """Run core `k` until it finishes, parks, or hands a shared-memory
    request to the heap."""
    begin, cids, kind, cost, waits, wait_slots, msg = (
        prog[0], prog[1], prog[3], prog[4], prog[5], prog[6], prog[7])
    mem_rank, starting = prog[2], prog[19]
    state, arrival, spans, order, counts, starts = out[0], out[1], out[2], out[4], out[5], out[6]
    posted, parked = mesh[0], mesh[1]
    unclaimed, buffered, pim = mesh[10], cfg[BUFFERED], cfg[PIMSIM]
    traced, leaves, stream = cfg[TRACED], cfg[RENDEZVOUS] == 0, cfg[STREAM]
    cid, base = cids[k], begin[k]
    if state[k, CORE_SYNC] >= 0:  # pimsim-nn: woken on its blocking receive
        if not _resume(prog, out, k, base + state[k, CORE_PC], traced):
            return
        state[k, CORE_PC] += 1
    n = begin[k + 1] - base
    clock, pc, busy = state[k, CORE_CLOCK], state[k, CORE_PC], 0
    while pc < n:
        g = base + pc
        if stream and starting[g] >= 0 and starts[k, starting[g]] < 0:
            starts[k, starting[g]] = clock
        if waits[g] < waits[g + 1]:
            ready = clock
            for j in range(waits[g], waits[g + 1]):
                a = arrival[wait_slots[j]]
                if a < 0:
                    state[k, CORE_CLOCK], state[k, CORE_PC] = clock, pc
                    state[k, CORE_SLOT] = wait_slots[j]
                    state[k, CORE_BUSY] += busy
                    return
                if a > ready:
                    ready = a
            if ready > clock:
                if traced:
                    _record(spans, counts, SPAN_OPERANDS, cid, clock, ready - clock, g)
                state[k, CORE_BLOCKED] += ready - clock
                clock = ready
        kd = kind[g]
        if kd == COMPUTE:
            order[counts[N_ORDER]] = g
            counts[N_ORDER] += 1
            if traced:
                _record(spans, counts, SPAN_COMPUTE, cid, clock, cost[g], g)
            clock += cost[g]
            busy += cost[g]
            pc += 1
            continue
        if pim:
            state[k, CORE_CLOCK], state[k, CORE_PC] = clock, pc
            state[k, CORE_BUSY] += busy
            busy = 0
            if not _pim_step(prog, out, mesh, heap, cfg, k, g, now):
                return
            clock = state[k, CORE_CLOCK]
            pc += 1
            continue
        m = msg[g]
        if kd == RECV and parked[m] < 0 and unclaimed[m] < 0:
            posted[m] = clock
            pc += 1
            continue
        if kd == SEND and (buffered or (leaves and 0 <= posted[m] <= clock)):
            if buffered and posted[m] < 0:  # its message waits for its receive
                unclaimed[m], mesh[11][m] = clock, -1
            _launch(prog, out, mesh, heap, cfg, g, clock, now)
            pc += 1
            continue
        state[k, CORE_CLOCK], state[k, CORE_PC] = clock, pc
        state[k, CORE_BUSY] += busy
        busy = 0
        if kd == RECV and parked[m] >= 0:  # its sender is parked
            s = parked[m]
            parked[m] = -1
            _handshake(prog, out, mesh, heap, cfg, s, begin[s] + state[s, CORE_PC], clock, now)
            state[s, CORE_PC] += 1
            _push(heap, counts, state[s, CORE_CLOCK], 0, RUN, s)
        elif kd == RECV:  # its buffered message was sent: delivered if off the links
            at = unclaimed[m]
            unclaimed[m] = -1
            if mesh[11][m] >= 0:
                w = _inject(prog, out, mesh, cfg, prog[23][m], at, mesh[11][m], 0, 0)
                if w >= 0:
                    _push(heap, counts, now, 0, RUN, w)
        elif kd == SEND:  # a rendezvous whose receive is not posted, or later
            if posted[m] < 0:
                parked[m] = k
                return
            _handshake(prog, out, mesh, heap, cfg, k, g, posted[m], now)
        else:  # a load, store or counter: the stores it reads, then the memory
            if kd == WAIT and not _counter_ready(prog, out, mesh, k, g, traced):
                return
            if not _stores_ready(prog, out, mesh, k, g, traced):
                return
            if cfg[QUEUED]:
                _push(heap, counts, state[k, CORE_CLOCK], mem_rank[k], MEM, k)
                return
            _access(prog, out, mesh, heap, cfg, k, g, state[k, CORE_CLOCK], now)
        clock = state[k, CORE_CLOCK]
        pc += 1
    state[k, CORE_CLOCK], state[k, CORE_PC] = clock, pc
    state[k, CORE_BUSY] += busy
    state[k, CORE_DONE] = 1


@kernel
def _loop(prog: tuple[np.ndarray, ...], out: tuple[np.ndarray, ...], messages: int,
          num_links: int, stores: int, cfg: tuple[int, ...]) -> None:
    """`Engine.run`: every core run from time 0, then the events in time order until
    none is left (cores not done then are deadlocked)."""
    begin, mem_rank = prog[0], prog[2]
    state, counts = out[0], out[5]
    cores = state.shape[0]
    mesh = (np.full(messages + 1, -1, np.int64),  # per message: when its receive was posted
            np.full(messages + 1, -1, np.int64),  # its parked sender
            np.zeros(num_links + 1, np.int64),  # per link: when it is free
            np.full(stores, -1, np.int64),  # per store: when it was done
            np.full(stores, -1, np.int64),  # the first load waiting for it
            np.full(stores, -1, np.int64),  # the last one
            np.full(cores, -1, np.int64),  # per core: the next load waiting for its store
            np.full(len(prog[22]), -1, np.int64),  # per counter: the first core parked on it
            np.full(len(prog[22]), -1, np.int64),  # the last one
            np.full(cores, -1, np.int64),  # per core: the next one parked on its counter
            np.full(messages + 1, -1, np.int64),  # per buffered message sent unclaimed: when
            np.full(messages + 1, -1, np.int64))  # it was injected, and arrives (-1: unknown)
    heap: Heap = [(0, 0, 0, 0, 0)]  # typed by its item (numba), then emptied
    heap.pop()
    for k in range(cores):
        _push(heap, counts, 0, 0, RUN, k)
    memory_free = 0
    while heap:
        time, _, _, event, k = heapq.heappop(heap)
        if event == INJECT:  # most events
            g = k
            k = _inject(prog, out, mesh, cfg, g, time, -1, 0, 0)
            if k < 0:  # else its receiver runs now (no event of rank 0 is left at this time)
                continue
        elif event == MEM and cfg[PIMSIM]:  # pimsim-nn: served in request order
            _pim_access(prog, out, mesh, heap, cfg, k, begin[k] + state[k, CORE_PC],
                        max(time, counts[N_FREE]), time)
            state[k, CORE_PC] += 1
        elif event == MEM:  # served if the memory is free, else asked again when it frees
            if memory_free > time:
                _push(heap, counts, memory_free, mem_rank[k], MEM, k)
                continue
            _access(prog, out, mesh, heap, cfg, k, begin[k] + state[k, CORE_PC], time, time)
            memory_free = state[k, CORE_CLOCK]
            state[k, CORE_PC] += 1
        _core(prog, out, mesh, heap, cfg, k, time)
