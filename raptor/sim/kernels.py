"""Compute bodies compiled to Python functions, once per structure.

A scheduled program repeats a few dozen body structures hundreds of times: the lanes of a
layer differ only in which fragments they read. `signature` reduces a body to what its
execution depends on (op classes, attributes, types, and operands as positions: body
arguments and results numbered in order, values from outside numbered by first use), and
`Templates` compiles each signature once into closures over the slots of a list (slice
tuples, shapes and numpy functions resolved ahead). An instance only binds the values it
reads and defines and, for a `pim.load` of a function input, the region it reads.
Compiling every instance cost more than the numpy work on small tiles; sharing makes
compilation proportional to the distinct bodies. (Generating Python source per template
ran a little faster but `compile()` cost about 16 us a line, more than it saved.)

The generated code keeps `eval_op`'s semantics; ops without a fast form call `eval_op`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from operator import attrgetter
from typing import Any

import numpy as np

from raptor.ir.core import Affine, Operation, Value
from raptor.ir.interpreter import eval_op, slices
from raptor.ir.ops import (
    BinaryOp,
    ConcatOp,
    EmptyOp,
    ExtractSliceOp,
    InsertSliceOp,
    LaneResultOp,
    LoadOp,
    MaterializeLayoutOp,
    MvmOp,
    PadOp,
    ParallelInsertSliceOp,
    ReduceOp,
    ReshapeOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    TransposeOp,
    UnaryOp,
    WeightOp,
    YieldOp,
)
from raptor.ir.types import TensorType
from raptor.sim.errors import SimError

Env = dict[Value, Any]
"""One core's values: numpy arrays."""
Kernel = Callable[[Env], None]
Reads = tuple[Value, ...]
BodyFn = Callable[[Env, Reads, Reads, tuple[Any, ...]], None]
"""`fn(env, reads, defines, params)`: read the instance's inputs and outside values from
the core's env (load buffers excepted), run the body, write the instance's results.
`params` holds, per body `pim.load`, the input array and the slice tuple it reads."""

GENERIC_OPS = (UnaryOp, ReduceOp, TransposeOp, ConcatOp, PadOp, MaterializeLayoutOp, BinaryOp,
               MvmOp)
"""Ops `eval_op` runs when they have no fast form below."""

_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "vadd": np.add, "vsub": np.subtract, "vmul": np.multiply, "vdiv": np.divide,
    "vmax": np.maximum, "vmin": np.minimum,
}
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, np.float32(0)), "tanh": np.tanh, "exp": np.exp,
    "neg": np.negative,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "silu": lambda x: x * (1.0 / (1.0 + np.exp(-x))),
}
"""float32 unary ops computed exactly as `eval_op` computes them."""
_F32 = np.dtype(np.float32)


class KernelError(SimError):
    """An op the simulator cannot execute inside a compute body or at core level."""


@dataclass(frozen=True, slots=True)
class TypeInfo:
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int


_INFOS: dict[tuple[tuple[int | None, ...], str], TypeInfo | None] = {}


def info(v: Value) -> TypeInfo:
    """Shape, dtype and size of a static tensor value (cached per type: programs repeat a
    handful of types thousands of times; keyed by the plain (shape, dtype) tuple, whose
    hash and comparison are much cheaper than the dataclass's)."""
    t = v.type
    found = None
    if isinstance(t, TensorType):
        key = (t.shape, t.dtype)
        try:
            found = _INFOS[key]
        except KeyError:
            found = _INFOS[key] = (TypeInfo(t.static_shape, t.np_dtype, t.nbytes)
                                   if t.is_static else None)
    if found is None:
        raise KernelError(f"%{v.name} has type {t}; the simulator needs static tensors")
    return found


def type_key(v: Value) -> object:
    """A cheap hashable stand-in for `v.type` (equal exactly when the types are equal)."""
    t = v.type
    return (t.shape, t.dtype) if isinstance(t, TensorType) else t


def resolve(offsets: Sequence[Affine], fixed: Mapping[Value, int]) -> list[Affine]:
    """Substitute the variables whose value is known for this core (the core-batch lane)."""
    out = []
    for a in offsets:
        for v in a.vars():
            if v in fixed:
                a = a.substitute(v, fixed[v])
        out.append(a)
    return out


