"""Local-memory allocation of scheduled IR: an address in its core's scratchpad for every
value a core holds, buffers reused after their last use, and the peak per core checked
against the target's `local_memory_bytes` (shared memory against `shared_memory_bytes`).

What takes local memory: received fragments, compute results kept for later computes,
sends or stores, every intermediate of a compute body (gathered input buffers, slices, MVM
inputs and outputs, vector results, pads, concats, transposes, loaded input boxes), the
batch results of `spat.scheduled_compute_batch`, constants read by vector ops (bias rows:
resident from the start), and a staging buffer for a region send that is not contiguous
(pimsim-nn's `send` reads one contiguous range). Crossbar weights live in the crossbars;
function inputs and results in shared memory.

What takes none (views): `tensor.reshape`, `spat.lane_result` (a lane's slot of its batch
result), a `tensor.extract_slice` of one contiguous range (read where it is), block
arguments (the compute's inputs), yielded values (the compute's result *is* the yielded
buffer), an insert into a buffer that dies there, and an elementwise op on an operand that
dies there (in place: every element is read before it is written). Anything else gets a
fresh buffer, so a multi-instruction op never overwrites what it still reads.

Lifetimes are intervals of program steps (one per top-level op and per body op; a batch
body is counted once, its lanes reuse the same intermediates, and what a batch body reads
from outside stays live for the whole batch). Addresses are placed offline (`_addresses`);
the footprint (highest address used) is what must fit, the live peak (largest sum of
buffers live at one step) is the lower bound any allocator would need.

With `mvm_units` > 1 the pimsim-nn export interleaves the rows of a body's consecutive
`pim.mvm`s (`raptor.export.pimsim`), and pimsim-nn holds an `mvmul` while it reads bytes
one in flight writes, or writes bytes one reads (ranges that only touch count). Where the
serial layout has them meet, the buffers of such a run stay live until its last MVM and
each keeps free what pimsim-nn reads or writes of it (a whole crossbar row of inputs, the
group's outputs) plus a byte: the groups' bytes are disjoint and pimsim-nn overlaps them
(mlp at 4 units: 8,888 -> 4,966 ns on pimsim-nn). If that does not fit, the core keeps
the serial layout (`MemoryPlan.notes`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

import numpy as np

from raptor.ir.core import Block, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    AllocSharedOp,
    BinaryOp,
    ChannelSendOp,
    CoreBatchOp,
    CoreOp,
    EmptyOp,
    ExtractSliceOp,
    InsertSliceOp,
    LaneResultOp,
    MvmOp,
    ReshapeOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    StreamOp,
    UnaryOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import TensorType
from raptor.noc import activation_bytes
from raptor.target import Target

ALIGN = 4
"""Byte alignment of local buffers (one f32 element)."""
SHARED_ALIGN = 32
"""Byte alignment of shared-memory buffers (one access of the default target)."""


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a value lives: `nbytes` contiguous bytes at `addr`, row-major."""

    addr: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.addr + self.nbytes


@dataclass
class CoreMemory:
    """One core's allocation."""

    core: int
    peak_bytes: int
    """Footprint: the highest address any buffer reaches."""
    live_peak_bytes: int
    """The largest sum of bytes live at one step (what a perfect allocator would need)."""
    peak_where: str
    """The op at the step where the live peak is reached."""
    buffers: int
    staging: dict[Operation, Slot] = field(default_factory=dict)
    """Per region send that is not contiguous: the buffer it is packed into."""
    concurrent: bool = True
    """Whether the MVMs a body runs at once (`mvm_units` > 1) touch none of each other's
    bytes."""
    layout: Callable[[], dict[Value, Slot]] = field(default=dict, repr=False, compare=False)
    """Makes `slots`."""

    @cached_property
    def slots(self) -> dict[Value, Slot]:
        """Where each value lives, made when first read (by the pimsim-nn exporter and
        tests: a plan of a program simulated or only judged by its footprint never reads
        it, and on ResNet-50's stream programs it was a seventh of `plan_memory`)."""
        return self.layout()


