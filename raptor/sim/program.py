"""Compile scheduled IR into per-core instruction lists for the event loop.

Everything that depends on neither simulated time nor the inputs is done here, once: op costs
(`raptor.solver.costs`, the scheduler's own table), one template per distinct compute body
(`kernels.py`), which operands are received values (the only ones a core may wait for), the
crossbar tiles each core holds, channel pairing checks, and which stores each load must wait
for (a load reads shared memory only after every overlapping store elsewhere is done).

A `pim.stream` loop is unrolled here, one copy of its body per inference with `%n` and `%s`
bound and every value the body defines renamed per inference (the event loop and the numerics
key values by identity). Inside a stream, loads are ordered by `pim.wait` / `pim.signal`
counters alone, not by the stores they overlap: the engine checks that each load reads data
stored for its own inference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from raptor import noc
from raptor.ir.core import Block, Operation, Value
from raptor.ir.interpreter import bind_inputs, slices
from raptor.ir.module import Module
from raptor.ir.ops import (
    AllocSharedOp,
    ChannelReceiveOp,
    ChannelSendOp,
    ComputeOp,
    CoreBatchOp,
    CoreOp,
    FuncOp,
    LoadOp,
    ParallelInsertSliceOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    SignalOp,
    StoreOp,
    StreamOp,
    Strided,
    WaitOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import TensorType
from raptor.noc import NO_ROUTE, Network, Route
from raptor.sim.errors import SimError
from raptor.sim.kernels import Env, KernelError, Template, Templates, TypeInfo, info, resolve
from raptor.sim.timing import OpTiming
from raptor.solver.costs import body_cost_ns, op_cost_ns
from raptor.target import Target

if TYPE_CHECKING:
    from raptor.sim.loop import Flat

COMPUTE, SEND, RECV, LOAD, STORE, SIGNAL, WAIT = range(7)

MAX_SHARED_BYTES = 1 << 30
"""Host memory the simulated shared buffers (function inputs and `pim.alloc_shared`) may
take together: a larger program is refused before anything is allocated."""

Box = tuple[tuple[int, int, int], ...]
"""A strided region: per dimension (first index, count, step)."""

Move = tuple[int, int, "tuple[slice, ...]", "tuple[int, ...] | None"]
"""A send of a region in the numerics: the sender's slot, the receiver's, the region of the
value the message carries and the shape to give it (None: the region's). It holds no
reference to its send (no cycle: a dropped program is freed without the collector)."""


@dataclass(eq=False, slots=True)
class Instr:
    """One core-level op, ready to run. Channel fields are used by SEND/RECV, memory
    fields by LOAD/STORE, template fields by COMPUTE."""

    kind: int
    op: Operation
    label: str
    core: int = -1
    cost: int = 0
    access: tuple[np.ndarray, tuple[slice, ...], tuple[int, ...]] | None = None
    """LOAD/STORE: the shared buffer, the region it touches, and the value's shape (the
    numerics copy the region into the value or the value into the region)."""
    waits: tuple[Value, ...] = ()
    body_ops: int = 0
    peer: int = -1
    channel: int = -1
    msg: int = -1
    """SEND/RECV: the message's number (a send and its matching receive share it)."""
    rank: int = 0
    """SEND: its rank among messages injected at one time (`raptor.noc.inject_rank`)."""
    route: Route = NO_ROUTE
    value: Value | None = None
    """SEND: what is sent; RECV: what arrives; LOAD: what is loaded; STORE: what is stored."""
    nbytes: int = 0
    store_id: int = -1
    deps: tuple[int, ...] = ()
    cut: tuple[tuple[slice, ...], tuple[int, ...] | None] | None = None
    """For a send of a region: the region of the value the message carries (a view, DMA
    without a copy), and the message's shape if the view needs reshaping to it."""
    partner: Instr | None = None
    """A send's matching receive."""
    move: Move | None = None
    """SEND of a region: what the numerics do (`number_slots`; None: nothing)."""
    template: Template | None = None
    reads: tuple[Value, ...] = ()
    """The env values the compute reads (its inputs, then values from outside its body)."""
    defines: tuple[Value, ...] = ()
    params: tuple[tuple[np.ndarray, tuple[slice, ...]], ...] = ()
    """Per body `pim.load`: the function input and the slice tuple this instance reads."""
    timing: OpTiming | None = None
    """The op's time given from outside (`Simulator(timings=...)`), if any."""
    inference: int = -1
    """Inside a `pim.stream` loop: the inference this copy of the op works on."""
    first: int = -1
    """The inference whose iteration starts with this instruction (-1: none)."""
    region: tuple[Value, Box] | None = None
    """A load or store inside a stream: the buffer and box it touches (race checks)."""
    counter: tuple[Value, int] | None = None
    """SIGNAL/WAIT: the counter array and index."""
    threshold: int = 0
    """WAIT: the count to reach."""
    slots_in: tuple[int, ...] = ()
    """The numerics' slots of what it reads (`number_slots`)."""
    slots_out: tuple[int, ...] = ()
    """The numerics' slots of what it makes (RECV: of what arrives, the event loop's)."""
    wait_slots: tuple[int, ...] = ()
    """The slots of `waits` (the event loop keeps arrival times by slot)."""
    buffer_slot: int = -1
    """LOAD/STORE: the numerics' number of its buffer."""
    where_text: str | None = None
    """`where`, once asked (traces ask for it on every run)."""
    waiting_text: str | None = None
    """`waiting`, once asked."""
    note: str | None = None
    """A protocol's trace text for this instruction, made once (`noted`)."""
    span: tuple[int, int, str, str] | None = None
    """COMPUTE: the core, cost, name and detail of its trace span, made once (`spanned`)."""

    @property
    def where(self) -> str:
        w = self.where_text
        if w is None:
            w = self.where_text = self.op.where()
        return w

    @property
    def name(self) -> str:
        return self.op.name

    def spanned(self) -> tuple[int, int, str, str]:
        """`span`, made (a traced run records each compute as its start and this)."""
        self.span = span = (self.core, self.cost, self.label, self.where)
        return span

    def noted(self, text: str) -> str:
        """Keep `text` as `note` (a trace text asked for on every run)."""
        self.note = text
        return text

    @property
    def waiting(self) -> str:
        """The trace's reason when the op waits for its received operands."""
        w = self.waiting_text
        if w is None:
            w = self.waiting_text = "waiting for " + ", ".join(value_name(v) for v in self.waits)
        return w


