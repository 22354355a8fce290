"""How the simulator's messages and global-memory requests behave: a protocol is a policy of
the event loop (`engine.Engine`), chosen by `SimOptions.model`.

Both are played by the compiled loop (`raptor.sim.loop`, which says how); `Mesh` is Raptor's
chip.

`PimsimNN` is pimsim-nn's (docs/pimsim.md): a send asks the receiver with a one-flit request
and waits for its one-flit reply, reads its data from local memory, hands the message to its
core's switch and goes on; the switch of each core carries one message at a time, a message
of n bytes taking ceil(n / flit_bytes) times the one-flit latency of the pair (no link
contention); a receive blocks its core until the data is written. A global-memory request
leaves through the core's switch, behind its queued messages; the memory serves simultaneous
requests from the highest core id down (`raptor.noc.pimsim_memory_rank`). Op costs come
from the exporter's `timings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raptor.noc import LinkLog, Network
from raptor.sim.program import Instr
from raptor.sim.timing import OpTiming

if TYPE_CHECKING:
    from raptor.sim.engine import Engine

RUN, INJECT, MEM = range(3)
"""The event loop's kinds: run a core, inject a message, serve a memory request."""

RECEIVE_NOTE = "receive (pimsim-nn: blocks until written)"
"""The trace's detail of a blocking receive waiting for its data (pimsim-nn)."""

GLOBAL_QUEUE = "global memory queue"
"""The trace's detail of a request waiting for the global memory (pimsim-nn)."""


def post_wait(ins: Instr) -> str:
    """The trace's reason when send `ins` waits for its receive to be posted."""
    return ins.note or ins.noted(f"waiting for core {ins.peer} to post channel {ins.channel}")


def rendezvous_note(ins: Instr) -> str:
    """The trace's detail of send `ins`'s rendezvous."""
    return f"to core {ins.peer} channel {ins.channel}"


def handshake_note(ins: Instr) -> str:
    """The trace's detail of send `ins`'s pimsim-nn handshake."""
    return f"{rendezvous_note(ins)} (pimsim-nn handshake)"


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
        trace.log.table = (self.net.num_links, True)  # what the log's walks replay on
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
    receives, `ld`/`st` through the switch; played by the compiled loop
    (`raptor.sim.loop`'s `_pim_*` kernels, on the costs of `loop.pimsim`)."""

    counts = True
    walks_traced = False  # its rendezvous messages skip the links

    def timing(self, ins: Instr) -> OpTiming:
        """The op's costs: the exporter's, else a message's bytes alone."""
        return ins.timing if ins.timing is not None else OpTiming(nbytes=ins.nbytes)

    def flit_ns(self, src: int, dst: int) -> int:
        """One flit from `src` to `dst` over free links (pimsim-nn's NoC table entry)."""
        return self.target.flit_ns(src, dst)


PROTOCOLS: dict[str, type[Mesh]] = {"raptor": Mesh, "pimsim-nn": PimsimNN}
"""`SimOptions.model` -> its protocol."""