@lru_cache(maxsize=1 << 16)
def const_slices(offsets: tuple[int, ...], sizes: tuple[int, ...], strides: tuple[int, ...]
                 ) -> tuple[slice, ...]:
    """`slices` for constant offsets, shared between the many ops cutting the same box."""
    return slices(offsets, sizes, strides)


# ---- signatures ----------------------------------------------------------------------
def _attr_getter(cls: type) -> Callable[[Operation], object]:
    """What distinguishes two ops of `cls` beyond operands, results and offsets (which
    `signature` encodes itself): every other dataclass field, made hashable."""
    names = [f.name for f in fields(cls)
             if "Value" not in str(f.type) and "Block" not in str(f.type)
             and f.name != "offsets"]
    if "attrs" in names:  # UnaryOp's attribute dict
        rest = [n for n in names if n != "attrs"]

        def with_attrs(op: Operation) -> object:
            attrs: dict[str, Any] = op.attrs  # type: ignore[attr-defined]
            return (*[getattr(op, n) for n in rest],
                    tuple(sorted((k, repr(v)) for k, v in attrs.items())))

        return with_attrs
    if not names:
        return lambda op: None
    return attrgetter(*names)


_ATTRS: dict[type, Callable[[Operation], object]] = {}


def signature(op: Operation, fixed: Mapping[Value, int]) -> tuple[tuple[object, ...],
                                                                   list[Value]]:
    """The structural key of a scheduled compute (or of one bare op at core level) and the
    outside values its body reads, in the order the key numbers them.

    Offsets enter with the core-batch lane substituted; a term on any other value keeps
    the value itself (such bodies share nothing, and `Templates.build` rejects all but the
    batch lane). A load's offsets are left out: they are the instance's parameters."""
    if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
        args, ops = op.body.args, op.body.ops
        head: tuple[object, ...] = (type(op), getattr(op, "lanes", 1), len(op.inputs),
                                    len(op.outs), *[type_key(a) for a in args])
    else:
        args, ops = [], [op]
        head = ("op",)
    slot: dict[Value, int] = {a: i for i, a in enumerate(args)}
    frees: dict[Value, int] = {}
    parts: list[object] = [head]
    for inner in ops:
        cls = type(inner)
        refs = []
        for v in inner.operands():
            s = slot.get(v)
            if s is None:
                s = frees.get(v)
                if s is None:
                    s = frees[v] = -1 - len(frees)
            refs.append(s)
        get = _ATTRS.get(cls)
        if get is None:
            get = _ATTRS[cls] = _attr_getter(cls)
        offs = getattr(inner, "offsets", None)
        if offs is None or cls is LoadOp:
            where: object = None
        elif not any(a.terms for a in offs):
            where = tuple([a.const for a in offs])
        else:
            where = tuple(_offset_key(a, fixed, slot) for a in offs)
        results = inner.results()
        for r in results:
            slot[r] = len(slot)
        parts.append((cls, tuple(refs), get(inner), where, *[type_key(r) for r in results]))
    parts.append(tuple(type_key(v) for v in frees))
    return tuple(parts), list(frees)


def _offset_key(a: Affine, fixed: Mapping[Value, int], slot: Mapping[Value, int]) -> object:
    const, terms = a.const, []
    for k, v in a.terms:
        if v in fixed:
            const += k * fixed[v]
        else:
            terms.append((k, slot.get(v, v)))
    return (const, tuple(terms)) if terms else const


# ---- templates -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class Template:
    """One compiled body structure, shared by every instance with its signature."""

    fn: BodyFn
    cost: int
    """ns of one instance: lanes x the body's cost."""
    ops: int
    """Executed ops of one instance (every lane counts)."""
    weights: tuple[int | str, ...]
    """Per MVM: the index of its weight in the instance's reads, or a body weight's symbol."""
    loads: tuple[int, ...]
    """Body positions of the `pim.load`s (whose regions each instance supplies)."""
    load_reads: frozenset[int]
    """Indices of the reads that are load buffers (read through `params`, not the env)."""


