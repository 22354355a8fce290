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

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raptor import noc
from raptor.ir.core import Value
from raptor.noc import FreeLinks, Network, Route
from raptor.sim.program import Instr
from raptor.sim.report import BLOCKED, COMM, MEMORY
from raptor.sim.timing import OpTiming

if TYPE_CHECKING:
    from raptor.sim.engine import Core, Engine

RUN, INJECT, MEM = range(3)
"""The event loop's kinds: run a core, inject a message, serve a memory request."""


@dataclass(slots=True, eq=False)
class Msg:
    src: int
    dst: int
    channel: int
    nbytes: int
    route: Route
    inject: int = 0
    arrival: int | None = None
    target: tuple[Core, Value] | None = None
    request: int = 0
    """pimsim-nn: when the send's request reaches the receiver."""


class Channel:
    """FIFO pairing state of one (source, destination, channel). Lists, not deques: a
    channel rarely holds more than one entry, and a run makes one Channel per channel."""

    __slots__ = ("posted", "senders", "unclaimed")

    def __init__(self) -> None:
        self.posted: list[tuple[Core, Value, int]] = []
        self.unclaimed: list[Msg] = []
        self.senders: list[tuple[Core, Msg]] = []


class Mesh:
    """Raptor's mesh: posted receives, pipelined flits, link contention."""

    memory_computes = False
    """Whether a compute with a global-memory `timing` is queued like a load."""

    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.opts = engine.opts
        self.target = engine.target
        self.chans = [Channel() for _ in range(engine.program.channels)]
        self.net = Network(engine.target, "raptor")
        self.links = FreeLinks(self.net.num_links, held=engine.trace.links
                               if engine.opts.trace else None)
        self.buffered = self.opts.mode == "buffered"
        self.contention = self.opts.link_contention

    # ---- receives ------------------------------------------------------------------
    def receive(self, st: Core, ins: Instr) -> bool:
        """A receive at the core's clock; False parks the core (`resume` continues it)."""
        self.post(st, ins)
        return True

    def resume(self, st: Core) -> bool:
        """Whether a core parked in a receive may go on past it."""
        return True

    def post(self, st: Core, ins: Instr) -> None:
        """Post a receive at the core's clock: pair it with a waiting sender or message."""
        v = ins.value
        assert v is not None
        chan = self.chans[ins.chan]
        if chan.senders:
            sender, msg = chan.senders.pop(0)
            msg.target = (st, v)
            self.handshake(sender, msg, st.clock)
            sender.pc += 1
            self.e.push(sender.clock, RUN, sender)
        elif chan.unclaimed:
            msg = chan.unclaimed.pop(0)
            msg.target = (st, v)
            if msg.arrival is not None:
                self.deliver(msg)
        else:
            chan.posted.append((st, v, st.clock))

    # ---- sends ---------------------------------------------------------------------
    def send(self, st: Core, ins: Instr) -> bool:
        """Start a send at the core's clock; False when the sender must wait for the
        rendezvous (the matching `post` completes it)."""
        msg = self.message(st, ins)
        chan = self.chans[ins.chan]
        posted = chan.posted.pop(0) if chan.posted else None
        if posted is not None:
            msg.target = (posted[0], posted[1])
        if self.buffered:
            if posted is None:
                chan.unclaimed.append(msg)
            self.launch(msg, st.clock)
            return True
        if posted is None:
            chan.senders.append((st, msg))
            return False
        self.handshake(st, msg, posted[2])
        return True

    def message(self, st: Core, ins: Instr) -> Msg:
        return Msg(st.cid, ins.peer, ins.channel, ins.nbytes, ins.route)

    def handshake(self, st: Core, msg: Msg, posted_at: int) -> None:
        """Rendezvous: the sender waits for the posted receive, pays `rendezvous_ns`, then
        injects and continues."""
        meet = max(st.clock, posted_at)
        rz = self.opts.rendezvous_ns
        if meet > st.clock:
            self.e.block(st, meet, f"waiting for core {msg.dst} to post channel {msg.channel}")
        if rz:
            if self.e.spans is not None:
                self.e.spans.append((st.cid, meet, rz, "rendezvous", COMM,
                                     f"to core {msg.dst} channel {msg.channel}"))
            st.busy += rz
        st.clock = meet + rz
        self.launch(msg, st.clock)

    def launch(self, msg: Msg, at: int) -> None:
        msg.inject = at
        rep = self.e.report
        rep.messages += 1
        rep.message_bytes += msg.nbytes
        route = msg.route
        if self.contention and route.links:
            self.e.push(at, INJECT, msg, noc.inject_rank(msg.src, msg.dst,
                                                      self.target.num_cores))
            return
        msg.arrival = at + route.transfer_ns
        if msg.target is not None:
            self.deliver(msg)

    def inject(self, msg: Msg) -> None:
        """Cut-through over the links (`raptor.noc`), granted in injection-time order
        (simultaneous ones by `raptor.noc.inject_rank`)."""
        r = msg.route
        msg.arrival = self.net.pass_links(r.links, r.serial_ns, r.transfer_ns, msg.inject,
                                          self.links)
        if msg.target is not None:
            self.deliver(msg)

    def deliver(self, msg: Msg, traced: int | None = None) -> None:
        """The value is at its receiver at `msg.arrival` (traced as arrived at `traced` if
        given: pimsim-nn's receiver writes it later); wake a core waiting for it."""
        assert msg.target is not None and msg.arrival is not None
        e = self.e
        if e.spans is not None:
            e.trace.messages.append((msg.src, msg.dst, msg.channel, msg.nbytes, msg.inject,
                                     msg.arrival if traced is None else traced))
        st, v = msg.target
        st.arrival[v] = msg.arrival
        if st.wait_value is v:
            st.wait_value = None
            e.push(e.now, RUN, st)

    # ---- global memory -------------------------------------------------------------
    def request(self, st: Core, ins: Instr) -> tuple[int, int]:
        """When a load/store/counter access asks for the memory, and its rank among
        requests at that time (lower first)."""
        return st.clock, 0

    def access(self, st: Core, ins: Instr, start: int) -> None:
        """Perform the access from `start` (>= its request) and advance the core."""
        self.e.memory.access(st, ins, start)

    def serve(self, st: Core, ins: Instr) -> None:
        """A queued request, taken in request-time order: served when memory is free."""
        mem = self.e.memory
        self.access(st, ins, max(st.clock, mem.free))
        mem.free = st.clock


