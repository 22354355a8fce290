"""The discrete-event loop: cores, channels, the mesh and shared memory.

It decides when things happen, not what they compute (values never depend on time): it
records the order of computes, sends and memory accesses for `numerics.execute`.

Each core runs ahead on its own clock while it only touches its own state; anything shared
(a link, the shared-memory queue) becomes a heap event at its own time, so contended
resources are granted in time order. A core waiting for data, a rendezvous partner, a store
or a counter parks until the event that resolves it; an empty heap with parked cores is a
deadlock, detected instead of hanging.

Streams (`pim.stream`): `pim.signal` and `pim.wait` are one shared-memory access each, queued
like loads and stores; a wait first parks until its counter reaches the threshold. A load
inside a stream must read data its own inference stored, else `Race`.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from raptor.ir.core import Value
from raptor.noc import FreeLinks, Network, Route
from raptor.sim.errors import Deadlock, Race, SimError
from raptor.sim.program import (
    COMPUTE,
    LOAD,
    RECV,
    SEND,
    SIGNAL,
    STORE,
    WAIT,
    Box,
    Instr,
    Program,
    overlap,
    value_name,
)
from raptor.sim.report import BLOCKED, BUSY, COMM, MEMORY, QUEUE, CoreStats, SimReport, Trace
from raptor.sim.timing import OpTiming
from raptor.target import Target

MODES = ("rendezvous", "buffered")
MODELS = ("raptor", "pimsim-nn")
_RUN, _INJECT, _MEM = range(3)


@dataclass(frozen=True)
class SimOptions:
    """How communication and memory behave.

    `rendezvous` sends wait for the matching receive to be posted (plus `rendezvous_ns`);
    `buffered` sends never wait. `link_contention` serialises messages sharing a mesh link
    (cut-through); `shared_queueing` serves one shared-memory request at a time chip-wide.

    `model="pimsim-nn"` follows pimsim-nn's communication instead (see `SimOptions.pimsim`):
    a send asks the receiver with a one-flit request and waits for its one-flit reply, reads
    its data from local memory, hands the message to its core's switch and goes on; the
    switch of each core carries one message at a time, a message of n bytes taking
    ceil(n / flit_bytes) times the one-flit latency of the pair (no link contention); a
    receive blocks its core until the data is written. Op costs come from the `timings`
    given to `Simulator` (an exporter's pimsim-nn figures), else from the target.
    """

    mode: str = "rendezvous"
    link_contention: bool = True
    shared_queueing: bool = True
    rendezvous_ns: int = 0
    trace: bool = True
    model: str = "raptor"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SimError(f"unknown send mode {self.mode!r} (known: {', '.join(MODES)})")
        if self.model not in MODELS:
            raise SimError(f"unknown timing model {self.model!r} (known: {', '.join(MODELS)})")
        if self.model == "pimsim-nn" and (self.mode != "rendezvous" or self.link_contention):
            raise SimError("the pimsim-nn model is rendezvous without link contention")
        rz = self.rendezvous_ns
        if isinstance(rz, bool) or not isinstance(rz, int) or rz < 0:
            raise SimError(f"rendezvous_ns must be a non-negative integer, got {rz!r}")

    @classmethod
    def ideal(cls, trace: bool = True) -> SimOptions:
        """What the scheduler's ASAP estimate assumes: no waiting for partners, links or
        memory, so a compute starts at max(core free, inputs ready)."""
        return cls(mode="buffered", link_contention=False, shared_queueing=False, trace=trace)

    @classmethod
    def pimsim(cls, trace: bool = True) -> SimOptions:
        """pimsim-nn's model: its handshake and per-core switch, no link contention, a
        serialized global memory, blocking receives (pair with an exporter's timings)."""
        return cls(link_contention=False, trace=trace, model="pimsim-nn")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in
                               ("mode", "link_contention", "shared_queueing", "rendezvous_ns")}
        if self.model != "raptor":
            out["model"] = self.model
        return out


@dataclass(slots=True, eq=False)
class _Core:
    cid: int
    prog: list[Instr]
    done: bool
    pc: int = 0
    clock: int = 0
    busy: int = 0
    blocked: int = 0
    arrival: dict[Value, int] = field(default_factory=dict)
    wait_value: Value | None = None
    wait_store: int = -1
    sync: Value | None = None
    """pimsim-nn model: the value a posted (blocking) receive waits for."""
    switch_free: int = 0
    """pimsim-nn model: when this core's switch has sent its last message."""
    wait_count: Instr | None = None
    """The `pim.wait` this core is parked on."""
    wake: int = 0
    """When the signal that woke a parked wait completed."""
    starts: dict[int, int] = field(default_factory=dict)
    """Stream programs: when this core began each inference's iteration."""


@dataclass(slots=True, eq=False)
class _Msg:
    src: int
    dst: int
    channel: int
    nbytes: int
    route: Route
    inject: int = 0
    arrival: int | None = None
    target: tuple[_Core, Value] | None = None
    request: int = 0
    """pimsim-nn model: when the send's request reaches the receiver."""


@dataclass
class _Channel:
    """FIFO pairing state of one (source, destination, channel)."""

    posted: deque[tuple[_Core, Value, int]] = field(default_factory=deque)
    unclaimed: deque[_Msg] = field(default_factory=deque)
    senders: deque[tuple[_Core, _Msg]] = field(default_factory=deque)


class Engine:
    def __init__(self, program: Program, target: Target, options: SimOptions) -> None:
        self.program = program
        self.target = target
        self.opts = options
        self.cores = [_Core(c, prog, not prog) for c, prog in program.cores.items()]
        self.heap: list[tuple[int, int, int, int, Any]] = []
        self.seq = 0
        self.now = 0
        self.chans = [_Channel() for _ in range(program.channels)]
        self.mem_free = 0
        self.store_done: dict[int, int] = {}
        self.store_waiters: dict[int, list[_Core]] = {}
        self.trace = Trace()
        self.spans: list[tuple[int, int, int, str, str, str]] | None = \
            self.trace.spans if options.trace else None
        self.net = Network(target)
        self.links = FreeLinks(self.net.num_links, held=self.trace.links if options.trace
                               else None)
        self.report = SimReport(0, [], options=options.to_dict())
        self.order: list[Instr] = []
        """Computes, sends and memory accesses in the order the loop performed them."""
        self.pim = options.model == "pimsim-nn"
        if self.pim and program.inferences:
            raise SimError("the pimsim-nn model runs latency programs only, not a pim.stream")
        self.counts: dict[tuple[Value, int], list[int]] = {}
        """Per counter, the sorted times its signals completed (count at t: how many <= t)."""
        self.count_waiters: dict[tuple[Value, int], list[_Core]] = {}
        self.tags: dict[Value, dict[Box, int]] = {}
        """Per shared buffer a stream stores into: the inference each stored box holds."""

    # ---- event loop ----------------------------------------------------------------
    def push(self, time: int, kind: int, payload: Any, rank: int = 0) -> None:
        """An event at `time`; among events at one time, lower `rank` first, then in the
        order they were pushed."""
        self.seq += 1
        heapq.heappush(self.heap, (time, rank, self.seq, kind, payload))

    def block(self, st: _Core, until: int, why: str, label: str = "blocked",
              kind: str = BLOCKED) -> None:
        """Core `st` waits from its clock until `until` (blocked time, and a trace span)."""
        if self.spans is not None:
            self.spans.append((st.cid, st.clock, until - st.clock, label, kind, why))
        st.blocked += until - st.clock
        st.clock = until

    def run(self) -> None:
        for st in self.cores:
            self.push(0, _RUN, st)
        heap, pop = self.heap, heapq.heappop
        while heap:
            time, _, _, kind, payload = pop(heap)
            self.now = time
            if kind == _RUN:
                self.run_core(payload)
            elif kind == _INJECT:
                self.inject(payload)
            else:
                self.serve(payload)
        self.finish()
        stuck = [st for st in self.cores if not st.done]
        if stuck:
            raise Deadlock(self.report.latency_ns, [self.why(st) for st in stuck], self.report)

    def finish(self) -> None:
        rep = self.report
        latency = max((st.clock for st in self.cores), default=0)
        rep.latency_ns = latency
        m = self.program.inferences
        if m:
            active = [st for st in self.cores if st.starts]
            rep.inference_start_ns = [min((st.starts[n] for st in active if n in st.starts),
                                          default=latency) for n in range(m)]
            rep.inference_end_ns = [max((st.starts.get(n + 1, st.clock) for st in active
                                         if n in st.starts), default=latency)
                                    for n in range(m)]
        for st in self.cores:
            done = st.prog[:st.pc]
            rep.cores.append(CoreStats(
                st.cid, st.busy, st.blocked, latency - st.clock, st.clock, st.pc,
                sum(i.body_ops for i in done), self.program.tiles[st.cid]))
            rep.ops_executed += st.pc
            rep.body_ops_executed += rep.cores[-1].body_ops
            for i in done:
                for buf, sl in i.params:  # loads of function inputs inside bodies
                    rep.input_reads += 1
                    rep.input_read_bytes += buf[sl].nbytes

    def why(self, st: _Core) -> str:
        """One line: where `st` is stuck and on what."""
        ins = st.prog[st.pc]
        head = f"core {st.cid} blocked at {ins.where} {ins.name}"
        if st.wait_value is not None:
            recv = next(i for i in st.prog if i.kind == RECV and i.value is st.wait_value)
            src, ch = recv.peer, recv.channel
            return (f"{head} waiting for {value_name(st.wait_value)} from core {src} channel "
                    f"{ch}: core {src} has not sent it")
        if st.wait_store >= 0:
            sc, sins = self.program.stores[st.wait_store]
            return f"{head} waiting for the pim.store at {sins.where} on core {sc}"
        if st.wait_count is not None:
            assert ins.counter is not None
            (buf, k), have = ins.counter, len(self.counts.get(ins.counter, []))
            return (f"{head} (inference {ins.inference}) waiting for {value_name(buf)}[{k}] to "
                    f"reach {ins.threshold} (it is {have})")
        assert ins.kind == SEND and ins.value is not None  # the only other way to park
        return (f"{head} {value_name(ins.value)} to core {ins.peer} channel {ins.channel}: "
                f"core {ins.peer} has not posted the matching receive")

    # ---- one core ------------------------------------------------------------------
    def run_core(self, st: _Core) -> None:
        """Run `st` until it finishes, parks, or hands a shared-memory request to the heap.
        Computes only touch the core's own state, so they run in a tight local loop."""
        if st.sync is not None:
            if not self.resume_pim(st):
                return
            st.pc += 1
        prog, arrival, spans, cid = st.prog, st.arrival, self.spans, st.cid
        record = self.order.append
        n = len(prog)
        clock, pc, busy = st.clock, st.pc, 0
        while pc < n:
            ins = prog[pc]
            if ins.first >= 0 and ins.first not in st.starts:
                st.starts[ins.first] = clock
            if ins.waits:
                ready = clock
                for v in ins.waits:
                    a = arrival.get(v)
                    if a is None:
                        st.clock, st.pc, st.wait_value = clock, pc, v
                        st.busy += busy
                        return
                    if a > ready:
                        ready = a
                if ready > clock:
                    if spans is not None:
                        what = ", ".join(value_name(v) for v in ins.waits)
                        spans.append((cid, clock, ready - clock, "blocked", BLOCKED,
                                      f"waiting for {what}"))
                    st.blocked += ready - clock
                    clock = ready
            kind = ins.kind
            if kind == COMPUTE and (not self.pim or ins.timing is None or not ins.timing.memory):
                record(ins)
                if spans is not None:
                    spans.append((cid, clock, ins.cost, ins.label, BUSY, ins.where))
                clock += ins.cost
                busy += ins.cost
                pc += 1
                continue
            st.clock, st.pc = clock, pc
            st.busy += busy
            busy = 0
            if kind == RECV:
                if self.pim:
                    if not self.receive_pim(st, ins):
                        return
                else:
                    self.post(st, ins)
            elif kind == SEND:
                record(ins)
                if not self.send(st, ins):
                    return
            elif kind == WAIT and not self.counter_ready(st, ins):
                return
            else:
                if not self.memory_ready(st, ins):
                    return
                at, rank = st.clock, 0
                if self.pim:
                    # the request leaves through the core's switch, behind its queued messages;
                    # pimsim-nn serves simultaneous requests from the highest core id down
                    at = max(at + self.target.ns(self.timing(ins).before), st.switch_free)
                    rank = self.target.num_cores - st.cid
                if self.opts.shared_queueing:
                    self.push(at, _MEM, st, rank)
                    return
                (self.access_pim if self.pim else self.access)(st, ins, at)
            clock = st.clock
            pc += 1
        st.clock, st.pc = clock, pc
        st.busy += busy
        st.done = True

    # ---- channels ------------------------------------------------------------------
    def post(self, st: _Core, ins: Instr) -> None:
        """A receive is posted at the core's clock and costs nothing; the value is ready when
        its message arrives."""
        v = ins.value
        assert v is not None
        chan = self.chans[ins.chan]
        if chan.senders:
            sender, msg = chan.senders.popleft()
            msg.target = (st, v)
            (self.handshake_pim if self.pim else self.handshake)(sender, msg, st.clock)
            sender.pc += 1
            self.push(sender.clock, _RUN, sender)
        elif chan.unclaimed:
            msg = chan.unclaimed.popleft()
            msg.target = (st, v)
            if msg.arrival is not None:
                self.deliver(msg)
        else:
            chan.posted.append((st, v, st.clock))

    def send(self, st: _Core, ins: Instr) -> bool:
        """Start a send at the core's clock; False when the sender must wait for the
        rendezvous (the matching `post` completes it)."""
        msg = (self.request_pim(st, ins) if self.pim
               else _Msg(st.cid, ins.peer, ins.channel, ins.nbytes, ins.route))
        chan = self.chans[ins.chan]
        posted = chan.posted.popleft() if chan.posted else None
        if posted is not None:
            msg.target = (posted[0], posted[1])
        if self.opts.mode == "buffered":
            if posted is None:
                chan.unclaimed.append(msg)
            self.launch(msg, st.clock)
            return True
        if posted is None:
            chan.senders.append((st, msg))
            return False
        (self.handshake_pim if self.pim else self.handshake)(st, msg, posted[2])
        return True

    def handshake(self, st: _Core, msg: _Msg, posted_at: int) -> None:
        """Rendezvous: the sender waits for the posted receive, pays `rendezvous_ns`, then
        injects and continues."""
        meet = max(st.clock, posted_at)
        rz = self.opts.rendezvous_ns
        if meet > st.clock:
            self.block(st, meet, f"waiting for core {msg.dst} to post channel {msg.channel}")
        if rz:
            if self.spans is not None:
                self.spans.append((st.cid, meet, rz, "rendezvous", COMM,
                                   f"to core {msg.dst} channel {msg.channel}"))
            st.busy += rz
        st.clock = meet + rz
        self.launch(msg, st.clock)

    def launch(self, msg: _Msg, at: int) -> None:
        msg.inject = at
        self.report.messages += 1
        self.report.message_bytes += msg.nbytes
        if self.opts.link_contention and msg.route.links:
            self.push(at, _INJECT, msg)
            return
        msg.arrival = at + msg.route.transfer_ns
        if msg.target is not None:
            self.deliver(msg)

    def inject(self, msg: _Msg) -> None:
        """Cut-through over the links (`raptor.noc`), granted in injection-time order."""
        msg.arrival = self.net.cut_through(msg.route, msg.inject, self.links)
        if msg.target is not None:
            self.deliver(msg)

    def deliver(self, msg: _Msg, traced: int | None = None) -> None:
        """The value is at its receiver at `msg.arrival` (traced as arrived at `traced` if
        given: pimsim-nn's receiver writes it later); wake a core waiting for it."""
        assert msg.target is not None and msg.arrival is not None
        if self.spans is not None:
            self.trace.messages.append((msg.src, msg.dst, msg.channel, msg.nbytes, msg.inject,
                                        msg.arrival if traced is None else traced))
        st, v = msg.target
        st.arrival[v] = msg.arrival
        if st.wait_value is v:
            st.wait_value = None
            self.push(self.now, _RUN, st)

    # ---- pimsim-nn communication ---------------------------------------------------
    def timing(self, ins: Instr) -> OpTiming:
        return ins.timing if ins.timing is not None else OpTiming(nbytes=ins.nbytes)

    def flit_ns(self, src: int, dst: int) -> int:
        return self.target.transfer_ns(self.target.flit_bytes, src, dst)

    def request_pim(self, st: _Core, ins: Instr) -> _Msg:
        """The send's request leaves through the sender's switch; the sender then waits for
        the reply (`handshake_pim`)."""
        tm = self.timing(ins)
        before = self.target.ns(tm.before)
        msg = _Msg(st.cid, ins.peer, ins.channel, tm.nbytes, ins.route)
        msg.request = max(st.clock + before, st.switch_free) + self.flit_ns(st.cid, ins.peer)
        st.switch_free = msg.request + 1  # the receiver's handler holds the switch 1 ns
        st.clock += before
        st.busy += before
        return msg

    def receive_pim(self, st: _Core, ins: Instr) -> bool:
        """Post the receive after its register setup; the core blocks until the data is
        written (False parks it; `resume_pim` continues)."""
        before = self.target.ns(self.timing(ins).before)
        st.clock += before
        st.busy += before
        self.post(st, ins)
        st.sync = ins.value
        if self.resume_pim(st):
            return True
        st.wait_value = ins.value
        return False

    def resume_pim(self, st: _Core) -> bool:
        """The blocking receive is done once its data is written: advance the clock."""
        v = st.sync
        assert v is not None
        a = st.arrival.get(v)
        if a is None:
            return False
        if a > st.clock:
            self.block(st, a, "receive (pimsim-nn: blocks until written)",
                       "spat.channel_receive", COMM)
        st.sync = None
        return True

    def handshake_pim(self, sender: _Core, msg: _Msg, posted_at: int) -> None:
        """The receiver replies when both the request and the receive are there; the
        sender reads its data and queues the message on its switch; the receiver's core
        continues once the data is written."""
        ns = self.target.ns
        assert msg.target is not None
        receiver = msg.target[0]
        src, dst = sender.cid, receiver.cid
        tm = self.timing(sender.prog[sender.pc])
        rtm = self.timing(receiver.prog[receiver.pc])  # its blocking receive
        reply = max(msg.request, posted_at, receiver.switch_free) + self.flit_ns(dst, src)
        receiver.switch_free = reply
        done = reply + ns(tm.busy)
        if self.spans is not None:
            self.spans.append((src, sender.clock, done - sender.clock, "spat.channel_send",
                               COMM, f"to core {dst} channel {msg.channel} (pimsim-nn "
                               "handshake)"))
        sender.blocked += reply - sender.clock
        sender.busy += ns(tm.busy) + ns(tm.after)
        sender.clock = done + ns(tm.after)
        start = max(done, sender.switch_free)
        arrival = start + -(-msg.nbytes // self.target.flit_bytes) * self.flit_ns(src, dst)
        sender.switch_free = arrival
        msg.inject = start
        msg.arrival = arrival + ns(rtm.busy) + ns(rtm.after)
        self.report.messages += 1
        self.report.message_bytes += msg.nbytes
        self.deliver(msg, arrival)

    # ---- shared memory -------------------------------------------------------------
    def counter_ready(self, st: _Core, ins: Instr) -> bool:
        """A wait whose counter has reached its threshold (by the core's clock, or later:
        then the core blocks until the signal completes); False parks the core until a
        signal on the counter."""
        assert ins.counter is not None
        if st.wait_count is ins and st.wake > st.clock:  # woken: blocked until the signal
            self.block(st, st.wake, f"waiting for {ins.label} >= {ins.threshold}")
        st.wait_count = None
        need, times = ins.threshold, self.counts.get(ins.counter, [])
        if len(times) >= need:  # a threshold of 0 or less is always reached
            if need > 0 and times[need - 1] > st.clock:
                self.block(st, times[need - 1], f"waiting for {ins.label} >= {need}")
            return True
        st.wait_count = ins
        self.count_waiters.setdefault(ins.counter, []).append(st)
        return False

    def signalled(self, ins: Instr, end: int) -> None:
        """A signal completed at `end`: count it and wake the cores it may satisfy."""
        assert ins.counter is not None
        times = self.counts.setdefault(ins.counter, [])
        bisect.insort(times, end)
        waiters = self.count_waiters.get(ins.counter)
        if not waiters:
            return
        keep = []
        for w in waiters:
            wi = w.wait_count
            if wi is not None and len(times) >= wi.threshold:
                w.wake = times[wi.threshold - 1]
                self.push(max(self.now, w.clock), _RUN, w)
            else:
                keep.append(w)
        self.count_waiters[ins.counter] = keep

    def check_race(self, ins: Instr) -> None:
        """Inside a stream a store tags its box with its inference, and a load must read
        only boxes tagged with its own."""
        assert ins.region is not None
        buf, box = ins.region
        if buf not in self.program.written:
            return
        tags = self.tags.setdefault(buf, {})
        if ins.kind == STORE:
            tags[box] = ins.inference
            return
        seen = [(b, t) for b, t in tags.items() if overlap(box, b)]
        bad = next((t for _, t in seen if t != ins.inference), None)
        if bad is not None or not seen:
            held = f"inference {bad}'s data" if bad is not None else "nothing stored yet"
            raise Race(f"race on {value_name(buf)}: core {ins.core} at {ins.where} loads for "
                       f"inference {ins.inference} at {self.now} ns but the buffer holds "
                       f"{held} (a pim.wait missing or misplaced?)")

    def memory_ready(self, st: _Core, ins: Instr) -> bool:
        """A load waits for every overlapping store it depends on; False parks the core."""
        ready = st.clock
        for sid in ins.deps:
            done = self.store_done.get(sid)
            if done is None:
                st.wait_store = sid
                self.store_waiters.setdefault(sid, []).append(st)
                return False
            ready = max(ready, done)
        if ready > st.clock:
            self.block(st, ready, "waiting for stores to shared memory")
        return True

    def access(self, st: _Core, ins: Instr, start: int) -> None:
        """Perform a load/store starting at `start` (>= the core's clock) and advance it."""
        if start > st.clock:
            self.block(st, start, QUEUE)
        end = start + ins.cost
        if self.spans is not None:
            self.spans.append((st.cid, start, ins.cost, ins.label, MEMORY, ins.where))
        st.busy += ins.cost
        st.clock = end
        if ins.kind >= SIGNAL:  # counters carry no data: not part of the numerics
            if ins.kind == SIGNAL:
                self.report.signals += 1
                self.signalled(ins, end)
            else:
                self.report.waits += 1
            return
        if ins.region is not None:
            self.check_race(ins)
        self.order.append(ins)
        self.accessed(ins, end)

    def accessed(self, ins: Instr, end: int) -> None:
        """Count a load or store done at `end`; a store wakes the loads waiting for it."""
        rep = self.report
        if ins.kind == STORE:
            rep.shared_writes += 1
            rep.shared_write_bytes += ins.nbytes
            self.store_done[ins.store_id] = end
            for waiter in self.store_waiters.pop(ins.store_id, []):
                waiter.wait_store = -1
                self.push(self.now, _RUN, waiter)
        elif ins.kind == LOAD:
            rep.shared_reads += 1
            rep.shared_read_bytes += ins.nbytes

    def access_pim(self, st: _Core, ins: Instr, start: int) -> None:
        """pimsim-nn model: the op holds the global memory for its `memory` cycles from
        `start` (>= its request); its local work runs around that."""
        tm = self.timing(ins)
        ns = self.target.ns
        request = st.clock + ns(tm.before)
        wait = start - request
        self.order.append(ins)
        if wait > 0:
            if self.spans is not None:
                self.spans.append((st.cid, request, wait, "blocked", BLOCKED,
                                   "global memory queue"))
            st.blocked += wait
        cost = ns(tm.total) if ins.timing is not None else ins.cost
        if self.spans is not None:
            self.spans.append((st.cid, st.clock, cost + wait, ins.label, MEMORY, ins.where))
        st.busy += cost
        st.clock += cost + wait
        self.mem_free = start + ns(tm.memory) if ins.timing is not None else start + cost
        st.switch_free = self.mem_free  # the switch waits for the memory's response
        self.accessed(ins, st.clock)

    def serve(self, st: _Core) -> None:
        """A queued request, taken in request-time order: served when memory is free."""
        ins = st.prog[st.pc]
        if self.pim:
            self.access_pim(st, ins, max(self.now, self.mem_free))
        else:
            self.access(st, ins, max(st.clock, self.mem_free))
            self.mem_free = st.clock
        st.pc += 1
        self.run_core(st)