Fail = Callable[[Operation, str], SimError]


class Templates:
    """The templates of one compilation, by signature."""

    def __init__(self, op_cost: Callable[[Operation], int],
                 weight: Callable[[WeightOp], np.ndarray]) -> None:
        self.op_cost = op_cost
        self.weight = weight
        self.by_key: dict[tuple[object, ...], Template] = {}

    def get(self, op: Operation, fixed: Mapping[Value, int], fail: Fail
            ) -> tuple[Template, list[Value]]:
        """`op`'s template (built on first sight) and its outside reads."""
        key, frees = signature(op, fixed)
        try:
            tpl = self.by_key.get(key)
        except TypeError:  # an unhashable attribute: compile this instance alone
            return _Builder(self, op, fixed, frees, fail).build(), frees
        if tpl is None:
            tpl = self.by_key[key] = _Builder(self, op, fixed, frees, fail).build()
        return tpl, frees


Frame = list[Any]
"""A body's values by slot: reads, load parameters, then what the body defines."""
Step = Callable[[Frame], None]


class _Builder:
    """Turns a representative op into a template: one closure per body op over frame
    slots (reads first, then the loads' parameters, then the body's own values)."""

    def __init__(self, templates: Templates, op: Operation, fixed: Mapping[Value, int],
                 frees: list[Value], fail: Fail) -> None:
        self.t = templates
        self.op = op
        self.fixed = fixed
        self.fail = fail
        self.batch = isinstance(op, ScheduledComputeBatchOp)
        self.lanes = op.lanes if isinstance(op, ScheduledComputeBatchOp) else 1
        if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
            self.args, self.ops = list(op.body.args), list(op.body.ops)
            self.inputs = len(op.inputs)
        else:
            self.args, self.ops, self.inputs = [], [op], 0
        self.frees = frees
        self.slot: dict[Value, int] = {}
        self.size = 0

    def define(self, v: Value) -> int:
        s = self.slot[v] = self.size
        self.size += 1
        return s

    def build(self) -> Template:
        n = self.inputs
        ins = self.args[1:1 + n] if self.batch else self.args[:n]
        load_bufs = {o.buffer for o in self.ops if isinstance(o, LoadOp)}
        for a in ins:
            self.define(a)
        load_reads = frozenset(n + j for j, v in enumerate(self.frees) if v in load_bufs)
        for v in self.frees:
            if v not in load_bufs:
                self.define(v)
        reads = self.size  # the instance's env values fill these slots
        loads = [pos for pos, o in enumerate(self.ops) if isinstance(o, LoadOp)]
        self.size += 2 * len(loads)  # per load: the input array and its slice tuple
        lane = self.define(self.args[0]) if self.batch else -1
        accs: list[tuple[int, tuple[int, ...], np.dtype]] = []
        if isinstance(self.op, ScheduledComputeBatchOp):
            for a, r in zip(self.args[1 + n:], self.op.outs, strict=True):
                t = info(r)
                accs.append((self.define(a), t.shape, t.dtype))
        steps, weights, outs, cost, count = self.body(reads)
        if not self.batch:
            want = len(self.op.outs) if isinstance(self.op, ScheduledComputeOp) else \
                len(self.op.results())
            if len(outs) != want:
                raise self.fail(self.op, f"body yields {len(outs)} values for {want} results")
        run = (_batch_run(self.size, reads, lane, self.lanes, accs, steps) if self.batch
               else _single_run(self.size, reads, outs, steps))
        return Template(run, self.lanes * cost, self.lanes * count, tuple(weights),
                        tuple(loads), load_reads)

    def body(self, reads: int) -> tuple[list[Step], list[int | str], list[int], int, int]:
        """The steps of the body, the MVMs' weights, the slots a single body yields, its
        cost and its op count."""
        steps: list[Step] = []
        weights: list[int | str] = []
        outs: list[int] = []
        cost = count = 0
        read_index = {v: i for i, v in enumerate(
            [*(self.args[1:1 + self.inputs] if self.batch else self.args[:self.inputs]),
             *self.frees])}
        # An insert may write into its destination when that is a fresh buffer
        # (tensor.empty or an insert result) whose only use is this insert.
        fresh: dict[Value, int] = {}
        for inner in self.ops:
            for v in inner.operands():
                if v in fresh:
                    fresh[v] += 1
            if isinstance(inner, EmptyOp | InsertSliceOp):
                fresh[inner.result] = 0
        symbols: dict[Value, str] = {}
        param = reads
        for inner in self.ops:
            if isinstance(inner, WeightOp):
                steps.append(_const(self.define(inner.result), self.t.weight(inner)))
                symbols[inner.result] = inner.symbol
                continue
            if isinstance(inner, YieldOp):
                if self.batch:
                    raise self.fail(self.op, "a scheduled batch body publishes with "
                                    "spat.parallel_insert_slice, not spat.yield")
                outs.extend(self.slot[v] for v in inner.values)
                continue
            if isinstance(inner, ParallelInsertSliceOp) and not self.batch:
                raise self.fail(inner, "spat.parallel_insert_slice outside a batch body")
            if isinstance(inner, MvmOp):
                w = inner.weight
                weights.append(symbols[w] if w in symbols else read_index.get(w, -1))
            try:
                if isinstance(inner, LoadOp):
                    steps.append(_load(param, self.define(inner.result),
                                       info(inner.result).shape))
                    param += 2
                else:
                    steps.append(self.step(inner, isinstance(inner, InsertSliceOp)
                                           and fresh.get(inner.dest) == 1))
                cost += self.t.op_cost(inner)
            except KernelError as e:
                raise self.fail(inner, str(e)) from None
            count += 1
        if not self.batch and not isinstance(self.op, ScheduledComputeOp):
            outs.extend(self.slot[r] for r in self.op.results())
        return steps, weights, outs, cost, count

    def region(self, op: ExtractSliceOp | InsertSliceOp | ParallelInsertSliceOp
               ) -> tuple[slice, ...] | list[tuple[slice, ...]]:
        """The slice tuple, or per lane of the batch a slice tuple."""
        offs = resolve(op.offsets, self.fixed)
        sizes, strides = tuple(op.sizes), tuple(op.strides)
        if all(a.is_const for a in offs):
            return const_slices(tuple(a.const for a in offs), sizes, strides)
        lane = self.args[0] if self.batch else None
        stray = [v for a in offs for v in a.vars() if v is not lane]
        if stray:
            raise KernelError(f"offset depends on %{stray[0].name}, which is neither the "
                              "batch lane nor a core-batch lane")
        assert lane is not None
        return [const_slices(tuple(a.evaluate({lane: i}) for a in offs), sizes, strides)
                for i in range(self.lanes)]

    def step(self, op: Operation, in_place: bool) -> Step:
        """The closure executing `op` on a frame."""
        s = self.slot
        lane = self.slot[self.args[0]] if self.batch else -1
        if isinstance(op, ExtractSliceOp):
            return _extract(s[op.source], self.region(op), lane, self.define(op.result),
                            info(op.result).shape)
        if isinstance(op, InsertSliceOp):
            return _insert(s[op.source], s[op.dest], self.region(op), lane,
                           self.define(op.result), tuple(op.sizes), in_place)
        if isinstance(op, ParallelInsertSliceOp):
            return _publish(s[op.source], s[op.dest], self.region(op), lane, tuple(op.sizes))
        if isinstance(op, ReshapeOp):
            return _reshape(s[op.source], self.define(op.result), info(op.result).shape)
        if isinstance(op, EmptyOp):
            t = info(op.result)
            return _empty(self.define(op.result), t.shape, t.dtype)
        if isinstance(op, MaterializeLayoutOp):
            return _alias(s[op.source], self.define(op.result))
        if isinstance(op, LaneResultOp):
            return _lane_result(s[op.source], self.define(op.result), op.lane)
        if isinstance(op, TransposeOp):
            return _transpose(s[op.source], self.define(op.result), tuple(op.perm))
        if isinstance(op, ConcatOp):
            return _concat(tuple(s[v] for v in op.sources), self.define(op.result), op.dim)
        if isinstance(op, MvmOp) and info(op.weight).dtype == _F32 \
                and info(op.vector).dtype == _F32:
            return _binary(np.matmul, s[op.vector], s[op.weight], self.define(op.result))
        if isinstance(op, BinaryOp) and _fast_binary(op):
            return _binary(_BINARY[op.op], s[op.lhs], s[op.rhs], self.define(op.result))
        if isinstance(op, UnaryOp) and op.op in _UNARY and info(op.result).dtype == _F32 \
                and info(op.source).dtype == _F32:
            return _unary(_UNARY[op.op], s[op.source], self.define(op.result))
        if isinstance(op, PadOp) and _fast_pad(op):
            inner = tuple(slice(a, a + d) for a, d
                          in zip(op.low, info(op.source).shape, strict=True))
            return _pad(s[op.source], self.define(op.result), info(op.result).shape, inner,
                        op.value)
        if isinstance(op, GENERIC_OPS):
            srcs = tuple(s[v] for v in op.operands())
            return _generic(op, srcs, self.define(op.results()[0]))
        raise KernelError(f"{op.NAME} cannot execute here")


