"""Scheduled IR -> pimsim-nn programs: one instruction list per core, in pimsim-nn's JSON.

Every core program starts with `setbw` (activations at the target's `input_bits`), sets
each address with `sldi` into one of 28 general registers (an LRU cache, so an address
already held is not set again; r28/r29 hold the 64-bit global address of `ld`/`st`), and
lowers the core's ops in program order, with the addresses of the local-memory plan
(`raptor.passes.memory`):

- `spat.channel_send` / `receive` -> `send` / `recv` (`rd` and `rs1` both name the buffer);
  a region that is not contiguous is packed into a staging buffer with `lmv` first;
- `pim.load` / `pim.store` -> `ld` / `st` of the region's bytes;
- `pim.mvm` -> one `mvmul` per input row, on the array group of its weight (the crossbars
  of `Target.crossbars_of` its shape; one group per distinct weight on the core);
- `pim.vadd/vsub/vmul/vmax` -> `vvadd/vvsub/vvmul/vvmax`; `pim.relu/sigmoid/tanh` ->
  `vrelu/vsigm/vtanh`; `pim.silu` -> `vsigm`, `vvmul`; `pim.clip` -> `vrsl`, `vrsu`;
  `pim.vscale` -> `lldi` of the factor, `vvmul`; `pim.vreduce_*` -> one `vavg` per result
  element over its (strided) inputs;
- `tensor.extract_slice` (strided), `insert_slice`, `concat`, `materialize_layout` and
  publications -> one `lmv` of the moved bytes per copy; `tensor.pad` -> `lldi` of the pad
  value over the result, `lmv` of the source; `tensor.transpose` -> one `vmv` (strided
  gather);
- a stream program (`pim.stream`, pipeline mode) is unrolled for the export's inferences
  (`%n`, and `%s` = n mod ring, bound in each copy); `pim.signal` -> `sync` to an event
  register of the core that waits on the counter, `pim.wait` -> `wait` for the signals
  not consumed yet (none, and no instruction, for the ring's initial FREE credits);
- a contiguous `tensor.extract_slice`, `tensor.reshape`, `tensor.empty`,
  `spat.lane_result`, `spat.yield` -> nothing (views the memory plan placed in their
  source, and fresh buffers).

Stand-ins, counted in `Export.notes`: pimsim-nn has no 2-D copy, broadcast or vector sum,
so a strided copy is one `lmv` of its bytes from the region's first element (pimsim-nn
prices `lmv` by its size alone: the same time a strided DMA of those bytes takes), a
transpose is one `vmv` of all elements, a broadcast operand is read as the result's elements
(the op reads as many bytes as a real operand, from a range that exists: a bias read in its
place would run past the end of local memory when it sits near the top), and a sum is a
`vavg`. Emitting one instruction per contiguous run instead would make ResNet-18 55 M
instructions. Values are never computed by pimsim-nn; the timing of every instruction is the
one documented in `raptor.export.chip`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raptor import noc
from raptor.export.chip import (
    GAP_CYCLES,
    MVM_GAP_CYCLES,
    ROB_MVM_GAP_CYCLES,
    ROB_UNIT_CYCLES,
    SCALAR_CYCLES,
    START_CYCLES,
    PimsimChip,
)
from raptor.ir.core import Affine, Block, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    AllocSharedOp,
    BinaryOp,
    ChannelReceiveOp,
    ChannelSendOp,
    ConcatOp,
    CoreBatchOp,
    CoreOp,
    ExtractSliceOp,
    InsertSliceOp,
    LoadOp,
    MaterializeLayoutOp,
    MvmOp,
    PadOp,
    ParallelInsertSliceOp,
    ReduceOp,
    ReturnOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    SignalOp,
    StoreOp,
    StreamOp,
    TransposeOp,
    UnaryOp,
    WaitOp,
    WeightOp,
)
from raptor.ir.types import TensorType
from raptor.passes.memory import NO_INSTRUCTION, CoreMemory, MemoryPlan, is_contiguous
from raptor.sim.timing import OpTiming

Instruction = dict[str, Any]
GENERAL_REGISTERS = 28
EVENT_REGISTERS = 32
"""Event registers of a pimsim-nn core (`sync` adds one to a register of another core,
`wait` blocks until one holds a value, then subtracts it)."""
PAIR = 28
"""Even register of the (r28, r29) pair holding a global address (high word, low word)."""
BINARY = {"vadd": "vvadd", "vsub": "vvsub", "vmul": "vvmul", "vmax": "vvmax"}
UNARY = {"relu": "vrelu", "sigmoid": "vsigm", "tanh": "vtanh"}
SCALAR_OPS = frozenset({"sldi", "sld", "sadd", "ssub", "smul", "saddi", "smuli"})
VECTOR_OPERANDS = {"vvadd": 2, "vvsub": 2, "vvmul": 2, "vvmax": 2, "vvdmul": 2, "vrelu": 1,
                   "vtanh": 1, "vsigm": 1, "vmv": 1, "vavg": 1, "vrsu": 1, "vrsl": 1}


class ExportError(ValueError):
    """A program pimsim-nn cannot run as exported (one line per problem)."""

    def __init__(self, message: str, details: Sequence[str] = ()) -> None:
        self.details = list(details)
        text = message if not self.details else message + ":\n  " + "\n  ".join(
            self.details[:20]) + (f"\n  ... and {len(self.details) - 20} more"
                                  if len(self.details) > 20 else "")
        super().__init__(text)


@dataclass
class CoreProgram:
    core: int
    instructions: list[Instruction]
    groups: list[int]
    """Crossbars of each array group (`array_group_map`)."""


@dataclass
class Export:
    """The exported program, the chip it runs on, and what the exporter priced."""

    chip: PimsimChip
    cores: dict[int, CoreProgram]
    memory: MemoryPlan
    timings: dict[tuple[int, Operation], OpTiming]
    """Per (core, top-level op): its time under pimsim-nn's model (for Raptor's simulator)."""
    notes: Counter[str] = field(default_factory=Counter)
    """Stand-ins the exporter used, with counts."""
    overflow: list[str] = field(default_factory=list)
    """Cores (and shared memory) over the target's capacity, when allowed through."""
    cycles: Counter[str] = field(default_factory=Counter)
    """Cycles of the instructions by opcode, summed over the cores (with dispatch gaps;
    without waiting for partners or the global memory)."""
    rank: Mapping[int, int] | None = None
    """The message order its programs follow (`order.pimsim_order`; None: channel order)."""
    model_ns: int | None = None
    """A latency program's time under Raptor's model of pimsim-nn, when known (a stream's:
    of all the inferences it has inputs for, however many are unrolled)."""
    orders_modeled: int = 0
    """How many message orders the order search ran under that model (`_best_order`)."""
    repeated: list[OpTiming] = field(default_factory=list)
    """A stream program unrolled: the times of the ops of every inference after the first
    (`timings` holds the first's; together they are everything the cores run)."""

    @property
    def instructions(self) -> int:
        return sum(len(p.instructions) for p in self.cores.values())

    def program_config(self) -> dict[str, Any]:
        n = self.chip.target.num_cores
        return {"core_cnt": n,
                "array_group_map": {f"core{c}": (self.cores[c].groups if c in self.cores
                                                 else []) for c in range(n)}}


