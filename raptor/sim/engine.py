"""The discrete-event loop: cores, channels, the mesh and shared memory, run compiled
(`raptor.sim.loop`: the semantics below, under either protocol of `raptor.sim.protocol`).

It decides when things happen, not what they compute (values never depend on time): it
records the order of computes and memory accesses for `numerics.execute` (a send of a
region is taken there when its value is made, a send of a whole value does nothing).

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

from dataclasses import dataclass, field
from typing import Any

from raptor.sim import loop
from raptor.sim.errors import Deadlock, SimError
from raptor.sim.program import RECV, SEND, SIGNAL, WAIT, Instr, Program, value_name
from raptor.sim.protocol import PROTOCOLS
from raptor.sim.report import CoreStats, SimReport, Trace
from raptor.sim.shared import SharedMemory
from raptor.target import Target

MODES = ("rendezvous", "buffered")
MODELS = tuple(PROTOCOLS)


@dataclass(frozen=True)
class SimOptions:
    """How communication and memory behave.

    `rendezvous` sends wait for the matching receive to be posted (plus `rendezvous_ns`);
    `buffered` sends never wait. `link_contention` serialises messages sharing a mesh link
    (cut-through); `shared_queueing` serves one shared-memory request at a time chip-wide.

    `model` names the protocol (`raptor.sim.protocol`): `"pimsim-nn"` follows pimsim-nn's
    handshake, per-core switch and blocking receives instead (see `SimOptions.pimsim`), with
    op costs from the `timings` given to `Simulator` (an exporter's pimsim-nn figures),
    else from the target.
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
class Core:
    cid: int
    prog: list[Instr]
    done: bool
    pc: int = 0
    clock: int = 0
    busy: int = 0
    blocked: int = 0
    wait_slot: int = -1
    """The slot of the received value the core is parked on (-1: none)."""
    wait_store: int = -1
    wait_count: Instr | None = None
    """The `pim.wait` this core is parked on (the compiled loop's, for `why`)."""
    starts: dict[int, int] = field(default_factory=dict)
    """Stream programs: when this core began each inference's iteration."""


class Engine:
    def __init__(self, program: Program, target: Target, options: SimOptions) -> None:
        self.program = program
        self.target = target
        self.opts = options
        self.cores = [Core(c, prog, not prog) for c, prog in program.cores.items()]
        self.arrival = [-1] * program.slots[0]
        """Per received value's slot (`Instr.wait_slots`), when it arrived (-1: not yet)."""
        self.now = 0
        """The time of the access being checked for a race (`SharedMemory.check_race`)."""
        self.trace = Trace(ends=program.ends, received=program.received, arrival=self.arrival)
        self.spans: list[Any] | None = self.trace.recorded if options.trace else None
        """Where the run records its spans (`Trace.recorded`: a compute's as (start,
        `Instr.span`), any other as its `Trace.spans` tuple)."""
        self.report = SimReport(0, [], options=options.to_dict())
        self.order: list[Instr] = []
        """Computes and memory accesses in the order the loop performed them (sends of
        regions follow what they view: `Program.views`)."""
        if options.model == "pimsim-nn" and program.inferences and any(
                i.kind in (SIGNAL, WAIT) for prog in program.cores.values() for i in prog):
            # the exporter makes counters pimsim-nn's sync/wait (one-flit messages on event
            # registers), which this model does not play; a one-stage stream has none
            raise SimError("the pimsim-nn model runs latency programs and streams without "
                           "READY/FREE counters (one stage), not a stream with counters")
        self.proto = PROTOCOLS[options.model](self)
        self.memory = SharedMemory(self)

    def run(self) -> None:
        """Run to the end, by the compiled loop (`raptor.sim.loop`)."""
        f = loop.flat(self.program, self.target.num_cores)
        if f is not None:
            loop.run(self, f)
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
            lag = self.program.lags
            rep.inference_end_ns = [max((st.starts.get(k + 1, st.clock) for st in active
                                         for k in (n + lag.get(st.cid, 0),)
                                         if k in st.starts), default=latency)
                                    for n in range(m)]
        for st in self.cores:
            body_ops, reads, read_bytes, sends, send_bytes = self.program.executed(st.cid, st.pc)
            if not self.proto.counts:  # a message leaves when its send is executed
                rep.messages += sends
                rep.message_bytes += send_bytes
            rep.cores.append(CoreStats(
                st.cid, st.busy, st.blocked, latency - st.clock, st.clock, st.pc,
                body_ops, self.program.tiles[st.cid]))
            rep.ops_executed += st.pc
            rep.body_ops_executed += body_ops
            rep.input_reads += reads
            rep.input_read_bytes += read_bytes

    def why(self, st: Core) -> str:
        """One line: where `st` is stuck and on what."""
        ins = st.prog[st.pc]
        head = f"core {st.cid} blocked at {ins.where} {ins.name}"
        if st.wait_slot >= 0:
            recv = next(i for i in st.prog if i.kind == RECV and i.slots_out[0] == st.wait_slot)
            src, ch = recv.peer, recv.channel
            assert recv.value is not None
            return (f"{head} waiting for {value_name(recv.value)} from core {src} channel "
                    f"{ch}: core {src} has not sent it")
        if st.wait_store >= 0:
            sc, sins = self.program.stores[st.wait_store]
            return f"{head} waiting for the pim.store at {sins.where} on core {sc}"
        if st.wait_count is not None:
            assert ins.counter is not None
            (buf, k), have = ins.counter, len(self.memory.counts.get(ins.counter, []))
            return (f"{head} (inference {ins.inference}) waiting for {value_name(buf)}[{k}] to "
                    f"reach {ins.threshold} (it is {have})")
        assert ins.kind == SEND and ins.value is not None  # the only other way to park
        return (f"{head} {value_name(ins.value)} to core {ins.peer} channel {ins.channel}: "
                f"core {ins.peer} has not posted the matching receive")