def _fast_binary(op: BinaryOp) -> bool:
    """float32 operands whose broadcast is the result shape: the ufunc alone is exact."""
    ta, tb, tr = info(op.lhs), info(op.rhs), info(op.result)
    if not ta.dtype == tb.dtype == tr.dtype == _F32:
        return False
    try:
        return np.broadcast_shapes(ta.shape, tb.shape) == tr.shape
    except ValueError:
        return False


def _fast_pad(op: PadOp) -> bool:
    ts, tr = info(op.source), info(op.result)
    low, high = tuple(op.low), tuple(op.high)
    return (ts.dtype == tr.dtype == _F32 and len(low) == len(high) == len(ts.shape)
            and min((*low, *high), default=0) >= 0
            and tuple(n + a + b for n, a, b in zip(ts.shape, low, high, strict=True))
            == tr.shape)


# ---- runners and steps ---------------------------------------------------------------
def _single_run(size: int, reads: int, outs: list[int], steps: list[Step]) -> BodyFn:
    pad = [None] * (size - reads)
    results = tuple(outs)

    def run(env: Env, r: Reads, o: Reads, p: tuple[Any, ...]) -> None:
        fr = [env[v] for v in r]
        fr += p
        fr += pad[len(p):]
        for step in steps:
            step(fr)
        for v, slot in zip(o, results, strict=True):
            env[v] = fr[slot]

    return run


