"""How the simulator's messages and global-memory requests behave: a protocol is a policy of
the event loop (`engine.Engine`), chosen by `SimOptions.model`.

`Mesh` is Raptor's chip. A receive is posted at the core's clock and costs nothing; a
`rendezvous` send waits for it to be posted (plus `rendezvous_ns`), a `buffered` one never
waits; the message then crosses `raptor.noc`'s cut-through links on its own (contended when
`link_contention`), and the value is ready at its receiver when it arrives.

`PimsimNN` is pimsim-nn's (docs/pimsim.md): a send asks the receiver with a one-flit request
and waits for its one-flit reply, reads its data from local memory, hands the message to its
core's switch and goes on; the switch of each core carries one message at a time, a message
of n bytes taking ceil(n / flit_bytes) times the one-flit latency of the pair (no link
contention); a receive blocks its core until the data is written. A global-memory request
leaves through the core's switch, behind its queued messages; the memory serves simultaneous
requests from the highest core id down. Op costs come from the exporter's `timings`.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from raptor import noc
from raptor.noc import FreeLinks, LinkLog, Network
from raptor.sim.program import Instr
from raptor.sim.report import BLOCKED, COMM, MEMORY
from raptor.sim.timing import OpTiming

if TYPE_CHECKING:
    from raptor.sim.engine import Core, Engine

RUN, INJECT, MEM = range(3)
"""The event loop's kinds: run a core, inject a message, serve a memory request."""


def post_wait(ins: Instr) -> str:
    """The trace's reason when send `ins` waits for its receive to be posted."""
    return ins.note or ins.noted(f"waiting for core {ins.peer} to post channel {ins.channel}")


def rendezvous_note(ins: Instr) -> str:
    """The trace's detail of send `ins`'s rendezvous."""
    return f"to core {ins.peer} channel {ins.channel}"