class PimsimNN(Mesh):
    """pimsim-nn's protocol: handshake, per-flit path cost, switch serialization, blocking
    receives, `ld`/`st` through the switch."""

    memory_computes = True

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
        st.sync = ins.value
        if self.resume(st):
            return True
        st.wait_value = ins.value
        return False

    def resume(self, st: Core) -> bool:
        """The blocking receive is done once its data is written: advance the clock."""
        v = st.sync
        assert v is not None
        a = st.arrival.get(v)
        if a is None:
            return False
        if a > st.clock:
            self.e.block(st, a, "receive (pimsim-nn: blocks until written)",
                         "spat.channel_receive", COMM)
        st.sync = None
        return True

    def message(self, st: Core, ins: Instr) -> Msg:
        """The send's request leaves through the sender's switch; the sender then waits for
        the reply (`handshake`)."""
        tm = self.timing(ins)
        before = self.target.ns(tm.before)
        msg = Msg(st.cid, ins.peer, ins.channel, tm.nbytes, ins.route)
        msg.request, st.switch_free = noc.pimsim_request(st.clock + before, st.switch_free,
                                                         self.flit_ns(st.cid, ins.peer))
        st.clock += before
        st.busy += before
        return msg

    def handshake(self, sender: Core, msg: Msg, posted_at: int) -> None:
        """The receiver replies when both the request and the receive are there; the
        sender reads its data and queues the message on its switch; the receiver's core
        continues once the data is written."""
        ns = self.target.ns
        assert msg.target is not None
        receiver = msg.target[0]
        src, dst = sender.cid, receiver.cid
        tm = self.timing(sender.prog[sender.pc])
        rtm = self.timing(receiver.prog[receiver.pc])  # its blocking receive
        reply, done, start, arrival = noc.pimsim_transfer(
            msg.request, posted_at, receiver.switch_free, sender.switch_free,
            self.flit_ns(dst, src), self.flit_ns(src, dst), ns(tm.busy),
            noc.flits(self.target, msg.nbytes))
        receiver.switch_free = reply
        if self.e.spans is not None:
            self.e.spans.append((src, sender.clock, done - sender.clock, "spat.channel_send",
                                 COMM, f"to core {dst} channel {msg.channel} (pimsim-nn "
                                 "handshake)"))
        sender.blocked += reply - sender.clock
        sender.busy += ns(tm.busy) + ns(tm.after)
        sender.clock = done + ns(tm.after)
        sender.switch_free = arrival
        msg.inject = start
        msg.arrival = arrival + ns(rtm.busy) + ns(rtm.after)
        self.e.report.messages += 1
        self.e.report.message_bytes += msg.nbytes
        self.deliver(msg, arrival)

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

    def serve(self, st: Core, ins: Instr) -> None:
        self.access(st, ins, max(self.e.now, self.e.memory.free))


PROTOCOLS: dict[str, type[Mesh]] = {"raptor": Mesh, "pimsim-nn": PimsimNN}
"""`SimOptions.model` -> its protocol."""