@dataclass
class MemoryPlan:
    """Local memory of every core and the shared-memory layout of a scheduled module."""

    target: Target
    cores: dict[int, CoreMemory]
    shared: dict[Value, int]
    """Shared-memory address of each function input and `pim.alloc_shared` buffer."""
    shared_bytes: int
    element_bytes: int
    notes: list[str] = field(default_factory=list)
    """What the plan could not do as asked (a core laid out for serial MVMs)."""

    @property
    def peak(self) -> CoreMemory | None:
        """The core with the largest footprint."""
        return max(self.cores.values(), key=lambda c: (c.peak_bytes, -c.core), default=None)

    def _over(self, c: CoreMemory) -> str:
        t = self.target
        return (f"core {c.core} needs {c.peak_bytes:,} bytes of local memory (live peak "
                f"{c.live_peak_bytes:,} at {c.peak_where}) but target {t.name} has "
                f"{t.local_memory_bytes:,} (local_memory_bytes)")

    def _shared_over(self) -> list[str]:
        t = self.target
        return [f"shared memory holds {self.shared_bytes:,} bytes of inputs, results and "
                f"spilled values but target {t.name} has {t.shared_memory_bytes:,} "
                "(shared_memory_bytes)"
                ] if self.shared_bytes > t.shared_memory_bytes else []

    def over_capacity(self) -> list[str]:
        """One line per core (and for shared memory) that does not fit the target."""
        return [self._over(c) for c in sorted(self.cores.values(), key=lambda c: c.core)
                if c.peak_bytes > self.target.local_memory_bytes] + self._shared_over()

    def over_summary(self) -> list[str]:
        """What `over_capacity` says, in one line for local memory (the worst core, its
        peak and where it is reached, how many cores are over) and one for shared memory."""
        over = sorted((c for c in self.cores.values()
                       if c.peak_bytes > self.target.local_memory_bytes),
                      key=lambda c: (-c.peak_bytes, c.core))
        others = f"; {len(over)} of {len(self.cores)} cores are over" if len(over) > 1 else ""
        return ([self._over(over[0]) + others] if over else []) + self._shared_over()

    def to_dict(self) -> dict[str, Any]:
        top = self.peak
        t = self.target
        return {
            "capacity_bytes": t.local_memory_bytes,
            "element_bytes": self.element_bytes,
            "peak_bytes": top.peak_bytes if top else 0,
            "peak_core": top.core if top else None,
            "live_peak_bytes": max((c.live_peak_bytes for c in self.cores.values()),
                                   default=0),
            "fits": not self.over_capacity(),
            "per_core": {str(c.core): {"peak_bytes": c.peak_bytes,
                                       "live_peak_bytes": c.live_peak_bytes,
                                       "buffers": c.buffers}
                         for c in sorted(self.cores.values(), key=lambda c: c.core)},
            "shared": {"bytes": self.shared_bytes, "capacity_bytes": t.shared_memory_bytes},
        }


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


@cache
def _tensor_numel(t: TensorType) -> int:
    return t.numel


def _numel(t: object) -> int:
    """Elements of a static tensor type (cached: programs repeat a few types many times)."""
    return _tensor_numel(t) if isinstance(t, TensorType) else 0


def _value_bytes(v: Value, element_bytes: int) -> int:
    return _numel(v.type) * element_bytes


def gather_fits(shape: Sequence[int], target: Target) -> bool:
    """Whether one core can gather a value of `shape` into dense storage: it holds the
    received fragments and the dense copy at once (twice the value), within half its local
    memory (the other half for what the core keeps meanwhile: a larger gather left cores
    of PP-OCR's classifier without room). Lowering keeps a value that cannot distributed
    instead (`Lowering.dense_of`)."""
    return 4 * math.prod(shape) * activation_bytes(target) <= target.local_memory_bytes


