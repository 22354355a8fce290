"""How the simulator's messages and global-memory requests behave: a protocol is a policy of
the event loop (`engine.Engine`), chosen by `SimOptions.model`.

`Mesh` is Raptor's chip, played by the compiled loop (`raptor.sim.loop`, which says how).

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
    """Raptor's mesh: posted receives, pipelined flits, link contention. The compiled loop
    (`raptor.sim.loop`) plays it; this holds what a run of it needs from the engine.

    A message is its send instruction: the k-th send of a channel meets the channel's k-th
    receive (`Instr.partner`, numbered `Instr.msg`), so a run keeps per message only what
    has happened (a posted receive's time, a parked sender, an unclaimed buffered message)
    and no pairing queues."""

    counts = False
    """Whether the protocol counts the messages in the report itself (else every send
    executed is one, counted at the end: nothing per message)."""

    walks_traced = True
    """Whether a rendezvous message is recorded in `sent` as its links are walked, and walked
    iff link contention is on and its route has links (`Trace.walked`)."""

    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.opts = engine.opts
        self.target = engine.target
        self.net = Network(engine.target, "raptor")
        self.hop = self.net.hop_ns
        trace = engine.trace
        FreeLinks(self.net.num_links, log=trace.log)  # the table the log's walks replay on
        trace.log.hop = self.hop
        self.log: LinkLog | None = None
        """Where the loop logs its walks: the trace's log in buffered mode (an unclaimed
        message is recorded in `sent` after later ones); else the trace fills it when read,
        from `sent` (`Trace.walked`), and the loop writes nothing more a message."""
        if engine.opts.trace:
            if self.opts.mode == "buffered" or not self.walks_traced:
                self.log = trace.log
            elif self.opts.link_contention:
                trace.walked = engine.program.routes


class PimsimNN(Mesh):
    """pimsim-nn's protocol: handshake, per-flit path cost, switch serialization, blocking
    receives, `ld`/`st` through the switch; played by the Python loop (`Engine.play`)."""

    counts = True
    walks_traced = False  # its rendezvous messages skip the links

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        n = engine.program.messages
        self.posted = [-1] * n
        """Per message: when its receive was posted (-1: not yet)."""
        self.parked: list[Core | None] = [None] * n
        """Per message: its sender, waiting for the receive."""
        self.core_of = {st.cid: st for st in engine.cores}
        self.arrival = engine.arrival
        self.heap = engine.heap
        self.sent = engine.trace.sent if engine.opts.trace else None

    def post(self, st: Core, ins: Instr) -> None:
        """Post a receive at the core's clock: meet a waiting sender."""
        m = ins.msg
        sender = self.parked[m]
        if sender is not None:
            self.parked[m] = None
            self.handshake(sender, sender.prog[sender.pc], st.clock)
            sender.pc += 1
            self.e.push(sender.clock, RUN, sender)
        else:
            self.posted[m] = st.clock

    def inject(self, ins: Instr, at: int, arrival: int, traced: int,
               nbytes: int) -> Core | None:
        """The message injected at `at` is at its receiver at `arrival` (traced as arrived
        at `traced`: the receiver writes it later, and as `nbytes`); returns the core
        waiting for it, no longer waiting (the caller wakes it)."""
        if self.sent is not None:
            self.sent.append((ins.msg, at, traced, nbytes))
        v = ins.slots_out[0]  # the receiver's value
        self.arrival[v] = arrival
        st = self.core_of[ins.peer]
        if st.wait_slot == v:
            st.wait_slot = -1
            return st
        return None

    def deliver(self, ins: Instr, inject: int, arrival: int, traced: int, nbytes: int) -> None:
        """`inject`, and a core waiting for the message runs next at the current time."""
        st = self.inject(ins, inject, arrival, traced, nbytes)
        if st is not None:
            e = self.e
            e.seq += 1
            heapq.heappush(self.heap, (e.now, 0, e.seq, RUN, st))

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
        posted = self.posted[ins.msg]
        if posted < 0:  # the matching `post` completes it
            self.parked[ins.msg] = st
            return False
        self.handshake(st, ins, posted)
        return True

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

    def serve(self, st: Core, ins: Instr) -> None:
        """A queued request: served when the memory is free."""
        self.access(st, ins, max(self.e.now, self.e.memory.free))


PROTOCOLS: dict[str, type[Mesh]] = {"raptor": Mesh, "pimsim-nn": PimsimNN}
"""`SimOptions.model` -> its protocol."""