def _batch_run(size: int, reads: int, lane: int, lanes: int,
               accs: list[tuple[int, tuple[int, ...], np.dtype]], steps: list[Step]) -> BodyFn:
    """Results start as zeros; every lane publishes into them with parallel_insert_slice."""
    pad = [None] * (size - reads)
    zeros = np.zeros

    def run(env: Env, r: Reads, o: Reads, p: tuple[Any, ...]) -> None:
        fr = [env[v] for v in r]
        fr += p
        fr += pad[len(p):]
        for slot, shape, dtype in accs:
            fr[slot] = zeros(shape, dtype)
        for i in range(lanes):
            fr[lane] = i
            for step in steps:
                step(fr)
        for v, (slot, _, _) in zip(o, accs, strict=True):
            env[v] = fr[slot]

    return run


def _const(res: int, value: np.ndarray) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = value

    return run


def _load(param: int, res: int, shape: tuple[int, ...]) -> Step:
    """A load of a function input: the instance supplies the array and the slice tuple."""
    def run(fr: Frame) -> None:
        fr[res] = fr[param][fr[param + 1]].copy().reshape(shape)

    return run


def _extract(src: int, where: tuple[slice, ...] | list[tuple[slice, ...]], lane: int,
             res: int, shape: tuple[int, ...]) -> Step:
    if isinstance(where, tuple):
        sl = where

        def const(fr: Frame) -> None:
            fr[res] = fr[src][sl].reshape(shape)

        return const
    table = where

    def per_lane(fr: Frame) -> None:
        fr[res] = fr[src][table[fr[lane]]].reshape(shape)

    return per_lane