class Mesh:
    """Raptor's mesh: posted receives, pipelined flits, link contention.

    A message is its send instruction: the k-th send of a channel meets the channel's k-th
    receive (`Instr.partner`, numbered `Instr.msg`), so a run keeps per message only what
    has happened (a posted receive's time, a parked sender, an unclaimed buffered message)
    and no pairing queues (this is the loop's hottest code: a message whose receive was
    posted by its send costs one Python call, `inject`, the engine posting and launching
    it itself, see `posts`, and running its woken receiver without an event when that is
    the next one)."""

    memory_computes = False
    """Whether a compute with a global-memory `timing` is queued like a load."""

    counts = False
    """Whether the protocol counts the messages in the report itself (else every send
    executed is one, counted at the end: nothing per message)."""

    walks_traced = True
    """Whether a rendezvous message is recorded in `sent` as its links are walked, and walked
    iff link contention is on and its route has links (`Trace.walked`)."""

    posts = True
    """Whether a receive only posts (`post`) and a rendezvous send only waits for it: the
    engine then runs the commonest cases itself (`Engine.run_core`), without a call."""

    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.opts = engine.opts
        self.target = engine.target
        n = engine.program.messages
        self.posted = [-1] * n
        """Per message: when its receive was posted (-1: not yet)."""
        self.parked: list[Core | None] = [None] * n
        """Per message: its sender, waiting for the receive (rendezvous)."""
        self.unclaimed: dict[int, tuple[Instr, list[int]]] = {}
        """Buffered messages sent before their receive was posted: the send and [inject,
        arrival] (arrival -1 while on the links)."""
        self.core_of = {st.cid: st for st in engine.cores}
        self.arrival = engine.arrival
        self.net = Network(engine.target, "raptor")
        self.buffered = self.opts.mode == "buffered"
        trace = engine.trace
        links = FreeLinks(self.net.num_links, log=trace.log)  # `inject` walks its free times
        self.free, self.hop = links.free, self.net.hop_ns
        trace.log.hop = self.hop
        self.log: LinkLog | None = None
        """Where `inject` logs its walks: the trace's log in buffered mode (an unclaimed
        message is recorded in `sent` after later ones); else the trace fills it when read,
        from `sent` (`Trace.walked`), and the loop writes nothing more a message."""
        if engine.opts.trace:
            if self.buffered or not self.walks_traced:
                self.log = trace.log
            elif self.opts.link_contention:
                trace.walked = engine.program.routes
        self.contention = self.opts.link_contention
        self.rendezvous = self.opts.rendezvous_ns
        self.heap = engine.heap
        self.sent = engine.trace.sent if engine.opts.trace else None

    # ---- receives ------------------------------------------------------------------
    def receive(self, st: Core, ins: Instr) -> bool:
        """A receive at the core's clock; False parks the core (`resume` continues it).
        Here it posts the receive (`post`) and never parks."""
        m = ins.msg
        sender = self.parked[m]
        if sender is not None:
            self.parked[m] = None
            self.handshake(sender, sender.prog[sender.pc], st.clock)
            sender.pc += 1
            self.e.push(sender.clock, RUN, sender)
        elif m in self.unclaimed:
            send, (inject, arrival) = self.unclaimed.pop(m)
            if arrival >= 0:
                self.deliver(send, inject, arrival)
        else:
            self.posted[m] = st.clock
        return True

    post = receive
    """Post a receive at the core's clock: meet a waiting sender or message."""

    def resume(self, st: Core) -> bool:
        """Whether a core parked in a receive may go on past it."""
        return True

    # ---- sends ---------------------------------------------------------------------
    def send(self, st: Core, ins: Instr) -> bool:
        """Start a send at the core's clock; False when the sender must wait for the
        rendezvous (the matching `post` completes it)."""
        m = ins.msg
        posted = self.posted[m]
        if self.buffered:
            if posted < 0:
                self.unclaimed[m] = (ins, [st.clock, -1])
            self.launch(ins, st.clock)
            return True
        if posted < 0:
            self.parked[m] = st
            return False
        self.handshake(st, ins, posted)
        return True

    def handshake(self, st: Core, ins: Instr, posted_at: int) -> None:
        """Rendezvous: the sender waits for the posted receive, pays `rendezvous_ns`, then
        injects and continues."""
        clock = st.clock
        if posted_at > clock:
            self.e.block(st, posted_at, post_wait(ins))
            clock = posted_at
        rz = self.rendezvous
        if rz:
            if self.e.spans is not None:
                self.e.spans.append((st.cid, clock, rz, "rendezvous", COMM,
                                     rendezvous_note(ins)))
            st.busy += rz
            clock += rz
        st.clock = clock
        self.launch(ins, clock)

    def launch(self, ins: Instr, at: int) -> None:
        """The message leaves its sender at `at`: onto the links (an `INJECT` event, granted
        in time order), or straight to its receiver."""
        if self.contention and ins.route.links:
            e = self.e
            e.seq += 1
            heapq.heappush(self.heap, (at, ins.rank, e.seq, INJECT, ins))
            return
        self.deliver(ins, at, at + ins.route.transfer_ns)

    def inject(self, ins: Instr, at: int, arrival: int = -1, traced: int = -1,
               nbytes: int = -1) -> Core | None:
        """The message injected at `at` is at its receiver at `arrival` (traced as arrived
        at `traced` if given: pimsim-nn's receiver writes it later, and as `nbytes` if
        given); returns the core waiting for it, no longer waiting (the caller wakes it).
        A buffered message whose receive is not posted yet waits for it (`post` delivers
        it).

        Without `arrival` (an `INJECT` event) it takes the links first: cut-through
        (`raptor.noc`), granted in injection-time order (simultaneous ones by
        `raptor.noc.inject_rank`), the walk `FreeLinks.walk` with contention, inline (the
        loop's hottest code: one call a message) and without its busy counts, which
        nothing of a run reads."""
        if arrival < 0:
            r, hop, free, log = ins.route, self.hop, self.free, self.log
            links, ser = r.links, r.serial_ns  # never empty here (`launch`)
            if log is not None:
                log.routes.append(links)
                log.serial.append(ser)
                log.starts.append(at)
            head = at - hop
            for link in links:
                head += hop
                f = free[link]
                if f > head:
                    head = f
                free[link] = head + ser
            arrival = r.transfer_ns + head - (len(links) - 1) * hop
        if self.buffered:
            waiting = self.unclaimed.get(ins.msg)
            if waiting is not None:
                waiting[1][1] = arrival
                return None
        if self.sent is not None:
            self.sent.append((ins.msg, at) if traced < 0 else (ins.msg, at, traced, nbytes))
        v = ins.slots_out[0]  # the receiver's value
        self.arrival[v] = arrival
        st = self.core_of[ins.peer]
        if st.wait_slot == v:
            st.wait_slot = -1
            return st
        return None

    def deliver(self, ins: Instr, inject: int, arrival: int, traced: int = -1,
                nbytes: int = -1) -> None:
        """`inject` at a known arrival, and a core waiting for the message runs next at the
        current time."""
        st = self.inject(ins, inject, arrival, traced, nbytes)
        if st is not None:
            e = self.e
            e.seq += 1
            heapq.heappush(self.heap, (e.now, 0, e.seq, RUN, st))

    # ---- global memory -------------------------------------------------------------
    def request(self, st: Core, ins: Instr) -> tuple[int, int]:
        """When a load/store/counter access asks for the memory, and its rank among
        requests at that time (lower first; `raptor.noc.memory_rank`)."""
        return st.clock, noc.memory_rank(st.cid, self.target.num_cores)

    def access(self, st: Core, ins: Instr, start: int) -> None:
        """Perform the access from `start` (>= its request) and advance the core."""
        self.e.memory.access(st, ins, start)

    def serve(self, st: Core, ins: Instr) -> bool:
        """A queued request: served if the memory is free, else asked again when it frees
        (False), so the requests waiting then are served from the lowest core."""
        e = self.e
        mem = e.memory
        if mem.free > e.now:
            e.push(mem.free, MEM, st, noc.memory_rank(st.cid, self.target.num_cores))
            return False
        self.access(st, ins, e.now)
        mem.free = st.clock
        return True