def lane_fits(nbytes: int, target: Target, quarters: int = 3) -> bool:
    """Whether one lane's buffers of `nbytes` leave a core room for the values it waits
    for: at most `quarters` quarters of its local memory. Lowering makes lanes finer until
    they do (`raptor.passes.lower`: fewer row tiles per convolution lane, three quarters:
    ResNet-18 at 4 MVM units: half 3.53 ms, three quarters 2.82 ms, all of it 5.14 ms
    simulated, docs/benchmarks.md; channel chunks of a row-wise op, one quarter)."""
    return nbytes <= target.local_memory_bytes * quarters // 4


def mvm_row_elements(target: Target, crossbars: int) -> tuple[int, int]:
    """The elements pimsim-nn holds one row of an `mvmul` on an array group of `crossbars`
    for against the instructions in flight: a whole crossbar row of inputs, whatever the
    tile's rows, and the group's outputs (`PimsimChip.mvm_ranges`, `_CoreAllocator.close_run`)."""
    return target.crossbar_rows, crossbars * target.crossbar_cols


def is_contiguous(shape: Sequence[int], sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether a strided region of a row-major tensor is one contiguous range: every
    dimension inside the outermost non-unit one is whole, and non-unit ones have stride 1."""
    dims = [d for d, n in enumerate(sizes) if n > 1]
    if not dims:
        return True
    return all(strides[d] == 1 for d in dims) and \
        all(sizes[e] == shape[e] for e in range(dims[0] + 1, len(shape)))


NO_INSTRUCTION = (ReshapeOp, EmptyOp, LaneResultOp, YieldOp, WeightOp)
"""Ops the pimsim-nn export emits nothing for: they do not end a body's run of MVMs."""

IN_PLACE_UNARY = frozenset({"relu", "sigmoid", "tanh"})
"""Unary ops that may write over their dying operand: one elementwise pass each (the
exporter emits them as one vector instruction). Binary ops always may."""


class _Storage:
    __slots__ = ("addr", "end", "pinned", "reach", "refs", "size", "start")

    def __init__(self, size: int, start: int, pinned: bool = False) -> None:
        self.size = size
        self.reach = size
        """Bytes from `addr` kept free of other live buffers (more than `size` where
        concurrent MVMs read or write past it)."""
        self.start = start
        self.end = start
        self.refs = 0
        self.pinned = pinned
        self.addr = 0


class _CoreAllocator:
    """Lifetimes of one core's program, then addresses."""

    def __init__(self, body: Block, core: int, element_bytes: int,
                 target: Target | None = None, disjoint: bool = False,
                 carried: dict[Value, int] | None = None) -> None:
        self.core = core
        self.carried = carried or {}
        """A stream's values carried across iterations, with their live copies
        (`_iteration`): held for the whole iteration on top of their own lifetimes."""
        self.eb = element_bytes
        self.target = target if target is not None and target.mvm_units > 1 else None
        """Set when a body's consecutive MVMs run at once (`mvm_units` > 1)."""
        self.disjoint = disjoint and self.target is not None
        """Whether to lay the buffers of MVMs running at once out apart."""
        self.run_mvms: list[tuple[MvmOp, int]] = []
        """The current run of consecutive MVMs of a body, with their steps."""
        self.touched: list[list[tuple[int, bool, _Storage, int, int]]] = []
        """Per run of MVMs, the bytes pimsim-nn holds them for: (MVM of the run, whether
        it writes them, buffer, offset, length)."""
        self.body = body
        self.uses = Counter(v for op in body.walk() for v in op.operands())
        self.loc: dict[Value, tuple[_Storage, int]] = {}
        self.weights: dict[Value, Value] = {}
        """Block argument -> the function weight it stands for."""
        self.storages: list[_Storage] = []
        self.staging: dict[Operation, _Storage] = {}
        self.step = 0
        self.where: list[tuple[Operation, Operation | None] | None] = [None]
        """Per step, the op (and its compute) for messages."""

    # -- storages ----------------------------------------------------------------------
    def nbytes(self, v: Value) -> int:
        return _value_bytes(v, self.eb)

    def new(self, v: Value, start: int | None = None, pinned: bool = False) -> _Storage:
        s = _Storage(self.nbytes(v), self.step if start is None else start, pinned)
        self.storages.append(s)
        self.bind(v, s, 0)
        return s

    def bind(self, v: Value, s: _Storage, offset: int) -> None:
        self.loc[v] = (s, offset)
        s.refs += self.uses.get(v, 0)

    def resolve(self, v: Value) -> Value:
        return self.weights.get(v, v)

    def place(self, v: Value) -> tuple[_Storage, int] | None:
        """Where `v` lives; a function weight read as data gets a buffer resident from the
        start (a constant loaded with the program), never reused while the program runs."""
        v = self.resolve(v)
        got = self.loc.get(v)
        if got is None and isinstance(v.owner, WeightOp) and isinstance(v.type, TensorType):
            self.new(v, start=0, pinned=True)
            got = self.loc[v]
        return got

    def use(self, v: Value) -> _Storage | None:
        got = self.place(v)
        if got is None:
            return None
        s = got[0]
        s.end = max(s.end, self.step)
        s.refs -= 1
        return s

    def tick(self, op: Operation, parent: Operation | None = None) -> None:
        self.step += 1
        self.where.append((op, parent))

    # -- program ---------------------------------------------------------------------
    def run(self) -> None:
        for op in self.body.ops:
            if isinstance(op, ScheduledComputeOp):
                self.compute(op)
            elif isinstance(op, ScheduledComputeBatchOp):
                self.batch(op)
            else:
                self.tick(op)
                self.op(op, local_from=0)
        for v, copies in self.carried.items():
            held = _Storage(self.nbytes(v) * copies, 0, pinned=True)
            held.end = self.step
            self.storages.append(held)

    def enter(self, op: ScheduledComputeOp | ScheduledComputeBatchOp,
              args: Sequence[Value]) -> None:
        """Block arguments alias the inputs (weights stay weights until read as data)."""
        self.tick(op)
        for a, v in zip(args, op.inputs, strict=True):
            if v in self.loc:
                self.bind(a, *self.loc[v])
            elif isinstance(v.owner, WeightOp):
                self.weights[a] = v
        for v in op.inputs:
            if v in self.loc:
                self.use(v)

    def compute(self, op: ScheduledComputeOp) -> None:
        self.enter(op, op.body.args)
        for inner in op.body.ops:
            self.tick(inner, op)
            self.runs(inner)
            if isinstance(inner, YieldOp):
                for out, v in zip(op.outs, inner.values, strict=True):
                    self.use(v)
                    got = self.place(v)
                    if got is not None:
                        self.bind(out, *got)
            else:
                self.op(inner, local_from=0)
        self.close_run()

    def batch(self, op: ScheduledComputeBatchOp) -> None:
        n = len(op.inputs)
        args = op.body.args
        self.enter(op, args[1:1 + n])
        for a, r in zip(args[1 + n:], op.outs, strict=True):
            self.bind(a, self.new(r, pinned=True), 0)
        first = self.step + 1
        outside: list[_Storage] = []
        for inner in op.body.ops:
            self.tick(inner, op)
            for v in inner.operands():
                got = self.loc.get(self.resolve(v))
                if got is not None and got[0].start < first:
                    outside.append(got[0])
            self.runs(inner)
            self.op(inner, local_from=first)
        self.close_run()
        for s in outside:  # read by every lane: live until the last one is done
            s.end = max(s.end, self.step)

    def runs(self, op: Operation) -> None:
        """Track a body's runs of MVMs as the exporter emits them: an op other than an MVM
        or a view the exporter skips ends the run."""
        if self.target is None:
            return
        if isinstance(op, MvmOp):
            self.run_mvms.append((op, self.step))
        elif not isinstance(op, NO_INSTRUCTION):
            self.close_run()

    def close_run(self) -> None:
        """Record the bytes pimsim-nn holds a run's MVMs for: a crossbar row of inputs per
        input row, the group's outputs per output row. Laid out apart (`disjoint`), the
        run's buffers stay live until its last MVM and each reaches one byte past those
        bytes, so the MVMs of a run meet none of each other's."""
        run, self.run_mvms = self.run_mvms, []
        t = self.target
        if t is None or len(run) < 2:
            return
        last = run[-1][1]
        touched: list[tuple[int, bool, _Storage, int, int]] = []
        for i, (mvm, _) in enumerate(run):
            vec, res, w = mvm.vector.type, mvm.result.type, mvm.weight.type
            if not (isinstance(vec, TensorType) and isinstance(res, TensorType)
                    and isinstance(w, TensorType)):
                continue
            rows = _numel(vec) // vec.static_shape[-1]
            reads, writes_n = mvm_row_elements(t, t.crossbars_of(w.static_shape))
            for v, writes, row, width in (
                    (mvm.vector, False, vec.static_shape[-1], reads),
                    (mvm.result, True, res.static_shape[-1], writes_n)):
                got = self.place(v)
                if got is None:
                    continue
                s, off = got
                length = ((rows - 1) * row + width) * self.eb
                touched.append((i, writes, s, off, length))
                if self.disjoint:
                    s.end = max(s.end, last)
                    s.reach = max(s.reach, off + length + 1)
        self.touched.append(touched)

    def clashes(self) -> bool:
        """Whether, as placed, an MVM of a run reads bytes another writes (pimsim-nn's
        ranges meet when they only touch)."""
        for run in self.touched:
            spans = [(i, w, s.addr + off, s.addr + off + n) for i, w, s, off, n in run]
            if any(i != j and w and not v and lo <= b and a <= hi
                   for i, w, lo, hi in spans for j, v, a, b in spans):
                return True
        return False

    def op(self, op: Operation, local_from: int) -> None:
        """One op that is not a compute: its reads, then where its result lives."""
        if isinstance(op, MvmOp):
            if not isinstance(self.resolve(op.weight).owner, WeightOp):
                self.use(op.weight)  # a weight computed on the core: read as data
            self.use(op.vector)
            self.new(op.result)
            return
        read = [self.use(v) for v in op.operands()]
        if isinstance(op, ReshapeOp | LaneResultOp):
            got = self.place(op.source)
            if got is not None:
                extra = op.lane * self.nbytes(op.result) if isinstance(op, LaneResultOp) else 0
                self.bind(op.result, got[0], got[1] + extra)
            return
        if isinstance(op, ExtractSliceOp) and all(a.is_const for a in op.offsets):
            src = op.source.type
            got = self.place(op.source)
            if got is not None and isinstance(src, TensorType) \
                    and is_contiguous(src.static_shape, op.sizes, op.strides):
                # one contiguous range of the source: read it where it is
                first = 0
                for a, n in zip(op.offsets, src.static_shape, strict=True):
                    first = first * n + a.const  # the flat index of the first element
                self.bind(op.result, got[0], got[1] + first * self.eb)
                return
        if isinstance(op, ChannelSendOp):
            t = op.value.type
            if op.message is not None and isinstance(t, TensorType) \
                    and not is_contiguous(t.static_shape, op.sizes, op.strides):
                s = _Storage(_numel(op.message) * self.eb, self.step)
                self.storages.append(s)
                self.staging[op] = s
            return
        candidates: list[Value] = []
        if isinstance(op, InsertSliceOp):
            candidates = [op.dest]
        elif isinstance(op, BinaryOp) or (isinstance(op, UnaryOp) and op.op in IN_PLACE_UNARY):
            candidates = [v for v in op.operands() if v.type == op.result.type]
        for v in candidates:
            got = self.loc.get(self.resolve(v))
            if got is None:
                continue
            s, off = got
            if s.refs or s.pinned or off or s.size != self.nbytes(v) or s.start < local_from:
                continue
            if isinstance(op, InsertSliceOp) and read[0] is s:
                continue  # inserting a part of the buffer into itself
            self.bind(op.results()[0], s, 0)
            return
        for r in op.results():
            if isinstance(r.type, TensorType):
                self.new(r)

    # -- addresses -------------------------------------------------------------------
    def allocate(self) -> CoreMemory:
        peak = _addresses(self.storages, self.step)
        live, at = _live_peak(self.storages, self.step)
        loc, weights, eb = self.loc, self.weights, self.eb

        def layout() -> dict[Value, Slot]:  # the buffers' addresses are final here
            slots = {v: Slot(s.addr + off, _value_bytes(v, eb)) for v, (s, off) in loc.items()}
            for a, w in weights.items():  # block arguments standing for data weights
                if w in slots:
                    slots[a] = slots[w]
            return slots

        at_op = self.where[min(at, len(self.where) - 1)]
        return CoreMemory(self.core, peak, live, _describe(*at_op) if at_op else "start",
                          len(self.storages),
                          {op: Slot(s.addr, s.size) for op, s in self.staging.items()},
                          concurrent=self.disjoint or not self.clashes(), layout=layout)


def _meetings(storages: Sequence[_Storage]) -> list[list[int]]:
    """Per buffer, the other buffers whose lifetimes meet its own. Two lifetimes meet when
    the later-starting one starts before the other ends, so one sweep in order of start
    finds every pair once: O(n log n + pairs), where testing every placed buffer at each
    placement was quadratic (ResNet-18's cores hold ~2,700 buffers, each meeting ~70)."""
    n = len(storages)
    start, end, _ = _lifetimes(storages)
    by_start = np.lexsort((np.arange(n), start))
    sorted_start = start[by_start]
    upto = np.searchsorted(sorted_start, end[by_start], side="right").tolist()
    ids = by_start.tolist()
    meets: list[list[int]] = [[] for _ in range(n)]
    for pos, i in enumerate(ids):
        later = ids[pos + 1:upto[pos]]
        meets[i].extend(later)
        for j in later:
            meets[j].append(i)
    return meets


def _place(storages: Sequence[_Storage], order: Sequence[int],
           meets: Sequence[Sequence[int]], give_up: int | None = None) -> int | None:
    """Give each buffer, in `order`, the lowest address free of every placed buffer whose
    lifetime meets its own (`meets`); returns the footprint, or None (some buffers placed)
    as soon as it is over `give_up` (it only grows). A placed buffer hands its
    span to the neighbours still to place, as one int (start above `_SPAN_BITS`, end
    below): sorting ints, where gathering and sorting (start, end) pairs per buffer was
    a sixth of `plan_memory` (13 % less CPU on ResNet-18's stream programs,
    docs/benchmarks.md)."""
    placed = [False] * len(storages)
    near: list[list[int]] = [[] for _ in storages]
    """Per buffer not yet placed, the spans of its placed neighbours."""
    peak = 0
    for i in order:
        s = storages[i]
        size = _align(max(s.reach, 1), ALIGN)
        # first fit: scanning the placed buffers by address, the candidate address is the
        # highest end seen so far; the first buffer starting `size` past it leaves the gap
        # (the order among equal starts does not matter: each ends past its start)
        addr = 0
        spans, near[i] = near[i], []
        spans.sort()
        for v in spans:
            if (v >> _SPAN_BITS) - addr >= size:
                break
            end = v & _SPAN_MASK
            if end > addr:
                addr = end
        s.addr = addr
        placed[i] = True
        span = (addr << _SPAN_BITS) | (addr + size)
        for j in meets[i]:
            if not placed[j]:
                near[j].append(span)
        peak = max(peak, addr + s.reach)
        if give_up is not None and peak > give_up:
            return None
    return peak


_SPAN_BITS = 48
"""`_place`'s spans: an address or end below 2**48 bytes (256 TiB), far above any local
memory, so start << 48 | end orders spans by start."""
_SPAN_MASK = (1 << _SPAN_BITS) - 1


def _addresses(storages: Sequence[_Storage], steps: int) -> int:
    """Addresses for one core's buffers; returns the footprint. Two offline orders, the
    better kept: greedy by breadth (the steps with the most bytes live first, each one's
    buffers largest first) where it reaches the live peak or is under greedy by size's
    footprint, else greedy by size. Placing what is live at the fullest steps first keeps
    smaller, shorter-lived buffers from splitting the space there; on ResNet-18's cores the
    footprint stays within about a tenth of the live peak (first-fit in order of definition
    needed up to a fifth more). By breadth is given up as soon as its footprint passes the
    live peak, and again, after by size, once it passes by size's: the same addresses, and
    on ResNet-18's stream programs (where by size wins on 72 of 128 cores, by breadth
    passing it within its first tenth or so of buffers) 14 % less CPU."""
    if not storages:
        return 0
    n = len(storages)
    start, end, _ = _lifetimes(storages)
    breadth = _breadth(storages, steps)
    rank = np.empty(len(breadth), dtype=np.int64)
    rank[np.argsort(-breadth, kind="stable")] = np.arange(len(breadth))
    # the fullest step of each lifetime [start, end]: one reduceat over the interleaved
    # bounds (every other result; end + 1 < len(rank) as ends are steps)
    first = np.minimum.reduceat(rank, np.stack([start, end + 1], axis=1).ravel())[::2].tolist()
    by_breadth = sorted(range(n), key=lambda i: (first[i], -storages[i].size, i))
    by_size = sorted(range(n), key=lambda i: (-storages[i].size, storages[i].start, i))
    meets = _meetings(storages)
    live = int(breadth.max())  # the live peak: no order can do better
    best = _place(storages, by_breadth, meets, live)
    if best is not None:
        return best
    other = _place(storages, by_size, meets)
    assert other is not None
    kept = [s.addr for s in storages]
    best = _place(storages, by_breadth, meets, max(other - 1, live))
    if best is not None:
        return best
    for s, a in zip(storages, kept, strict=True):
        s.addr = a
    return other


def _describe(op: Operation, parent: Operation | None) -> str:
    """An op for a message: its location, else its name and the compute it belongs to."""
    if op.loc is not None:
        return str(op.loc)
    name = getattr(op, "op", None)
    text = f"pim.{name}" if isinstance(name, str) and op.NAME.startswith("pim.") else op.NAME
    results = (parent or op).results()
    if results and results[0].name:
        text += f" of %{results[0].name}" if parent is not None else f" %{results[0].name}"
    return text


def _lifetimes(storages: Sequence[_Storage], kept: bool = False
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts, ends and sizes of the buffers (`kept`: the bytes each keeps free, its reach)."""
    n = len(storages)
    return (np.fromiter((s.start for s in storages), np.int64, n),
            np.fromiter((s.end for s in storages), np.int64, n),
            np.fromiter((s.reach if kept else s.size for s in storages), np.int64, n))


def _breadth(storages: Sequence[_Storage], steps: int, kept: bool = False) -> np.ndarray:
    """Bytes live (`kept`: kept free, `_lifetimes`) at each step (0 to steps + 1)."""
    start, end, size = _lifetimes(storages, kept)
    delta = np.zeros(steps + 2, dtype=np.int64)
    np.add.at(delta, start, size)
    np.add.at(delta, end + 1, -size)
    return np.cumsum(delta)


def _live_peak(storages: Sequence[_Storage], steps: int, kept: bool = False
               ) -> tuple[int, int]:
    """(largest sum of live (`kept`: kept free) bytes, the first step where it is reached)."""
    breadth = _breadth(storages, steps, kept)
    at = int(breadth.argmax())
    return int(breadth[at]), at


def _iteration(body: Block) -> tuple[Block, dict[Value, int]]:
    """What a core holds at once: its program, or for a stream program (`pim.stream`, one
    loop) one iteration's ops (`pim.lag` regions opened), and the values it carries across
    the loop's back edge (read at a higher lag than defined) with how many inferences' copies
    of each can be live at once: the lag difference, one more where a reader stands after
    the definition (the next inference's copy is made before the reader takes the last)."""
    if not (len(body.ops) == 1 and isinstance(body.ops[0], StreamOp)):
        return body, {}
    if not body.ops[0].lags:
        return body.ops[0].body, {}
    staged = list(body.ops[0].staged())
    defs = {v: (i, lag) for i, (lag, op) in enumerate(staged) for v in op.results()}
    carried: dict[Value, int] = {}
    for i, (lag, op) in enumerate(staged):
        for v in {v for o in op.walk() for v in o.operands()}:
            at, home = defs.get(v, (i, lag))
            if home < lag:
                carried[v] = max(carried.get(v, 0), lag - home + (i > at))
    return Block([], [op for _, op in staged]), carried


def compute_memory(op: ScheduledComputeOp | ScheduledComputeBatchOp, element_bytes: int,
                   target: Target | None = None) -> tuple[int, dict[str, int]]:
    """What one compute needs of local memory by itself, by the rules above: the most
    bytes its gathered inputs, intermediates and results hold at once (not the values
    defined outside it that it reads: a scheduler adds those, where they live), and the
    constants it reads as data by symbol (resident on its core for the whole program).
    With a `target` of `mvm_units` > 1, in the layout `plan_memory` gives it
    (`_laid_out`): where its MVMs' buffers are laid out apart, each counts until the last
    MVM of its run and with the bytes kept free past it (mlp at 4 units: 515 bytes for each
    of its five computes, whose serial layout counts 220-456)."""
    alloc = _laid_out(Block([], [op]), -1, element_bytes, target)[0]
    consts = {v.owner.symbol: alloc.loc[v][0] for v in alloc.loc if isinstance(v.owner, WeightOp)}
    held = {id(s) for s in consts.values()}
    peak = _live_peak([s for s in alloc.storages if id(s) not in held], alloc.step,
                      alloc.disjoint)[0]
    return peak, {k: s.size for k, s in consts.items()}


def plan_memory(module: Module, target: Target, element_bytes: int | None = None) -> MemoryPlan:
    """Allocate local memory for every core program of `module`'s main function and lay
    out shared memory, `element_bytes` per tensor element (default: the target's
    activation precision, see `activation_bytes`)."""
    eb = activation_bytes(target) if element_bytes is None else element_bytes
    func = module.main()
    shared: dict[Value, int] = {}
    top = 0
    buffers = [*func.args, *(op.result for op in func.body.ops if isinstance(op, AllocSharedOp))]
    for v in buffers:
        shared[v] = top
        top = _align(top + _numel(v.type) * eb, SHARED_ALIGN)
    cores: dict[int, CoreMemory] = {}
    notes: list[str] = []
    for op in func.body.ops:
        if isinstance(op, CoreOp | CoreBatchOp):  # a batch's sizes do not depend on the lane
            ids, (body, carried) = ((op.core,), _iteration(op.body)) \
                if isinstance(op, CoreOp) else (op.cores, (op.body, {}))
            _, mem, note = _laid_out(body, ids[0], eb, target, carried)
            assert mem is not None  # a core's allocation has addresses
            if note is not None:
                notes.append(note)
            cores.update((c, dataclasses.replace(mem, core=c)) for c in ids)
    return MemoryPlan(target, cores, shared, top, eb, notes)


def _laid_out(body: Block, core: int, element_bytes: int, target: Target | None,
              carried: dict[Value, int] | None = None
              ) -> tuple[_CoreAllocator, CoreMemory | None, str | None]:
    """One core's allocation in the layout the memory plan uses: serial, or at
    `mvm_units` > 1 where the serial layout has MVMs running at once share bytes, their
    buffers apart if that fits (the larger of the serial footprint and local memory; else
    a note says why not). Returns the allocator, its addresses (none for a serial layout
    that no MVMs run concurrently in, when `core` is -1: a compute measured alone needs no
    addresses) and the note."""
    serial = _CoreAllocator(body, core, element_bytes, target, carried=carried)
    serial.run()
    if target is None or serial.target is None:
        return serial, None if core < 0 else serial.allocate(), None
    mem = serial.allocate()
    if mem.concurrent:
        return serial, mem, None
    apart = _CoreAllocator(body, core, element_bytes, target, disjoint=True, carried=carried)
    apart.run()
    laid = apart.allocate()
    if laid.peak_bytes <= max(mem.peak_bytes, target.local_memory_bytes):
        return apart, laid, None
    return serial, mem, (f"core {core}: buffers laid out for MVMs one after another "
                         f"({mem.peak_bytes:,} bytes; {laid.peak_bytes:,} for "
                         f"{target.mvm_units} at once exceed local memory)")