def _insert(src: int, dst: int, where: tuple[slice, ...] | list[tuple[slice, ...]],
            lane: int, res: int, sizes: tuple[int, ...], in_place: bool) -> Step:
    """Writes into the destination only when the caller proved nobody else sees it; SSA
    values are otherwise never written (extract_slice and reshape share views)."""
    if isinstance(where, tuple):
        sl = where
        if in_place:

            def write_const(fr: Frame) -> None:
                out = fr[dst]
                out[sl] = fr[src].reshape(sizes)
                fr[res] = out

            return write_const

        def copy_const(fr: Frame) -> None:
            out = fr[dst].copy()
            out[sl] = fr[src].reshape(sizes)
            fr[res] = out

        return copy_const
    table = where
    if in_place:

        def write(fr: Frame) -> None:
            out = fr[dst]
            out[table[fr[lane]]] = fr[src].reshape(sizes)
            fr[res] = out

        return write

    def copy(fr: Frame) -> None:
        out = fr[dst].copy()
        out[table[fr[lane]]] = fr[src].reshape(sizes)
        fr[res] = out

    return copy


def _publish(src: int, dst: int, where: tuple[slice, ...] | list[tuple[slice, ...]],
             lane: int, sizes: tuple[int, ...]) -> Step:
    """Writes in place: the destination is the batch's own zero-initialised result."""
    if isinstance(where, tuple):
        sl = where

        def const(fr: Frame) -> None:
            fr[dst][sl] = fr[src].reshape(sizes)

        return const
    table = where

    def per_lane(fr: Frame) -> None:
        fr[dst][table[fr[lane]]] = fr[src].reshape(sizes)

    return per_lane


def _reshape(src: int, res: int, shape: tuple[int, ...]) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fr[src].reshape(shape)

    return run


def _empty(res: int, shape: tuple[int, ...], dtype: np.dtype) -> Step:
    zeros = np.zeros

    def run(fr: Frame) -> None:
        fr[res] = zeros(shape, dtype)

    return run


def _alias(src: int, res: int) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fr[src]

    return run


def _lane_result(src: int, res: int, lane: int) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fr[src][lane]

    return run


def _transpose(src: int, res: int, perm: tuple[int, ...]) -> Step:
    transpose, contiguous = np.transpose, np.ascontiguousarray

    def run(fr: Frame) -> None:
        fr[res] = contiguous(transpose(fr[src], perm))

    return run


def _concat(srcs: tuple[int, ...], res: int, dim: int) -> Step:
    concatenate = np.concatenate

    def run(fr: Frame) -> None:
        fr[res] = concatenate([fr[s] for s in srcs], axis=dim)

    return run


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], a: int, b: int, res: int
            ) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fn(fr[a], fr[b])

    return run


def _unary(fn: Callable[[np.ndarray], np.ndarray], src: int, res: int) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fn(fr[src])

    return run


def _pad(src: int, res: int, shape: tuple[int, ...], inner: tuple[slice, ...], value: float
         ) -> Step:
    """`np.pad` with a constant, as `eval_op`: the border holds the value cast to the
    element type, the interior the source."""
    if value == 0.0 and math.copysign(1.0, value) > 0:
        zeros = np.zeros

        def run(fr: Frame) -> None:
            out = zeros(shape, _F32)
            out[inner] = fr[src]
            fr[res] = out

        return run
    fill, empty = np.float32(value), np.empty

    def fill_run(fr: Frame) -> None:
        out = empty(shape, _F32)
        out[...] = fill
        out[inner] = fr[src]
        fr[res] = out

    return fill_run


def _generic(op: Operation, srcs: tuple[int, ...], res: int) -> Step:
    """`eval_op` on a representative op, its operands bound to the frame's arrays."""
    operands, result = op.operands(), op.results()[0]

    def run(fr: Frame) -> None:
        env: dict[Value, object] = dict(zip(operands, [fr[s] for s in srcs], strict=True))
        eval_op(op, env, {})
        fr[res] = env[result]

    return run