def _strides(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def _shape(v: Value) -> tuple[int, ...]:
    t = v.type
    if not isinstance(t, TensorType) or not t.is_static:
        raise ExportError(f"%{v.name} has type {t}; the exporter needs static tensors")
    return t.static_shape


def _flat(shape: Sequence[int], offsets: Sequence[int]) -> int:
    return sum(o * s for o, s in zip(offsets, _strides(shape), strict=True))


class _Registers:
    """Values held in the general registers, least recently used evicted first."""

    def __init__(self, emit: Callable[[Instruction], None]) -> None:
        self.emit = emit
        self.held: OrderedDict[int, int] = OrderedDict()
        self.free = list(range(GENERAL_REGISTERS - 1, -1, -1))
        self.pair: int | None = None

    def get(self, value: int) -> int:
        reg = self.held.get(value)
        if reg is not None:
            self.held.move_to_end(value)
            return reg
        reg = self.free.pop() if self.free else self.held.popitem(last=False)[1]
        self.held[value] = reg
        self.emit({"op": "sldi", "rd": reg, "imm": value})
        return reg

    def global_address(self, addr: int) -> int:
        if self.pair != addr:
            self.emit({"op": "sldi", "rd": PAIR, "imm": addr >> 32})
            self.emit({"op": "sldi", "rd": PAIR + 1, "imm": addr & 0xFFFFFFFF})
            self.pair = addr
        return PAIR


class _CoreLowering:
    """One core's instructions and the pimsim-nn time of each top-level op."""

    def __init__(self, ex: _Exporter, core: int, body: Block, fixed: Mapping[Value, int]) -> None:
        self.ex = ex
        self.chip = ex.chip
        self.core = core
        self.body = body
        self.mem: CoreMemory = ex.plan.cores[core]
        self.env: dict[Value, int] = dict(fixed)
        """Lane variables with their value (core-batch lane, scheduled-batch lane)."""
        self.out: list[Instruction] = [{"op": "setbw", "ibiw": ex.chip.target.input_bits,
                                        "obiw": ex.chip.target.input_bits}]
        self.regs = _Registers(self.emit)
        self.groups: dict[str, tuple[int, int]] = {}
        """Weight symbol -> (array group index, its crossbars)."""
        self.inputs: dict[Value, Value] = {}
        """Block argument -> the value it stands for."""
        self.cycles = 0
        self.op: Operation | None = None
        self.gm_first: int | None = None
        """Cycle (since the core started) of the current op's first global-memory access."""
        self.gm_cycles = 0
        self.overlap = ex.chip.target.mvm_units > 1
        """A reorder buffer of more than one entry (`unit`, `flush`)."""
        self.free = {"vector": 0, "transfer": 0}
        """With `overlap`: the cycle pimsim-nn's vector unit and its transfer unit (`lmv`,
        `lldi`, `send`, `recv`) take their next instruction."""
        self.mvms: list[list[tuple[int, int, int, int, int]]] = []
        """With `mvm_units` > 1, the rows of the `pim.mvm`s in a row not yet emitted, per op
        (output address, input address, array group, its crossbars, busy cycles): see
        `flush`."""
        self.flight: list[tuple[int, int, range, range]] = []
        """The `mvmul`s of the last `flush` in dispatch order (end cycle, retire cycle:
        in order, reads, writes), while the vector instructions after them may still
        overlap them."""
        self.after = 0
        """Reorder-buffer entries dispatched since those `mvmul`s."""
        self.pending: list[tuple[int, list[range], list[range]]] = []
        """With `overlap`: the vector, copy and transfer instructions that may still be in
        flight, in dispatch order: the cycle an instruction waiting for it (its bytes or
        its reorder-buffer entry) may be dispatched, its reads and writes."""

    # -- emission and time ------------------------------------------------------------
    def emit(self, ins: Instruction, cycles: int | None = None) -> None:
        """An instruction taking `cycles` of the core's time; a scalar one takes one, none
        with `overlap` (it runs while the instruction before it does)."""
        if cycles is None:
            cycles = 0 if self.overlap else SCALAR_CYCLES
        self.out.append(ins)
        self.cycles += cycles
        self.ex.cycles[ins["op"]] += cycles

    def unit(self, ins: Instruction, busy: int, gap: int = GAP_CYCLES,
             ranges: tuple[list[range], list[range]] | None = None) -> None:
        """A vector, copy or `lldi` instruction. With a one-entry reorder buffer the core
        waits for it; with more (`mvm_units` > 1) it is dispatched as pimsim-nn dispatches
        it (`dispatch`, its local `ranges`: reads, writes) and the core runs on."""
        if not self.overlap:
            self.emit(ins, busy + gap)
            return
        assert ranges is not None
        reads, writes = ranges
        start = self.dispatch(reads, writes, "vector" if ins["op"] in VECTOR_OPERANDS
                              else "transfer")
        self.out.append(ins)
        self.ex.cycles[ins["op"]] += busy + gap
        self.free["vector" if ins["op"] in VECTOR_OPERANDS else "transfer"] = (
            start + busy + ROB_UNIT_CYCLES)
        self.pending.append((start + busy + gap, reads, writes))
        self.cycles = start + SCALAR_CYCLES

    def dispatch(self, reads: list[range], writes: list[range], unit: str) -> int:
        """The cycle pimsim-nn dispatches the next instruction on `unit` (with `overlap`):
        in order, once its unit is free, the entry `mvm_units` back in the reorder buffer
        has retired (in order) and nothing in flight writes what it reads or reads what it
        writes (`flight`, `pending`)."""
        if self.flight:
            self.overlap_flight(reads, writes)
        rob = self.chip.target.mvm_units
        while self.pending and self.pending[0][0] <= self.cycles:  # retired
            self.pending.pop(0)
        back = len(self.pending) - rob
        t = max([self.cycles, self.free[unit]]
                + [d for d, _, _ in self.pending[:back + 1]]
                + [d for d, r, w in self.pending if _conflict(reads, writes, r, w)])
        return t

    def serial(self, ins: Instruction, busy: int, gap: int = GAP_CYCLES) -> None:
        """An instruction that waits for the others and that the core waits for (a
        global-memory access or an event: the mirror times what it waits on)."""
        self.drain()
        self.emit(ins, busy + gap)

    def drain(self) -> None:
        if self.flight:
            self.cycles = max(self.cycles, self.flight[-1][1] + ROB_MVM_GAP_CYCLES)
            self.flight = []
        self.cycles = max([self.cycles] + [d for d, _, _ in self.pending])
        self.pending = []

    def overlap_flight(self, reads: list[range], writes: list[range]) -> None:
        """Hold the next instruction for `flight` (see `unit`); forget it once all ended."""
        gap, rob = ROB_MVM_GAP_CYCLES, self.chip.target.mvm_units
        back = len(self.flight) + self.after - rob  # the entry that must have retired
        if back >= 0:
            self.cycles = max(self.cycles, self.flight[min(back, len(self.flight) - 1)][1]
                              + gap)
        for t, _, r, w in self.flight:
            if t + gap > self.cycles and _conflict(reads, writes, [r], [w]):
                self.cycles = t + gap
        self.after += 1
        if self.flight[-1][1] + gap <= self.cycles:
            self.flight = []

    def note(self, text: str) -> None:
        self.ex.notes[text] += 1

    # -- values -----------------------------------------------------------------------
    def resolve(self, v: Value) -> Value:
        while v in self.inputs:
            v = self.inputs[v]
        return v

    def addr(self, v: Value) -> int:
        slot = self.mem.slots.get(v) or self.mem.slots.get(self.resolve(v))
        if slot is None:
            raise ExportError(f"core {self.core}: %{v.name} has no local-memory address "
                              f"(used by {self.where()})")
        return slot.addr

    def nbytes(self, v: Value) -> int:
        return math.prod(_shape(v)) * self.chip.act

    def offsets(self, offs: Sequence[Affine]) -> list[int]:
        return [a.const if a.is_const else a.evaluate(self.env) for a in offs]

    def where(self) -> str:
        return self.op.where() if self.op is not None else "<core>"

    # -- program ----------------------------------------------------------------------
    def iterations(self) -> Iterator[tuple[Operation, Operation | None]]:
        """The core's top-level ops in execution order, each with the op after it (None
        after the last): a stream program (one `pim.stream`) unrolled for the export's
        inferences, `%n` and `%s` bound in each copy as its first op is yielded."""
        ops = self.body.ops
        if len(ops) == 1 and isinstance(ops[0], StreamOp):
            stream = ops[0]
            body = stream.body.ops
            count = self.ex.inferences or stream.count
            for n in range(count):
                self.env[stream.inference] = n
                self.env[stream.slot] = n % stream.ring
                yield from zip(body, [*body[1:], body[0] if n + 1 < count else None],
                               strict=True)
        else:
            yield from zip(ops, [*ops[1:], None], strict=True)

    def run(self) -> CoreProgram:
        first = True
        for op, following in self.iterations():
            self.op = op
            start = len(self.out)
            before = self.cycles
            self.gm_first, self.gm_cycles = None, 0
            timing = self.top(op)
            if not self.runs_on(op, following):
                at = self.cycles
                self.drain()
                if timing is not None:  # a transfer's: the core waits for it
                    timing = dataclasses.replace(timing, after=timing.after + self.cycles - at)
            if timing is None:
                lead = 0 if self.gm_first is None else self.gm_first - before
                timing = OpTiming(lead, self.cycles - before - lead, memory=self.gm_cycles)
            if first and len(self.out) > start:
                timing = dataclasses.replace(timing, before=timing.before + START_CYCLES)
                first = False
            if (self.core, op) in self.ex.timings:  # a stream's later inference
                self.ex.repeated.append(timing)
            else:
                self.ex.timings[(self.core, op)] = timing
        return CoreProgram(self.core, self.out if len(self.out) > 1 else [],
                           [n for _, n in self.groups.values()])

    def runs_on(self, op: Operation, following: Operation | None) -> bool:
        """Whether the instructions still in flight after `op` run on into `following`
        (else the core waits for them, `drain`): with a reorder buffer of more entries, into
        a `send` or `recv` (pimsim-nn dispatches it once nothing in flight conflicts,
        `transfer`), and from one into any op (whose instructions wait for what they
        need, `dispatch`, `flush`)."""
        transfer = ChannelSendOp | ChannelReceiveOp
        return self.overlap and following is not None and (
            isinstance(following, transfer) or isinstance(op, transfer))

    def top(self, op: Operation) -> OpTiming | None:
        if isinstance(op, ChannelReceiveOp):
            n = self.nbytes(op.result)
            return self.transfer("recv", self.addr(op.result), n, op.core, self.cycles,
                                 self.chip.recv_write(n))
        if isinstance(op, ChannelSendOp):
            return self.send(op)
        if isinstance(op, SignalOp | WaitOp):
            self.counter(op)
            return None
        if isinstance(op, ScheduledComputeOp):
            self.inputs.update(zip(op.body.args, op.inputs, strict=True))
            for inner in op.body.ops:
                self.lower(inner)
            self.flush()
            return None
        if isinstance(op, ScheduledComputeBatchOp):
            n = len(op.inputs)
            args = op.body.args
            self.inputs.update(zip(args[1:1 + n], op.inputs, strict=True))
            self.inputs.update(zip(args[1 + n:], op.outs, strict=True))
            for lane in range(op.lanes):
                self.env[args[0]] = lane
                for inner in op.body.ops:
                    self.lower(inner)
                self.flush()
            return None
        self.lower(op)
        self.flush()
        return None

    def send(self, op: ChannelSendOp) -> OpTiming:
        before = self.cycles
        src = self.addr(op.value)
        if op.message is not None:
            n = math.prod(op.message.static_shape) * self.chip.act
            first = src + _flat(_shape(op.value), self.offsets(op.offsets)) * self.chip.act
            stage = self.mem.staging.get(op)
            if stage is not None:  # pack the region (pimsim-nn sends one range)
                self.note("strided region packed with one lmv before its send")
                self.lmv(stage.addr, first, n)
                first = stage.addr
            src = first
        else:
            n = self.nbytes(op.value)
        return self.transfer("send", src, n, op.core, before, self.chip.send_read(n))

    def transfer(self, name: str, addr: int, n: int, core: int, before: int, busy: int) -> OpTiming:
        """A `send` or `recv` of `n` bytes at `addr`, timed from cycle `before`. With a
        one-entry reorder buffer it waits for everything before it. With more it is
        dispatched as pimsim-nn dispatches it to its transfer unit (`dispatch`: the vector,
        copy and `mvmul` instructions before it run on unless it reads what they write or
        writes what they read), and those run while it moves its data: what of them
        outlasts its time over free links (`moving`) is priced before it (so the mirror's
        core goes on when both are done, whichever core of the pair is late), the rest is
        hidden. The next instruction is dispatched as it ends (one waiting for its bytes a
        cycle later)."""
        r = self.regs.get(addr)
        ins = {"op": name, "rd": r, "rs1": r, "core": core, "size": n}
        if not self.overlap:
            self.drain()
            pre = self.cycles - before
            self.serial(ins, busy, GAP_CYCLES)
            return OpTiming(pre, busy, GAP_CYCLES, n)
        span = [range(addr, addr + n)]
        reads, writes = (span, []) if name == "send" else ([], span)
        start = self.dispatch(reads, writes, "transfer")
        self.cycles = start
        self.drain()  # the instructions before it: done by then
        start = max(start, self.cycles - self.moving(name, n, core, busy))
        self.out.append(ins)
        self.ex.cycles[name] += busy
        self.cycles = start + busy
        self.free = dict.fromkeys(self.free, self.cycles)
        self.pending.append((self.cycles + ROB_UNIT_CYCLES, reads, writes))
        return OpTiming(start - before, busy, 0, n)

    def moving(self, name: str, n: int, core: int, busy: int) -> int:
        """Cycles a `send` (`recv`) of `n` bytes to (from) `core` takes from its dispatch to
        its end when the other core is already there and the links are free: the request
        (for a send), the reply, the sender's read, the flits (for a receive) and this
        core's `busy` (`raptor.noc`'s pimsim-nn protocol, as the mirror times it)."""
        t = self.chip.target
        sender, receiver = (self.core, core) if name == "send" else (core, self.core)
        fwd, back = t.flit_ns(sender, receiver), t.flit_ns(receiver, sender)
        flits = noc.flits(t, n)
        if name == "send":
            request, _ = noc.pimsim_request(0, 0, fwd)
            _, ns, _, _ = noc.pimsim_transfer(request, 0, 0, 0, back, fwd, t.ns(busy), flits)
        else:
            _, _, _, arrival = noc.pimsim_transfer(0, 0, 0, 0, back, fwd,
                                                   t.ns(self.chip.send_read(n)), flits)
            ns = arrival + t.ns(busy)
        return math.floor(ns * t.clock_fraction)

    def counter(self, op: SignalOp | WaitOp) -> None:
        """READY/FREE counters as pimsim-nn's event registers of the one core that waits
        on each (`raptor.passes.stream`: one signalling, one waiting core per counter).
        `sync` adds one there; a wait for an absolute count t becomes `wait` for what
        this core has not consumed yet (t - consumed; nothing when <= 0: the ring's
        initial FREE credits), which pimsim-nn subtracts, so the same count is reached."""
        key = (op.counters, op.index)
        waiter = self.ex.waiter.get(key)
        if waiter is None:
            raise ExportError(f"{op.where()}: no core waits on %{op.counters.name}"
                              f"[{op.index}]; a signal needs one waiting core")
        reg = self.ex.event_register(waiter, key)
        if isinstance(op, SignalOp):
            self.serial({"op": "sync", "core": waiter, "event_register": reg}, SCALAR_CYCLES)
            return
        got = self.ex.consumed.get(key, 0)
        need = op.threshold[0].evaluate(self.env) - got
        if need > 0:
            self.ex.consumed[key] = got + need
            self.serial({"op": "wait", "event_register": reg, "wait_value": need}, 0)
        else:
            self.note("wait already satisfied (initial ring credits) dropped")

    # -- one op -------------------------------------------------------------------------
    def lmv(self, dst: int, src: int, n: int) -> None:
        if n == 0 or dst == src:
            return
        rd, rs1 = self.regs.get(dst), self.regs.get(src)
        self.unit({"op": "lmv", "rd": rd, "rs1": rs1, "len": n, "size": n}, self.chip.lmv(n),
                  ranges=([range(src, src + n)], [range(dst, dst + n)]))

    def copy(self, dst: int, src: int, n: int, contiguous: bool) -> None:
        if not contiguous:
            self.note("strided copy as one lmv of its bytes")
        self.lmv(dst, src, n)

    def vector(self, name: str, rd: int, rs1: int, length: int, rs2: int | None = None) -> None:
        ins: Instruction = {"op": name, "rd": self.regs.get(rd), "rs1": self.regs.get(rs1)}
        if rs2 is not None:
            ins["rs2"] = self.regs.get(rs2)
        ins["len"] = length
        act = self.chip.act
        reads = [range(rs1, rs1 + length * act)]
        if rs2 is not None and name not in ("vmv", "vavg"):  # there rs2 is a stride
            reads.append(range(rs2, rs2 + length * act))
        writes = [range(rd, rd + (1 if name == "vavg" else length) * act)]
        self.unit(ins, self.chip.vector(length, VECTOR_OPERANDS[name]), ranges=(reads, writes))

    def lower(self, op: Operation) -> None:
        act = self.chip.act
        if isinstance(op, NO_INSTRUCTION):
            return
        if not isinstance(op, MvmOp):
            self.flush()
        if isinstance(op, LoadOp | StoreOp):
            self.memory(op)
        elif isinstance(op, ExtractSliceOp):
            shape = _shape(op.source)
            first = self.addr(op.source) + _flat(shape, self.offsets(op.offsets)) * act
            self.copy(self.addr(op.result), first, self.nbytes(op.result),
                      is_contiguous(shape, op.sizes, op.strides))
        elif isinstance(op, InsertSliceOp | ParallelInsertSliceOp):
            shape = _shape(op.dest)
            dest = self.addr(op.dest)
            if isinstance(op, InsertSliceOp) and self.addr(op.result) != dest:
                self.lmv(self.addr(op.result), dest, self.nbytes(op.dest))
                dest = self.addr(op.result)
            first = dest + _flat(shape, self.offsets(op.offsets)) * act
            self.copy(first, self.addr(op.source), self.nbytes(op.source),
                      is_contiguous(shape, op.sizes, op.strides))
        elif isinstance(op, ConcatOp):
            shape = _shape(op.result)
            d = op.dim % len(shape)
            at = 0
            for part in op.sources:
                sizes = _shape(part)
                offs = [0] * len(shape)
                offs[d] = at
                at += sizes[d]
                self.copy(self.addr(op.result) + _flat(shape, offs) * act, self.addr(part),
                          self.nbytes(part), is_contiguous(shape, sizes, [1] * len(shape)))
        elif isinstance(op, PadOp):
            n = self.nbytes(op.result)
            fill = _byte(op.value)
            rd = self.regs.get(self.addr(op.result))
            self.unit({"op": "lldi", "rd": rd, "imm": fill, "len": n, "size": n}, self.chip.lldi(n),
                      ranges=([], [range(self.addr(op.result), self.addr(op.result) + n)]))
            shape = _shape(op.result)
            self.copy(self.addr(op.result) + _flat(shape, list(op.low)) * act,
                      self.addr(op.source), self.nbytes(op.source),
                      is_contiguous(shape, _shape(op.source), [1] * len(shape)))
        elif isinstance(op, MaterializeLayoutOp):
            self.lmv(self.addr(op.result), self.addr(op.source), self.nbytes(op.result))
        elif isinstance(op, TransposeOp):
            dims = _shape(op.source)
            stride = math.prod(dims[op.perm[-1] + 1:]) if op.perm else 1
            self.note("transpose as one vmv of all elements")
            self.vector("vmv", self.addr(op.result), self.addr(op.source),
                        math.prod(dims), rs2=stride)
        elif isinstance(op, MvmOp):
            self.mvm(op)
        elif isinstance(op, BinaryOp):
            name = BINARY.get(op.op)
            if name is None:
                raise ExportError(f"{op.where()}: pim.{op.op} has no pimsim-nn instruction "
                                  f"(supported: {', '.join('pim.' + k for k in BINARY)})")
            out = _shape(op.result)
            res = self.addr(op.result)
            lhs, rhs = (self.addr(v) if _shape(v) == out else res for v in (op.lhs, op.rhs))
            if _shape(op.lhs) != out or _shape(op.rhs) != out:
                self.note("broadcast operand read as the result's elements")
            self.vector(name, res, lhs, math.prod(out), rs2=rhs)
        elif isinstance(op, UnaryOp):
            self.unary(op)
        elif isinstance(op, ReduceOp):
            self.reduce(op)
        else:
            raise ExportError(f"{op.where()}: {op.NAME} cannot be exported to pimsim-nn")

    def memory(self, op: LoadOp | StoreOp) -> None:
        buf = self.ex.plan.shared.get(op.buffer)
        if buf is None:
            raise ExportError(f"{op.where()}: %{op.buffer.name} is not a shared buffer")
        shape = _shape(op.buffer)
        glob = buf + _flat(shape, self.offsets(op.offsets)) * self.chip.act
        local = op.result if isinstance(op, LoadOp) else op.value
        n = self.nbytes(local)
        if not is_contiguous(shape, op.sizes, op.strides):
            self.note(f"strided {'load' if isinstance(op, LoadOp) else 'store'} as one "
                      f"{'ld' if isinstance(op, LoadOp) else 'st'} of its bytes")
        pair = self.regs.global_address(glob)
        r = self.regs.get(self.addr(local))
        lead, service = self.chip.global_access(n, self.core, isinstance(op, LoadOp))
        self.drain()
        if self.gm_first is None:
            self.gm_first = self.cycles + lead
        self.gm_cycles += service
        if isinstance(op, LoadOp):
            self.serial({"op": "ld", "rd": r, "rs1": pair, "size": n}, self.chip.ld(n, self.core))
        else:
            self.serial({"op": "st", "rd": pair, "rs1": r, "size": n}, self.chip.st(n, self.core))

    def mvm(self, op: MvmOp) -> None:
        w = self.resolve(op.weight)
        if not isinstance(w.owner, WeightOp):
            raise ExportError(f"{op.where()}: the MVM weight %{op.weight.name} is computed on "
                              "the core; pimsim-nn's crossbars hold weights programmed ahead")
        group, size = self.groups.setdefault(w.owner.symbol, (
            len(self.groups), self.chip.target.crossbars_of(_shape(op.weight))))
        shape = _shape(op.vector)
        k, m = shape[-1], _shape(op.result)[-1]
        rows = math.prod(shape[:-1])
        src, dst = self.addr(op.vector), self.addr(op.result)
        busy = self.chip.mvmul(size)
        act = self.chip.act
        rows_of = [(dst + r * m * act, src + r * k * act, group, size, busy)
                   for r in range(rows)]
        if self.chip.target.mvm_units > 1:
            self.mvms.append(rows_of)
            return
        for out, vec, _, _, _ in rows_of:
            self.unit(self.mvmul(out, vec, group), busy, MVM_GAP_CYCLES)

    def mvmul(self, out: int, vec: int, group: int) -> Instruction:
        return {"op": "mvmul", "rd": self.regs.get(out), "rs1": self.regs.get(vec),
                "group": group, "mbiw": self.chip.target.weight_bits, "relu": 0}

    def flush(self) -> None:
        """The MVMs held back (`mvm_units` > 1), row by row across their ops so that
        different array groups follow each other, timed as pimsim-nn runs them with a
        reorder buffer of `mvm_units` entries (`PimsimChip.config`, measured on ChipTest):
        an instruction is dispatched in order once the entry `mvm_units` back has retired
        (retirement is in order), an `mvmul` once its group is free and no instruction in
        flight writes what it reads or reads what it writes (an `mvmul` reads a whole
        crossbar row of inputs, `PimsimChip.mvm_ranges`): the vector, copy and transfer
        instructions before them (`pending`) as well; the groups' reads and writes take the
        core's one local port in the order they ask for it; the vector, copy and transfer
        instructions after them wait for those they conflict with and for reorder-buffer
        entries (`overlap_flight`), a global-memory access or an event for the last one
        (`drain`)."""
        runs, self.mvms = self.mvms, []
        if not runs:
            return
        if self.flight:
            self.drain()
        pending, self.pending = self.pending, []
        freed = list(itertools.accumulate((t for t, _, _ in pending), max))
        rob, gap = self.chip.target.mvm_units, ROB_MVM_GAP_CYCLES
        mvms = [x for row in itertools.zip_longest(*runs) for x in row if x is not None]
        port = 0  # the local port is free from
        computed: list[int] = []  # per MVM: when it asks to write its outputs
        done: list[int | None] = []
        ranges: list[tuple[range, range]] = []
        last: dict[int, int] = {}  # group -> its latest MVM

        def write_until(t: int) -> None:
            """The port serves the writes asked for by ``t``, in the order asked."""
            nonlocal port
            for i in sorted((i for i, d in enumerate(done) if d is None and computed[i] <= t),
                            key=computed.__getitem__):
                port = max(port, computed[i]) + self.chip.mvmul_parts(mvms[i][3])[2]
                done[i] = port

        def end(i: int) -> int:
            write_until(computed[i])
            d = done[i]
            assert d is not None
            return d

        for j, (out, vec, group, size, busy) in enumerate(mvms):
            back = len(pending) + j - rob  # in-order retirement: this entry and all before
            if 0 <= back < len(pending):
                self.cycles = max(self.cycles, freed[back])
            elif back >= len(pending):
                self.cycles = max(self.cycles, max(freed[-1:] + [end(i) for i in range(
                    back - len(pending) + 1)]) + gap)
            ins = self.mvmul(out, vec, group)
            reads, writes = self.chip.mvm_ranges(vec, out, size)
            wait = [end(last[group])] if group in last else []
            wait += [end(i) for i, (r, w) in enumerate(ranges)
                     if _conflict([reads], [writes], [r], [w]) and end(i) > self.cycles]
            units = [t for t, r, w in pending if _conflict([reads], [writes], r, w)]
            start = max([self.cycles] + [t + gap for t in wait] + units)
            write_until(start)
            read, compute, _ = self.chip.mvmul_parts(size)
            port = max(port, start) + read
            computed.append(port + compute)
            done.append(None)
            ranges.append((reads, writes))
            last[group] = j
            self.out.append(ins)
            self.ex.cycles["mvmul"] += busy + gap
            self.cycles = start + SCALAR_CYCLES
        ends = [end(i) for i in range(len(mvms))]
        self.flight = [(t, done, r, w) for t, done, (r, w)
                       in zip(ends, itertools.accumulate(ends, max), ranges, strict=True)]
        self.after = 0

    def unary(self, op: UnaryOp) -> None:
        n = math.prod(_shape(op.result))
        res, x = self.addr(op.result), self.addr(op.source)
        if op.op in UNARY:
            self.vector(UNARY[op.op], res, x, n)
        elif op.op == "silu":
            self.vector("vsigm", res, x, n)
            self.vector("vvmul", res, x, n, rs2=res)
        elif op.op == "clip":
            lo, hi = (_number(op.attrs.get(k)) for k in ("min", "max"))
            self.vector("vrsl", res, x, n, rs2=_imm(lo))
            self.vector("vrsu", res, res, n, rs2=_imm(hi))
        elif op.op == "vscale":
            nbytes = n * self.chip.act
            factor = _byte(_number(op.attrs.get("factor")))
            self.unit({"op": "lldi", "rd": self.regs.get(res), "imm": factor, "len": nbytes,
                       "size": nbytes}, self.chip.lldi(nbytes),
                      ranges=([], [range(res, res + nbytes)]))
            self.vector("vvmul", res, x, n, rs2=res)
        else:
            raise ExportError(f"{op.where()}: pim.{op.op} has no pimsim-nn instruction "
                              "sequence (supported: relu, sigmoid, tanh, silu, clip, vscale)")

    def reduce(self, op: ReduceOp) -> None:
        """One `vavg` per result element over the elements it reduces, when they are
        evenly spaced (the reduced dimensions, in order, stride like one dimension)."""
        shape = _shape(op.source)
        strides = _strides(shape)
        dims = sorted(op.dims)
        count = math.prod(shape[d] for d in dims)
        step = strides[dims[-1]] if dims else 1
        for a, b in itertools.pairwise(dims):
            if strides[a] != strides[b] * shape[b]:
                raise ExportError(f"{op.where()}: pim.{op.op} over dims {dims} of "
                                  f"{list(shape)} is not one strided run per result")
        kept = [d for d in range(len(shape)) if d not in dims]
        self.note(f"pim.{op.op} as vavg per result element")
        act = self.chip.act
        src, res = self.addr(op.source), self.addr(op.result)
        for j, idx in enumerate(itertools.product(*(range(shape[d]) for d in kept))):
            base = sum(i * strides[d] for i, d in zip(idx, kept, strict=True))
            self.vector("vavg", res + j * act, src + base * act, count, rs2=step)


def _meet(a: range, b: range) -> bool:
    """pimsim-nn's overlap test (`isOverlap`): ranges that only touch also meet."""
    return a.start <= b.stop and b.start <= a.stop


def _conflict(reads: list[range], writes: list[range], their_reads: list[range],
              their_writes: list[range]) -> bool:
    """Whether an instruction reading `reads` and writing `writes` waits for one in flight
    (pimsim-nn's `isConflict`): it reads what that one writes, or writes what it reads."""
    return (any(_meet(r, w) for r in reads for w in their_writes)
            or any(_meet(w, r) for w in writes for r in their_reads))


def _imm(x: float) -> int:
    """A bound as `sldi`'s 32-bit immediate, saturated (an unbounded clip side, +-inf or
    FLT_MAX, becomes the largest integer of its sign)."""
    return int(max(-(2.0 ** 31), min(2.0 ** 31 - 1, round(x) if math.isfinite(x) else x)))


def _byte(x: float) -> int:
    """`lldi`'s one-byte fill: the value as a signed 8-bit integer, saturated (so -inf,
    the max-pool padding, is the smallest byte)."""
    return int(max(-128.0, min(127.0, round(x) if math.isfinite(x) else x))) & 0xFF


def _number(a: object) -> float:
    value = getattr(a, "value", a)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExportError(f"expected a number attribute, got {a!r}")
    return float(value)


class _Exporter:
    def __init__(self, module: Module, chip: PimsimChip, plan: MemoryPlan,
                 inferences: int | None = None) -> None:
        self.module = module
        self.chip = chip
        self.plan = plan
        self.inferences = inferences
        self.waiter: dict[tuple[Value, int], int] = {}
        """(counter array, index) -> the core that waits on it."""
        self.events: dict[int, dict[tuple[Value, int], int]] = {}
        """Per waiting core, its event register of each counter."""
        self.consumed: dict[tuple[Value, int], int] = {}
        self.repeated: list[OpTiming] = []
        self.timings: dict[tuple[int, Operation], OpTiming] = {}
        self.notes: Counter[str] = Counter(plan.notes)
        self.cycles: Counter[str] = Counter()

    def event_register(self, core: int, key: tuple[Value, int]) -> int:
        regs = self.events.setdefault(core, {})
        reg = regs.get(key)
        if reg is None:
            if len(regs) == EVENT_REGISTERS:
                raise ExportError(f"core {core} waits on more than {EVENT_REGISTERS} READY/"
                                  f"FREE counters; pimsim-nn has {EVENT_REGISTERS} event "
                                  "registers per core")
            reg = regs[key] = len(regs)
        return reg

    def run(self) -> Export:
        func = self.module.main()
        cores: dict[int, CoreProgram] = {}
        jobs: list[tuple[int, Block, dict[Value, int]]] = []
        for op in func.body.ops:
            if isinstance(op, CoreOp):
                jobs.append((op.core, op.body, {}))
            elif isinstance(op, CoreBatchOp):
                lane = op.body.args[0]
                jobs.extend((c, op.body, {lane: i}) for i, c in enumerate(op.cores))
            elif not isinstance(op, WeightOp | AllocSharedOp | ReturnOp):
                raise ExportError(f"{op.where()}: {op.NAME} at function level is not "
                                  "scheduled IR")
        for core, body, _ in jobs:
            for op in body.walk():
                if isinstance(op, WaitOp):
                    other = self.waiter.setdefault((op.counters, op.index), core)
                    if other != core:
                        raise ExportError(f"{op.where()}: cores {other} and {core} both wait "
                                          f"on %{op.counters.name}[{op.index}]; an event "
                                          "register belongs to one core")
        n = self.chip.target.num_cores
        for core, body, fixed in jobs:
            if not 0 <= core < n:
                raise ExportError(f"core {core} is outside the {n} cores of target "
                                  f"{self.chip.target.name}")
            cores[core] = _CoreLowering(self, core, body, fixed).run()
        return Export(self.chip, cores, self.plan, self.timings, self.notes,
                      cycles=self.cycles, repeated=self.repeated)


def lower_module(module: Module, plan: MemoryPlan, chip: PimsimChip,
                 inferences: int | None = None) -> Export:
    """Instructions for every core of scheduled `module` (addresses from `plan`); a stream
    program unrolled for `inferences` (default: its own count)."""
    return _Exporter(module, chip, plan, inferences).run()