class PimsimNN(Mesh):
    """pimsim-nn's protocol: handshake, per-flit path cost, switch serialization, blocking
    receives, `ld`/`st` through the switch."""

    memory_computes = True
    counts = True
    walks_traced = False  # its rendezvous messages skip the links
    posts = False

    def timing(self, ins: Instr) -> OpTiming:
        return ins.timing if ins.timing is not None else OpTiming(nbytes=ins.nbytes)

    def flit_ns(self, src: int, dst: int) -> int:
        """One flit from `src` to `dst` over free links (pimsim-nn's NoC table entry)."""
        return self.target.flit_ns(src, dst)

    def receive(self, st: Core, ins: Instr) -> bool:
        """Post the receive after its register setup; the core blocks until the data is
        written."""
        before = self.target.ns(self.timing(ins).before)
        st.clock += before
        st.busy += before
        self.post(st, ins)
        st.sync = ins.slots_out[0]
        if self.resume(st):
            return True
        st.wait_slot = st.sync
        return False

    def resume(self, st: Core) -> bool:
        """The blocking receive is done once its data is written: advance the clock."""
        a = self.arrival[st.sync]
        if a < 0:
            return False
        if a > st.clock:
            self.e.block(st, a, "receive (pimsim-nn: blocks until written)",
                         "spat.channel_receive", COMM)
        st.sync = -1
        return True

    def send(self, st: Core, ins: Instr) -> bool:
        """The send's request leaves through the sender's switch; the sender then waits for
        the reply (`handshake`)."""
        before = self.target.ns(self.timing(ins).before)
        st.request, st.switch_free = noc.pimsim_request(st.clock + before, st.switch_free,
                                                        self.flit_ns(st.cid, ins.peer))
        st.clock += before
        st.busy += before
        return super().send(st, ins)

    def handshake(self, sender: Core, ins: Instr, posted_at: int) -> None:
        """The receiver replies when both the request and the receive are there; the
        sender reads its data and queues the message on its switch; the receiver's core
        continues once the data is written."""
        ns = self.target.ns
        assert ins.partner is not None
        receiver = self.core_of[ins.peer]
        src, dst = sender.cid, receiver.cid
        tm = self.timing(ins)
        rtm = self.timing(ins.partner)  # its blocking receive
        reply, done, start, arrival = noc.pimsim_transfer(
            sender.request, posted_at, receiver.switch_free, sender.switch_free,
            self.flit_ns(dst, src), self.flit_ns(src, dst), ns(tm.busy),
            noc.flits(self.target, tm.nbytes))
        receiver.switch_free = reply
        if self.e.spans is not None:
            self.e.spans.append((src, sender.clock, done - sender.clock, "spat.channel_send",
                                 COMM, f"to core {dst} channel {ins.channel} (pimsim-nn "
                                 "handshake)"))
        sender.blocked += reply - sender.clock
        sender.busy += ns(tm.busy) + ns(tm.after)
        sender.clock = done + ns(tm.after)
        sender.switch_free = arrival
        self.e.report.messages += 1
        self.e.report.message_bytes += tm.nbytes
        self.deliver(ins, start, arrival + ns(rtm.busy) + ns(rtm.after), arrival, tm.nbytes)

    def request(self, st: Core, ins: Instr) -> tuple[int, int]:
        """The request leaves through the core's switch, behind its queued messages;
        pimsim-nn serves simultaneous requests from the highest core id down."""
        at = max(st.clock + self.target.ns(self.timing(ins).before), st.switch_free)
        return at, self.target.num_cores - st.cid

    def access(self, st: Core, ins: Instr, start: int) -> None:
        """The op holds the global memory for its `memory` cycles from `start` (>= its
        request); its local work runs around that."""
        e, tm, ns = self.e, self.timing(ins), self.target.ns
        request = st.clock + ns(tm.before)
        wait = start - request
        e.order.append(ins)
        if wait > 0:
            if e.spans is not None:
                e.spans.append((st.cid, request, wait, "blocked", BLOCKED,
                                "global memory queue"))
            st.blocked += wait
        cost = ns(tm.total) if ins.timing is not None else ins.cost
        if e.spans is not None:
            e.spans.append((st.cid, st.clock, cost + wait, ins.label, MEMORY, ins.where))
        st.busy += cost
        st.clock += cost + wait
        e.memory.free = start + ns(tm.memory) if ins.timing is not None else start + cost
        st.switch_free = e.memory.free  # the switch waits for the memory's response
        e.memory.accessed(ins, st.clock)

    def serve(self, st: Core, ins: Instr) -> bool:
        self.access(st, ins, max(self.e.now, self.e.memory.free))
        return True


PROTOCOLS: dict[str, type[Mesh]] = {"raptor": Mesh, "pimsim-nn": PimsimNN}
"""`SimOptions.model` -> its protocol."""