@dataclass(eq=False)
class Program:
    """A whole scheduled module compiled for one target. `bind` sets the inputs of a run;
    nothing else changes between runs, so one compilation serves any number of them."""

    func: FuncOp
    cores: dict[int, list[Instr]]
    initial: dict[int, Env]
    """Each core's values before it runs: the weights it can read."""
    tiles: dict[int, int]
    """Crossbars of weights each core holds."""
    shared: dict[Value, np.ndarray]
    """Function inputs and `pim.alloc_shared` buffers (closures hold these arrays)."""
    outputs: list[Value]
    messages: int
    """Sends (each paired with one receive) in the program."""
    ends: list[tuple[int, int, int, int]]
    """Per message (`Instr.msg`): its source, destination, channel and bytes (a trace's
    messages are these and times)."""
    weights: dict[Value, np.ndarray] = field(default_factory=dict)
    stores: list[tuple[int, Instr]] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    """Per message (`Instr.msg`): its send's route (a trace's link reservations are these
    and times, `Trace.walked`)."""
    received: list[int] = field(default_factory=list)
    """Per message: the slot its arrival time is kept in during a run (`number_slots`,
    `Engine.arrival`; a trace reads its messages' arrivals there)."""
    values: list[Any] = field(default_factory=list)
    """The values of a run, by slot (`number_slots`)."""
    start: list[Any] = field(default_factory=list)
    """The values by slot before a run: the weights the cores read (None elsewhere)."""
    inferences: int = 0
    """The stream length of a pipeline program (0: a latency program)."""
    lags: dict[int, int] = field(default_factory=dict)
    """Per core of a stream, its loop's largest lag: inference n ends in its iteration
    n + lag."""
    written: set[Value] = field(default_factory=set)
    """Shared buffers the program stores into (loads from them inside a stream are checked
    against races)."""
    finished: dict[int, tuple[int, int, int, int, int]] = field(default_factory=dict)
    """`executed` of each core run to its end."""
    slots: tuple[int, int] = (0, 0)
    """How many value and buffer slots the numerics use (`number_slots`)."""
    views: dict[int, list[Move]] = field(default_factory=dict)
    """Per value slot, the sends of regions of it (`Instr.move`, in program order per core):
    the numerics take them when the value is made, not in the event loop's order."""
    initial_views: list[int] = field(default_factory=list)
    """The slots of `views` that hold a value before a run (`start`)."""
    plan: tuple[list[Instr], Any] | None = None
    """The last run's event-loop order and its numerics (`numerics.plan`), reused by a
    run of the same order."""
    flat: Flat | None = None
    """The instructions as the compiled event loop reads them (`loop.flat`), once made."""

    def bind(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> None:
        """Start a run: copy the inputs into their buffers, clear the others and the cores'
        values."""
        try:
            args = bind_inputs(self.func, inputs)
        except ValueError as e:
            raise SimError(str(e)) from None
        for a, x in zip(self.func.args, args, strict=True):
            np.copyto(self.shared[a], x)
        for v, buf in self.shared.items():
            if v not in self.func.args:
                buf.fill(0)
        self.values = self.start.copy()

    def executed(self, core: int, pc: int) -> tuple[int, int, int, int, int]:
        """What the first `pc` instructions of `core` execute: body ops, loads of function
        inputs inside bodies and their bytes, sends and their bytes (a finished core's
        figures are kept)."""
        done = self.finished.get(core)
        if done is not None and pc == len(self.cores[core]):
            return done
        ran = self.cores[core][:pc]
        sends = [i.nbytes for i in ran if i.kind == SEND]
        got = (sum(i.body_ops for i in ran), sum(len(i.params) for i in ran),
               sum(buf[sl].nbytes for i in ran for buf, sl in i.params), len(sends), sum(sends))
        if pc == len(self.cores[core]):
            self.finished[core] = got
        return got

    def output_data(self) -> list[np.ndarray]:
        """The returned buffers' final contents (copies)."""
        return [np.array(self.shared[v] if v in self.shared else self.weights[v])
                for v in self.outputs]


def _trimmed(sl: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    """`sl`, a region of an array of `shape`, with the dimensions it takes whole as `:` and
    trailing ones dropped: the same view, taken in about half the time (a send of a region
    takes one on every run, 21,660 a run of ResNet-18's latency program)."""
    out = [slice(None) if s.start == 0 and s.step == 1 and s.stop == n else s
           for s, n in zip(sl, shape, strict=True)]
    while len(out) > 1 and out[-1] == slice(None):
        out.pop()
    return tuple(out)


def number_slots(program: Program) -> tuple[int, int]:
    """Number every (core, value) an instruction reads, makes or waits for (`Instr.slots_in`,
    `slots_out`, `wait_slots`; a send makes its receiver's value) and every buffer a load or
    store touches (`Instr.buffer_slot`); returns how many of each and fills
    `Program.start`. Values are keyed by core because one `pim.core_batch` body runs on
    several cores. A value read before anything on its core made it is refused here: the
    numerics would find no value there.

    A message carrying all of its value makes no copy and no view, so in the numerics its
    receiver's value is the sender's (`data`: what reads it name, found through forwarding
    chains) and the send does nothing there (`Instr.move` None); the event loop keeps one
    arrival slot per received value (`slots_out` of sends and receives, `wait_slots`)."""
    values: dict[tuple[int, Value], int] = {}
    buffers: dict[Value, int] = {}
    start: dict[int, Any] = {}
    sent: dict[tuple[int, Value], tuple[int, Value]] = {}
    views: dict[int, list[Move]] = {}
    received = [-1] * program.messages
    for core, prog in program.cores.items():
        for ins in prog:
            if ins.kind == SEND and ins.cut is None:
                assert ins.value is not None and ins.partner is not None
                assert ins.partner.value is not None
                sent[ins.peer, ins.partner.value] = (core, ins.value)

    def slot(core: int, v: Value) -> int:
        return values.setdefault((core, v), len(values))

    def data(core: int, v: Value) -> int:
        key = (core, v)
        while key in sent:
            key = sent[key]
        return slot(*key)

    at = values.setdefault  # `slot` inlined in the loop below (half a million calls)
    for core, prog in program.cores.items():
        initial = program.initial[core]
        made: set[Value] = set()
        for ins in prog:
            kind = ins.kind
            reads: Sequence[Value] = ()
            if ins.waits:
                ins.wait_slots = tuple([at((core, v), len(values)) for v in ins.waits])
            if kind == COMPUTE:
                reads = ins.reads
                ins.slots_in = tuple([data(core, v) for v in reads])
                ins.slots_out = tuple([at((core, v), len(values)) for v in ins.defines])
                made.update(ins.defines)
            elif kind == SEND:
                assert ins.value is not None and ins.partner is not None
                assert ins.partner.value is not None
                reads = (ins.value,)
                ins.slots_out = (at((ins.peer, ins.partner.value), len(values)),)
                received[ins.msg] = ins.slots_out[0]
                if ins.cut is not None:
                    src = data(core, ins.value)
                    ins.move = move = (src, ins.slots_out[0], *ins.cut)
                    if src in views:
                        views[src].append(move)
                    else:
                        views[src] = [move]
            elif kind in (LOAD, STORE):
                assert ins.value is not None
                buf = ins.op.buffer  # type: ignore[attr-defined]
                ins.buffer_slot = buffers.setdefault(buf, len(buffers))
                ins.slots_in = ins.slots_out = (data(core, ins.value),)
                if kind == STORE:
                    reads = (ins.value,)
                made.add(ins.value)
            elif kind == RECV:
                assert ins.value is not None
                ins.slots_out = (at((core, ins.value), len(values)),)
                made.add(ins.value)
            for v in reads:
                if v in made:
                    continue
                if v not in initial:
                    raise SimError(f"core {core} failed at {ins.where} {ins.name}: "
                                   f"{value_name(v)} is used before it is defined")
                start[slot(core, v)] = initial[v]
    program.start = [None] * len(values)
    for i, x in start.items():
        program.start[i] = x
    program.views = views
    program.received = received
    program.initial_views = [s for s in views if s in start]
    return len(values), len(buffers)


def op_name(op: Operation) -> str:
    """The printed spelling (`pim.relu`, not the family's `pim.unary`): `Operation.name`,
    under the name the trace labels import."""
    return op.name


def value_name(v: Value) -> str:
    return f"%{v.name}" if v.name else "%<value>"


def _dim_overlap(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    (o1, n1, s1), (o2, n2, s2) = a, b
    if n1 == 0 or n2 == 0 or o1 + (n1 - 1) * s1 < o2 or o2 + (n2 - 1) * s2 < o1:
        return False
    if n1 > n2:
        (o1, n1, s1), (o2, n2, s2) = (o2, n2, s2), (o1, n1, s1)
    last = o2 + (n2 - 1) * s2
    return any(o2 <= x <= last and (x - o2) % s2 == 0 for x in range(o1, o1 + n1 * s1, s1))


def overlap(a: Box, b: Box) -> bool:
    """Exact intersection of two strided boxes (dimensions are independent)."""
    return all(_dim_overlap(x, y) for x, y in zip(a, b, strict=True))


class _Compiler:
    def __init__(self, module: Module, target: Target) -> None:
        self.module = module
        self.target = target
        self.weights: dict[Value, np.ndarray] = {}
        self.symbols: dict[Value, str] = {}
        self.shared: dict[Value, np.ndarray] = {}
        self.inputs: set[Value] = set()
        self.templates = Templates(lambda ops: body_cost_ns(ops, target), self.weight)
        self.store_boxes: list[tuple[int, int, Value, Box]] = []
        self.load_boxes: list[tuple[Instr, int, int, Value, Box]] = []
        self.stores: list[tuple[int, Instr]] = []
        self.net = Network(target, "raptor")
        self.shared_bytes = 0
        self.inferences = 0
        self.lags: dict[int, int] = {}

    # ---- func level ----------------------------------------------------------------
    def weight(self, op: WeightOp) -> np.ndarray:
        data = self.module.constants.get(op.symbol)
        t = info(op.result)
        if data is None:
            raise SimError(f"{op.where()}: weight @{op.symbol} has no data in the module")
        if data.size != math.prod(t.shape):
            raise SimError(f"{op.where()}: weight @{op.symbol} holds {data.size} elements but "
                           f"is typed {op.result.type}")
        return np.ascontiguousarray(data.reshape(t.shape), dtype=t.dtype)

    def buffer(self, t: TypeInfo, op: Operation) -> np.ndarray:
        """A zeroed shared buffer, refused once all of them would pass `MAX_SHARED_BYTES`."""
        self.shared_bytes += t.nbytes
        if self.shared_bytes > MAX_SHARED_BYTES:
            raise SimError(f"{op.where()}: the program's inputs and shared buffers need more "
                           f"than {MAX_SHARED_BYTES >> 20:,} MiB of host memory (the "
                           "simulator's limit)")
        return np.zeros(t.shape, t.dtype)

    def compile(self) -> Program:
        func = self.module.main()
        for a in func.args:
            try:
                t = info(a)
            except KernelError as e:
                raise SimError(f"{func.where()}: argument {e}") from None
            self.shared[a] = self.buffer(t, func)
        self.inputs.update(func.args)
        jobs: list[tuple[int, Block, dict[Value, int], Operation]] = []
        outputs: list[Value] = []
        for op in func.body.ops:
            if isinstance(op, WeightOp):
                self.weights[op.result] = self.weight(op)
                self.symbols[op.result] = op.symbol
            elif isinstance(op, AllocSharedOp):
                self.shared[op.result] = self.buffer(info(op.result), op)
            elif isinstance(op, CoreOp):
                jobs.append((op.core, op.body, {}, op))
            elif isinstance(op, CoreBatchOp):
                lane = op.body.args[0]
                jobs.extend((c, op.body, {lane: i}, op) for i, c in enumerate(op.cores))
            elif isinstance(op, ReturnOp):
                outputs = list(op.values)
            else:
                raise SimError(f"{op.where()}: {op.NAME} at function level is not scheduled IR "
                               "(expected spat.weight, pim.alloc_shared, pim.core, "
                               "pim.core_batch, return)")
        for v in outputs:
            if v not in self.shared and v not in self.weights:
                raise SimError(f"returned {value_name(v)} is not a shared buffer, input or weight")
        seen: dict[int, Operation] = {}
        for core, _, _, owner in jobs:
            if not 0 <= core < self.target.num_cores:
                raise SimError(f"{owner.where()}: core {core} is outside the "
                               f"{self.target.mesh_rows}x{self.target.mesh_cols} mesh of target "
                               f"{self.target.name}")
            if core in seen:
                raise SimError(f"{owner.where()}: core {core} has two programs (the other at "
                               f"{seen[core].where()})")
            seen[core] = owner
        cores: dict[int, list[Instr]] = {}
        envs: dict[int, Env] = {}
        tiles: dict[int, int] = {}
        for core, body, fixed, _ in sorted(jobs, key=lambda j: j[0]):
            cc = _CoreCompiler(self, core, fixed)
            cores[core] = cc.block(body)
            envs[core] = cc.env
            tiles[core] = sum(cc.tiles.values())
        self.check_capacity(tiles)
        ends, routes = self.check_channels(cores)
        self.link_loads()
        program = Program(func, cores, envs, tiles, self.shared, outputs, len(ends), ends,
                          self.weights, self.stores, routes, inferences=self.inferences,
                          lags=self.lags, written={b for _, _, b, _ in self.store_boxes})
        program.slots = number_slots(program)
        return program

    def check_capacity(self, tiles: dict[int, int]) -> None:
        cap = self.target.crossbars_per_core
        over = [f"core {c} holds {n} crossbars of weights but target {self.target.name} has {cap} "
                f"crossbars per core" for c, n in tiles.items() if n > cap]
        if over:
            raise SimError("crossbar capacity exceeded", over)

    def check_channels(self, cores: dict[int, list[Instr]]
                       ) -> tuple[list[tuple[int, int, int, int]], list[Route]]:
        """Every (source, destination, channel) needs as many sends as receives, paired in
        program order with equal types; anything else would hang or corrupt data. Numbers
        the messages (`Instr.msg`: the k-th send and the k-th receive of a channel are one
        message, since each side runs its channel's ops in program order) and returns each
        message's source, destination, channel and bytes, and its send's route."""
        sends: dict[tuple[int, int, int], list[Instr]] = {}
        recvs: dict[tuple[int, int, int], list[Instr]] = {}
        for core, prog in cores.items():
            for ins in prog:
                if ins.kind == SEND:
                    sends.setdefault((core, ins.peer, ins.channel), []).append(ins)
                elif ins.kind == RECV:
                    recvs.setdefault((ins.peer, core, ins.channel), []).append(ins)
        lines = []
        ends: list[tuple[int, int, int, int]] = []
        routes: list[Route] = []
        num_cores = self.target.num_cores
        for key in sorted(set(sends) | set(recvs)):
            src, dst, ch = key
            ss, rr = sends.get(key, []), recvs.get(key, [])
            if src not in cores or dst not in cores:
                lines += [f"channel {ch} from core {src} to core {dst}: {role} core {who} has "
                          "no program" for who, role in ((src, "source"), (dst, "destination"))
                          if who not in cores]
            if len(ss) != len(rr):
                at = ", ".join(f"{w} at {i.where}" for w, xs in (("send", ss), ("receive", rr))
                               for i in xs)
                lines.append(f"channel {ch} from core {src} to core {dst}: {len(ss)} send(s), "
                             f"{len(rr)} receive(s) ({at})")
            rank = noc.inject_rank(src, dst, num_cores)
            for s, r in zip(ss, rr, strict=False):
                assert s.value is not None and r.value is not None
                s.partner = r
                s.msg = r.msg = len(ends)
                s.rank = rank
                ends.append((src, dst, ch, s.nbytes))
                routes.append(s.route)
                sent = s.op.message_type if isinstance(s.op, ChannelSendOp) else s.value.type
                if sent != r.value.type:
                    lines.append(f"channel {ch} from core {src} to core {dst}: {s.where} sends "
                                 f"{sent} but {r.where} receives {r.value.type}")
        if lines:
            raise SimError("unmatched channels", lines)
        return ends, routes

    def link_loads(self) -> None:
        by_buffer: dict[Value, list[tuple[int, int, Box, int]]] = {}
        for sid, (core, pos, buf, box) in enumerate(self.store_boxes):
            by_buffer.setdefault(buf, []).append((core, pos, box, sid))
        for ins, core, pos, buf, box in self.load_boxes:
            ins.deps = tuple(sid for c, p, b, sid in by_buffer.get(buf, [])
                             if not (c == core and p > pos) and overlap(box, b))


class _CoreCompiler:
    """Compiles one core's program (a core-batch body once per core, lane fixed)."""

    def __init__(self, ctx: _Compiler, core: int, fixed: dict[Value, int]) -> None:
        self.ctx = ctx
        self.core = core
        self.fixed = fixed
        self.env: Env = dict(ctx.weights)
        self.received: set[Value] = set()
        self.tiles: dict[object, int] = {}
        """Crossbars of each array group the core holds."""
        self.rn: dict[Value, Value] = {}
        """Inside a stream: this inference's copy of each value the body defined."""
        self.inference = -1
        self.cached: dict[Operation, tuple[Template, list[Value]]] = {}
        """Inside a stream: the template of a compute whose structure does not depend on
        the inference (found once, reused by every inference)."""

    def r(self, v: Value) -> Value:
        """`v` as this inference knows it."""
        return self.rn.get(v, v)

    def fresh(self, v: Value) -> Value:
        """This inference's own copy of a value the stream body defines (the value itself
        outside a stream)."""
        if self.inference < 0:
            return v
        got = self.rn[v] = Value(v.type, v.name)
        return got

    def fail(self, op: Operation, msg: str) -> SimError:
        return SimError(f"{op.where()}: core {self.core}: {msg}")

    def block(self, body: Block) -> list[Instr]:
        out: list[Instr] = []
        for op in body.ops:
            if isinstance(op, StreamOp):
                self.stream(op, out)
                continue
            try:
                ins = self.op(op, len(out))
            except KernelError as e:
                raise self.fail(op, str(e)) from None
            if ins is not None:
                out.append(ins)
        return out

    def stream(self, loop: StreamOp, out: list[Instr]) -> None:
        """One copy of the body per iteration, each op on its inference (the iteration
        minus its lag; none outside the stream), `%n` and `%s` bound, values renamed per
        inference (a lagged op reads the copy an earlier iteration made)."""
        if self.ctx.inferences not in (0, loop.count):
            raise self.fail(loop, f"pim.stream of {loop.count} inferences in a program of "
                            f"{self.ctx.inferences}")
        count, ring, lags = loop.count, loop.ring, loop.lags
        self.ctx.inferences = count
        self.ctx.lags[self.core] = lags
        outer = self.fixed
        first: dict[Operation, Instr] = {}
        body = list(loop.staged())
        copies: dict[int, dict[Value, Value]] = {}
        fixed: dict[int, dict[Value, int]] = {}  # per inference, made once (not per op)
        n_var, s_var = loop.inference, loop.slot
        for k in range(count + lags):
            begin = len(out)
            for lag, op in body:
                n = k - lag
                if not 0 <= n < count:
                    continue
                if isinstance(op, StreamOp):
                    raise self.fail(op, "pim.stream inside pim.stream")
                if n != self.inference:
                    got = fixed.get(n)
                    if got is None:
                        got = fixed[n] = {**outer, n_var: n, s_var: n % ring}
                    self.fixed, self.inference, self.rn = got, n, copies.setdefault(n, {})
                proto = first.get(op)
                try:  # an op is in `first` once its first inference is compiled
                    ins = self.op(op, len(out)) if proto is None else self.again(op, proto)
                except KernelError as e:
                    raise self.fail(op, str(e)) from None
                if ins is not None:
                    ins.inference = n
                    out.append(ins)
                    if not n and proto is None and (
                            ins.kind == RECV
                            or (ins.kind == SEND and not _uses_any(op, set(self.fixed)))
                            or (ins.kind == COMPUTE and op in self.cached)):
                        first[op] = ins
            copies.pop(k - lags, None)  # no later iteration reads that inference
            fixed.pop(k - lags, None)
            if len(out) > begin:
                out[begin].first = k
        self.fixed, self.inference, self.rn = outer, -1, {}

    def waits(self, op: Operation, uses: Sequence[Value],
              load_bufs: Sequence[Value] = ()) -> tuple[Value, ...]:
        """The received values among `uses` (what `op` reads); `load_bufs` are the
        function inputs its body reads with `pim.load`, the only shared buffers a
        compute may name."""
        shared = self.ctx.shared
        for v in uses:
            if v in shared and v not in load_bufs and not isinstance(op, LoadOp | StoreOp):
                raise self.fail(op, f"{op.name} uses shared buffer {value_name(v)} "
                                "directly; read it with pim.load")
        received = self.received
        return tuple(v for v in uses if v in received)

    def counter(self, op: SignalOp | WaitOp) -> Instr:
        buf = self.ctx.shared.get(op.counters)
        t = op.counters.type
        if buf is None or not isinstance(t, TensorType) or t.rank != 1 \
                or not 0 <= op.index < t.static_shape[0]:
            raise self.fail(op, f"{op.name} needs counter {op.index} of a rank-1 shared "
                            f"buffer, got {value_name(op.counters)}: {t}")
        cost = op_cost_ns(op, self.ctx.target)
        label = f"{op.name} {value_name(op.counters)}[{op.index}]"
        if isinstance(op, SignalOp):
            return Instr(SIGNAL, op, label, self.core, cost=cost, counter=(op.counters, op.index))
        (th,) = resolve(op.threshold, self.fixed)
        if not th.is_const:
            raise self.fail(op, "pim.wait threshold must be constant on a core (affine in %n)")
        return Instr(WAIT, op, label, self.core, cost=cost, counter=(op.counters, op.index),
                     threshold=th.const)

    def op(self, op: Operation, pos: int) -> Instr | None:
        if isinstance(op, WeightOp):
            self.env[op.result] = self.ctx.weight(op)
            self.ctx.symbols[op.result] = op.symbol
            return None
        if isinstance(op, ChannelReceiveOp):
            got = self.fresh(op.result)
            self.received.add(got)
            return Instr(RECV, op, "spat.channel_receive", self.core, peer=op.core,
                         channel=op.channel, value=got, nbytes=info(op.result).nbytes)
        if isinstance(op, ChannelSendOp):
            msg_t = op.message_type
            assert isinstance(msg_t, TensorType)
            nbytes = msg_t.nbytes
            if not 0 <= op.core < self.ctx.target.num_cores:
                raise self.fail(op, f"send to core {op.core}, outside the mesh")
            cut = None
            value = self.r(op.value)
            if op.message is not None:  # a strided region of the value (DMA, no copy)
                offs = resolve(op.offsets, self.fixed)
                sl = slices([a.const for a in offs], op.sizes, op.strides)
                shape = msg_t.static_shape
                cut = (_trimmed(sl, info(op.value).shape),
                       None if tuple(op.sizes) == shape else shape)
            return Instr(SEND, op, "spat.channel_send", self.core, waits=self.waits(op, [value]),
                         peer=op.core, channel=op.channel, value=value, nbytes=nbytes,
                         cut=cut, route=self.ctx.net.message(self.core, op.core, nbytes, op.yx))
        if isinstance(op, SignalOp | WaitOp):
            return self.counter(op)
        if isinstance(op, LoadOp | StoreOp):
            return self.memory(op, pos)
        if isinstance(op, ComputeOp | YieldOp | ReturnOp | ParallelInsertSliceOp
                      | AllocSharedOp | CoreOp | CoreBatchOp | StreamOp) \
                and not isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
            raise self.fail(op, f"{op.NAME} is not allowed in a core program")
        return self.compute(op)

    def memory(self, op: LoadOp | StoreOp, pos: int) -> Instr:
        buf_v = op.buffer
        buf = self.ctx.shared.get(buf_v)
        if buf is None:
            raise self.fail(op, f"{value_name(buf_v)} is not a shared buffer (a function "
                            "argument or pim.alloc_shared)")
        box, sl = self.buffer_region(op, buf)
        cost = op_cost_ns(op, self.ctx.target)
        looped = self.inference >= 0
        region = (buf_v, box) if looped else None
        if isinstance(op, LoadOp):
            res = self.fresh(op.result)
            ins = Instr(LOAD, op, f"pim.load {value_name(buf_v)}", self.core, cost=cost,
                        access=(buf, sl, info(op.result).shape), value=res,
                        nbytes=info(res).nbytes, region=region)
            if not looped:  # inside a stream, counters order loads and stores
                self.ctx.load_boxes.append((ins, self.core, pos, buf_v, box))
            return ins
        val = self.r(op.value)
        ins = Instr(STORE, op, f"pim.store {value_name(buf_v)}", self.core, cost=cost,
                    access=(buf, sl, tuple(op.sizes)),
                    waits=self.waits(op, [val]), value=val, nbytes=info(val).nbytes,
                    store_id=len(self.ctx.store_boxes), region=region)
        self.ctx.store_boxes.append((self.core, pos, buf_v, box))
        self.ctx.stores.append((self.core, ins))
        return ins

    def buffer_region(self, op: LoadOp | StoreOp, buf: np.ndarray) -> tuple[Box, tuple[slice, ...]]:
        """The constant, in-bounds region of a shared buffer a load or store touches."""
        offs = resolve(op.offsets, self.fixed)
        if any(not a.is_const for a in offs):
            raise self.fail(op, f"{op.NAME} offsets must be constant on a core")
        box = tuple(zip([a.const for a in offs], op.sizes, op.strides, strict=True))
        for d, (o, n, st) in enumerate(box):
            if n and (o < 0 or o + (n - 1) * st >= buf.shape[d]):
                raise self.fail(op, f"{op.NAME} dimension {d} [{o}, +{n}*{st}) is outside "
                                f"0..{buf.shape[d]} of {value_name(op.buffer)}")
        return box, slices([b[0] for b in box], op.sizes, op.strides)

    def template(self, op: Operation) -> tuple[Template, list[Value]]:
        """`op`'s template and outside reads; inside a stream found once per op when its
        structure does not depend on the inference."""
        if self.inference < 0:
            return self.ctx.templates.get(op, self.fixed, self.fail)
        got = self.cached.get(op)
        if got is None:
            got = self.ctx.templates.get(op, self.fixed, self.fail)
            if not _uses_any(op, set(self.fixed)):
                self.cached[op] = got
        return got

    def again(self, op: Operation, proto: Instr) -> Instr:
        """A receive, send or compute of a later inference, from its first inference's
        instruction: the same work on this inference's values (what `op` would compile
        to, without redoing what does not change)."""
        kind = proto.kind
        if kind == RECV:
            got = self.fresh(op.result)  # type: ignore[attr-defined]
            self.received.add(got)
            return Instr(RECV, op, proto.label, self.core, peer=proto.peer,
                         channel=proto.channel, value=got, nbytes=proto.nbytes)
        if kind == SEND:
            assert isinstance(op, ChannelSendOp)
            value = self.rn.get(op.value, op.value)
            # the first inference checked that it sends no shared buffer: a later one
            # sends the same value or its own copy of one the body defines
            return Instr(SEND, op, proto.label, self.core,
                         waits=(value,) if value in self.received else (),
                         peer=proto.peer, channel=proto.channel, value=value,
                         nbytes=proto.nbytes, cut=proto.cut, route=proto.route)
        tpl = proto.template
        assert tpl is not None
        if tpl.loads:
            return self.compute(op)
        reads, defines = self.operands(op, self.cached[op][1])
        received = self.received
        return Instr(COMPUTE, op, proto.label, self.core, cost=proto.cost,
                     waits=tuple([v for v in reads if v in received]),
                     body_ops=proto.body_ops, template=tpl, reads=reads, defines=defines)

    def operands(self, op: Operation, frees: Sequence[Value]
                 ) -> tuple[tuple[Value, ...], tuple[Value, ...]]:
        """What a compute reads (its inputs, then `frees` from outside its body) and
        defines, as this inference knows them."""
        if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
            return (tuple([self.r(v) for v in (*op.inputs, *frees)]),
                    tuple([self.fresh(v) for v in op.outs]))
        return tuple([self.r(v) for v in frees]), tuple([self.fresh(v) for v in op.results()])

    def compute(self, op: Operation) -> Instr:
        """A scheduled compute, or one bare op at core level, through its template."""
        tpl, frees = self.template(op)
        reads, defines = self.operands(op, frees)
        body = op.body.ops if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp) else []
        load_bufs = [reads[i] for i in tpl.load_reads]
        params = tuple(self.input_load(body[pos]) for pos in tpl.loads)
        for k, (w, shape) in enumerate(tpl.weights):
            key: object = w if isinstance(w, str) else \
                self.ctx.symbols.get(reads[w], reads[w]) if w >= 0 else (op, k)
            # (op, k): a weight computed in the body, an array group of its own
            self.tiles[key] = self.ctx.target.crossbars_of(shape)
        if tpl.load_reads:
            reads = tuple(v for i, v in enumerate(reads) if i not in tpl.load_reads)
        waits = self.waits(op, reads, load_bufs)
        label = f"{op.NAME} lanes({op.lanes})" if isinstance(op, ScheduledComputeBatchOp) \
            else op.name
        return Instr(COMPUTE, op, label, self.core, cost=tpl.cost, waits=waits,
                     body_ops=tpl.ops if body else 0, template=tpl, reads=reads,
                     defines=defines, params=params)

    def input_load(self, op: Operation) -> tuple[np.ndarray, tuple[slice, ...]]:
        """A `pim.load` inside a compute body: the instance gathers its box of a function
        input as part of its own work (charged in the body's cost). Inputs are never
        written, so no store can race with it; other buffers must be loaded at core level,
        where loads wait for the stores they overlap."""
        assert isinstance(op, LoadOp)
        if op.buffer not in self.ctx.inputs:
            raise self.fail(op, "pim.load inside a compute body may only read a function "
                            f"input, not {value_name(op.buffer)}")
        buf = self.ctx.shared[op.buffer]
        _, sl = self.buffer_region(op, buf)
        return buf, sl


def _uses_any(op: Operation, names: set[Value]) -> bool:
    """Whether an offset of `op` or of an op in its body, other than a `pim.load`'s (a
    load's region is a parameter of the instance, not of the template), uses `names`."""
    return any(isinstance(inner, Strided) and not isinstance(inner, LoadOp)
               and any(v in names for a in inner.offsets for v in a.vars()) for inner in op.walk())


def compile_program(module: Module, target: Target) -> Program:
    """Check and compile `module`'s main function for `target`."""
    return _Compiler(module, target).compile()
