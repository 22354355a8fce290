"""Compute bodies compiled once per structure, executed for many instances at once.

A scheduled program repeats a few dozen body structures hundreds of times: the lanes of a
layer differ only in which fragments they read. `signature` reduces a body to what its
execution depends on (op classes, attributes, types, and operands as positions: body
arguments and results numbered in order, values from outside numbered by first use), and
`Templates` compiles each signature once into closures over the slots of a list (slice
tuples, shapes and numpy functions resolved ahead), one per body op, made by the maker
registered for its op class in `KERNELS`. An instance only binds the values it
reads and defines and, for a `pim.load` of a function input, the region it reads.
Compiling every instance cost more than the numpy work on small tiles; sharing makes
compilation proportional to the distinct bodies. (Generating Python source per template
ran a little faster but `compile()` cost about 16 us a line, more than it saved.)

Each closure runs its op for k instances at once, on arrays stacked over the instances
along a new leading axis (`numerics.py` groups the instances). The results are those of
`eval_op` on each instance; ops without a fast form call `eval_op` instance by instance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from raptor.ir.core import Affine, Operation, Value
from raptor.ir.interpreter import SEMANTICS, eval_op, slices
from raptor.ir.ops import (
    BINARY,
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
def _attr_getter(cls: type[Operation]) -> Callable[[Operation], object]:
    """What distinguishes two ops of `cls` beyond operands, results and offsets (which
    `signature` encodes itself): every declared attribute, made hashable."""
    names = [n for n in cls.DEF.attributes if n != "offsets"]
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


class _Spec(NamedTuple):
    attrs: Callable[[Operation], object]
    offsets: bool
    """Offsets are part of the structure (all sliced ops but `pim.load`)."""
    one_result: bool


_SPECS: dict[type, _Spec] = {}


def _spec(cls: type[Operation]) -> _Spec:
    d = cls.DEF
    spec = _SPECS[cls] = _Spec(_attr_getter(cls), cls is not LoadOp and "offsets" in d.kinds,
                               d.single_result == "result")
    return spec


def signature(op: Operation, fixed: Mapping[Value, int]) -> tuple[tuple[object, ...],
                                                                   list[Value]]:
    """The structural key of a scheduled compute (or of one bare op at core level) and the
    outside values its body reads, in the order the key numbers them.

    Offsets enter with the core-batch lane substituted; a term on any other value keeps
    the value itself (such bodies share nothing, and `Templates.build` rejects all but the
    batch lane). A load's offsets are left out: they are the instance's parameters. This
    runs for every instance, so it is written for speed."""
    if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
        args, ops = op.body.args, op.body.ops
        head: tuple[object, ...] = (type(op), getattr(op, "lanes", 1), len(op.inputs),
                                    len(op.outs), *[type_key(a) for a in args])
    else:
        args, ops = [], [op]
        head = ("op",)
    # body values number 0, 1, ... in definition order; outside values -1, -2, ...
    ids: dict[Value, int] = {a: i for i, a in enumerate(args)}
    n = len(args)
    frees: list[Value] = []
    parts: list[object] = [head]
    specs = _SPECS
    for inner in ops:
        cls = inner.__class__
        spec = specs.get(cls) or _spec(cls)
        refs = []
        for v in inner.operands():
            i = ids.get(v)
            if i is None:
                i = ids[v] = -1 - len(frees)
                frees.append(v)
            refs.append(i)
        where: object = None
        if spec.offsets:
            offs = inner.offsets  # type: ignore[attr-defined]
            where = tuple([a.const for a in offs])
            for a in offs:
                if a.terms:
                    where = tuple([_offset_key(b, fixed, ids) for b in offs])
                    break
        if spec.one_result:
            r = inner.result  # type: ignore[attr-defined]
            ids[r] = n
            n += 1
            t = r.type
            parts.append((cls, tuple(refs), spec.attrs(inner), where,
                          (t.shape, t.dtype) if t.__class__ is TensorType else t))
        else:
            results = inner.results()
            for r in results:
                ids[r] = n
                n += 1
            parts.append((cls, tuple(refs), spec.attrs(inner), where,
                          *[type_key(r) for r in results]))
    parts.append(tuple([type_key(v) for v in frees]))
    return tuple(parts), frees


def _offset_key(a: Affine, fixed: Mapping[Value, int], slot: Mapping[Value, int]) -> object:
    const, terms = a.const, []
    for k, v in a.terms:
        if v in fixed:
            const += k * fixed[v]
        else:
            terms.append((k, slot.get(v, v)))
    return (const, tuple(terms)) if terms else const


# ---- templates -----------------------------------------------------------------------
GroupFn = Callable[[int, list[Any], list[Any]], list[Any]]
"""`run(k, reads, params)`: execute k instances of one template at once. Each read is
the k instances' values stacked on a new leading axis, except a read the body uses only
as an MVM weight: the one array all k share, or the list of the k instances' arrays (then
only the MVM runs instance by instance). `params[j]` lists the k (input array, slice
tuple) pairs of the body's j-th `pim.load`. Returns the results, stacked likewise."""


@dataclass(frozen=True, slots=True, eq=False)
class Template:
    """One compiled body structure, shared by every instance with its signature."""

    run: GroupFn
    cost: int
    """ns of one instance: lanes x the body's cost."""
    ops: int
    """Executed ops of one instance (every lane counts)."""
    weights: tuple[int | str, ...]
    """Per MVM: the index of its weight in the instance's reads, or a body weight's symbol
    (-1: a weight the body computes)."""
    loads: tuple[int, ...]
    """Body positions of the `pim.load`s (whose regions each instance supplies)."""
    load_reads: frozenset[int]
    """Indices of the reads that are load buffers (given as `params`, not as reads)."""
    shared: frozenset[int]
    """Indices, among the reads that are not load buffers, of the MVM-only weights (passed
    unstacked: one array, or a list when the instances' arrays differ)."""
    stacked: tuple[bool, ...]
    """Per result: stacked over the instances (False: one array for all, a body weight)."""


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
"""A group's values by slot: the instance count, the reads, the loads' parameters, then
what the body defines. Arrays carry the instances on a leading axis."""
Step = Callable[[Frame], None]
_ALL = slice(None)


class _Builder:
    """Turns a representative op into a template: one closure per body op over frame
    slots, each executing the op for all instances of a group at once."""

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
        self.flat: set[int] = set()
        """Slots holding one array for all instances (not stacked)."""
        self.size = 1  # slot 0 holds the instance count
        self.steps: list[Step] = []

    def define(self, v: Value) -> int:
        s = self.slot[v] = self.size
        self.size += 1
        return s

    def build(self) -> Template:
        n = self.inputs
        ins = self.args[1:1 + n] if self.batch else self.args[:n]
        reads = [*ins, *self.frees]
        load_bufs = {o.buffer for o in self.ops if isinstance(o, LoadOp)}
        load_reads = frozenset(i for i, v in enumerate(reads) if i >= n and v in load_bufs)
        env_reads = [v for i, v in enumerate(reads) if i not in load_reads]
        weight_only = self.weight_only()
        shared = frozenset(i for i, v in enumerate(env_reads) if v in weight_only)
        for i, v in enumerate(env_reads):
            if i in shared:
                self.flat.add(self.size)
            self.define(v)
        loads = [pos for pos, o in enumerate(self.ops) if isinstance(o, LoadOp)]
        params = self.size
        self.size += len(loads)
        lane = self.define(self.args[0]) if self.batch else -1
        accs: list[tuple[int, tuple[int, ...], np.dtype]] = []
        if isinstance(self.op, ScheduledComputeBatchOp):
            for a, r in zip(self.args[1 + n:], self.op.outs, strict=True):
                t = info(r)
                accs.append((self.define(a), t.shape, t.dtype))
        weights, outs, cost, count = self.body(reads, params)
        if not self.batch:
            want = len(self.op.outs) if isinstance(self.op, ScheduledComputeOp) else \
                len(self.op.results())
            if len(outs) != want:
                raise self.fail(self.op, f"body yields {len(outs)} values for {want} results")
        run = (_batch_run(self.size, lane, self.lanes, accs, self.steps) if self.batch
               else _single_run(self.size, outs, self.steps))
        stacked = tuple(True for _ in accs) if self.batch else \
            tuple(s not in self.flat for s in outs)
        return Template(run, self.lanes * cost, self.lanes * count, tuple(weights),
                        tuple(loads), load_reads, shared, stacked)

    def weight_only(self) -> set[Value]:
        """Values the body uses only as MVM weights: passed once for the whole group."""
        weight, other = set(), set()
        for inner in self.ops:
            if isinstance(inner, MvmOp):
                weight.add(inner.weight)
                other.add(inner.vector)
            else:
                other.update(inner.operands())
        return weight - other

    def stacked(self, v: Value) -> int:
        """A slot holding `v` stacked over the instances (a body weight is broadcast)."""
        s = self.slot[v]
        if s not in self.flat:
            return s
        shape = info(v).shape
        b = self.define(v)  # later reads of v find the broadcast view
        self.steps.append(_broadcast(s, b, shape))
        return b

    def body(self, reads: list[Value], params: int
             ) -> tuple[list[int | str], list[int], int, int]:
        """Builds the steps; returns the MVMs' weights, the slots a single body yields, its
        cost and its op count."""
        weights: list[int | str] = []
        outs: list[int] = []
        cost = count = 0
        read_index = {v: i for i, v in enumerate(reads)}
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
        for inner in self.ops:
            if isinstance(inner, WeightOp):
                s = self.define(inner.result)
                self.flat.add(s)
                self.steps.append(_const(s, self.t.weight(inner)))
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
                    self.steps.append(_load(params, self.define(inner.result),
                                            info(inner.result).shape))
                    params += 1
                else:
                    self.steps.append(self.step(inner, isinstance(inner, InsertSliceOp)
                                                and fresh.get(inner.dest) == 1))
                cost += self.t.op_cost(inner)
            except KernelError as e:
                raise self.fail(inner, str(e)) from None
            count += 1
        if not self.batch and not isinstance(self.op, ScheduledComputeOp):
            outs.extend(self.slot[r] for r in self.op.results())
        return weights, outs, cost, count

    def region(self, op: ExtractSliceOp | InsertSliceOp | ParallelInsertSliceOp
               ) -> tuple[slice, ...] | list[tuple[slice, ...]]:
        """The slice tuple (all instances, then the region), or one per lane."""
        offs = resolve(op.offsets, self.fixed)
        sizes, strides = tuple(op.sizes), tuple(op.strides)
        if all(a.is_const for a in offs):
            return (_ALL, *const_slices(tuple(a.const for a in offs), sizes, strides))
        lane = self.args[0] if self.batch else None
        stray = [v for a in offs for v in a.vars() if v is not lane]
        if stray:
            raise KernelError(f"offset depends on %{stray[0].name}, which is neither the "
                              "batch lane nor a core-batch lane")
        assert lane is not None
        return [(_ALL, *const_slices(tuple(a.evaluate({lane: i}) for a in offs), sizes,
                                     strides)) for i in range(self.lanes)]

    @property
    def lane(self) -> int:
        """The slot of the batch lane (-1 outside a scheduled batch)."""
        return self.slot[self.args[0]] if self.batch else -1

    def step(self, op: Operation, in_place: bool) -> Step:
        """The closure executing `op` for every instance of a group: the op's registered
        maker, else `eval_op` instance by instance."""
        make = KERNELS.get(op.__class__)
        made = make(self, op, in_place) if make is not None else None
        if made is not None:
            return made
        if op.__class__ in SEMANTICS and len(op.results()) == 1:
            srcs = tuple(self.stacked(v) for v in op.operands())
            return _generic(op, srcs, self.define(op.results()[0]))
        raise KernelError(f"{op.name} cannot execute here")


Maker = Callable[[_Builder, Any, bool], Step | None]
"""`make(builder, op, in_place)`: the step running `op` on stacked instances, or None for
`eval_op` instance by instance (`in_place`: an insert may write into its destination)."""


def _k_mvm(b: _Builder, op: MvmOp, _: bool) -> Step | None:
    if not (info(op.weight).dtype == _F32 and info(op.vector).dtype == _F32
            and len(info(op.weight).shape) == 2):
        return None
    w = b.slot[op.weight]
    return _mvm(b.stacked(op.vector), w, w not in b.flat, len(info(op.vector).shape),
                b.define(op.result))


def _k_binary(b: _Builder, op: BinaryOp, _: bool) -> Step | None:
    if not _fast_binary(op):
        return None
    rank = len(info(op.result).shape)
    return _binary(BINARY[op.op], b.stacked(op.lhs), _expand(info(op.lhs).shape, rank),
                   b.stacked(op.rhs), _expand(info(op.rhs).shape, rank), b.define(op.result))


def _k_unary(b: _Builder, op: UnaryOp, _: bool) -> Step | None:
    """Elementwise kinds on float32 run on the stacked instances (`Elementwise.stacked`)."""
    spec = op.spec
    if not (spec.stacked and info(op.result).dtype == _F32 and info(op.source).dtype == _F32):
        return None
    nums, fn = op.numbers(), spec.fn
    return _unary((lambda x: fn(x, **nums)) if nums else fn, b.stacked(op.source),
                  b.define(op.result))


def _k_pad(b: _Builder, op: PadOp, _: bool) -> Step | None:
    if not _fast_pad(op):
        return None
    inner = (_ALL, *(slice(a, a + d) for a, d in zip(op.low, info(op.source).shape, strict=True)))
    return _pad(b.stacked(op.source), b.define(op.result), info(op.result).shape, inner,
                op.value)


def _k_concat(b: _Builder, op: ConcatOp, _: bool) -> Step:
    rank = len(info(op.result).shape)
    return _concat(tuple(b.stacked(v) for v in op.sources), b.define(op.result),
                   op.dim % rank + 1 if rank else 1)


KERNELS: dict[type[Operation], Maker] = {
    ExtractSliceOp: lambda b, op, _: _extract(b.stacked(op.source), b.region(op), b.lane,
                                              b.define(op.result), info(op.result).shape),
    InsertSliceOp: lambda b, op, in_place: _insert(b.stacked(op.source), b.stacked(op.dest),
                                                   b.region(op), b.lane, b.define(op.result),
                                                   tuple(op.sizes), in_place),
    ParallelInsertSliceOp: lambda b, op, _: _publish(b.stacked(op.source), b.stacked(op.dest),
                                                     b.region(op), b.lane, tuple(op.sizes)),
    ReshapeOp: lambda b, op, _: _reshape(b.stacked(op.source), b.define(op.result),
                                         info(op.result).shape),
    EmptyOp: lambda b, op, _: _empty(b.define(op.result), info(op.result).shape,
                                     info(op.result).dtype),
    MaterializeLayoutOp: lambda b, op, _: _alias(b.stacked(op.source), b.define(op.result)),
    LaneResultOp: lambda b, op, _: _lane_result(b.stacked(op.source), b.define(op.result),
                                                op.lane),
    TransposeOp: lambda b, op, _: _transpose(b.stacked(op.source), b.define(op.result),
                                             tuple(op.perm)),
    ConcatOp: _k_concat, MvmOp: _k_mvm, BinaryOp: _k_binary, UnaryOp: _k_unary, PadOp: _k_pad,
}
"""Op class → the maker of its step (ops absent here run through `eval_op`)."""


def _fast_binary(op: BinaryOp) -> bool:
    """float32 operands whose broadcast is the result shape: the ufunc alone is exact."""
    ta, tb, tr = info(op.lhs), info(op.rhs), info(op.result)
    if not ta.dtype == tb.dtype == tr.dtype == _F32:
        return False
    try:
        return np.broadcast_shapes(ta.shape, tb.shape) == tr.shape
    except ValueError:
        return False


def _expand(shape: tuple[int, ...], rank: int) -> tuple[int, ...] | None:
    """The per-instance shape an operand of lower rank takes so that broadcasting against
    the result lines up behind the instance axis (None: already the result's rank)."""
    return None if len(shape) == rank else (1,) * (rank - len(shape)) + shape


def _fast_pad(op: PadOp) -> bool:
    ts, tr = info(op.source), info(op.result)
    low, high = tuple(op.low), tuple(op.high)
    return (ts.dtype == tr.dtype == _F32 and len(low) == len(high) == len(ts.shape)
            and min((*low, *high), default=0) >= 0
            and tuple(n + a + b for n, a, b in zip(ts.shape, low, high, strict=True))
            == tr.shape)


# ---- runners and steps ---------------------------------------------------------------
def _single_run(size: int, outs: list[int], steps: list[Step]) -> GroupFn:
    def run(k: int, reads: list[Any], params: list[Any]) -> list[Any]:
        fr: Frame = [k, *reads, *params]
        fr += [None] * (size - len(fr))
        for step in steps:
            step(fr)
        return [fr[s] for s in outs]

    return run


def _batch_run(size: int, lane: int, lanes: int,
               accs: list[tuple[int, tuple[int, ...], np.dtype]], steps: list[Step]
               ) -> GroupFn:
    """Results start as zeros; every lane publishes into them with parallel_insert_slice."""
    zeros = np.zeros

    def run(k: int, reads: list[Any], params: list[Any]) -> list[Any]:
        fr: Frame = [k, *reads, *params]
        fr += [None] * (size - len(fr))
        for slot, shape, dtype in accs:
            fr[slot] = zeros((k, *shape), dtype)
        for i in range(lanes):
            fr[lane] = i
            for step in steps:
                step(fr)
        return [fr[slot] for slot, _, _ in accs]

    return run


def _const(res: int, value: np.ndarray) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = value

    return run


def _broadcast(src: int, res: int, shape: tuple[int, ...]) -> Step:
    broadcast_to = np.broadcast_to

    def run(fr: Frame) -> None:
        fr[res] = broadcast_to(fr[src], (fr[0], *shape))

    return run


def _load(param: int, res: int, shape: tuple[int, ...]) -> Step:
    """A load of a function input: each instance's (array, slice tuple) is a parameter."""
    stack = np.stack

    def run(fr: Frame) -> None:
        fr[res] = stack([buf[sl] for buf, sl in fr[param]]).reshape((fr[0], *shape))

    return run


def _extract(src: int, where: tuple[slice, ...] | list[tuple[slice, ...]], lane: int,
             res: int, shape: tuple[int, ...]) -> Step:
    if isinstance(where, tuple):
        sl = where

        def const(fr: Frame) -> None:
            fr[res] = fr[src][sl].reshape((fr[0], *shape))

        return const
    table = where

    def per_lane(fr: Frame) -> None:
        fr[res] = fr[src][table[fr[lane]]].reshape((fr[0], *shape))

    return per_lane


def _insert(src: int, dst: int, where: tuple[slice, ...] | list[tuple[slice, ...]],
            lane: int, res: int, sizes: tuple[int, ...], in_place: bool) -> Step:
    """Writes into the destination only when the caller proved nobody else sees it; SSA
    values are otherwise never written (extract_slice and reshape share views)."""
    if isinstance(where, tuple):
        sl = where

        def const(fr: Frame) -> None:
            out = fr[dst] if in_place else fr[dst].copy()
            out[sl] = fr[src].reshape((fr[0], *sizes))
            fr[res] = out

        return const
    table = where

    def per_lane(fr: Frame) -> None:
        out = fr[dst] if in_place else fr[dst].copy()
        out[table[fr[lane]]] = fr[src].reshape((fr[0], *sizes))
        fr[res] = out

    return per_lane


def _publish(src: int, dst: int, where: tuple[slice, ...] | list[tuple[slice, ...]],
             lane: int, sizes: tuple[int, ...]) -> Step:
    """Writes in place: the destination is the batch's own zero-initialised result."""
    if isinstance(where, tuple):
        sl = where

        def const(fr: Frame) -> None:
            fr[dst][sl] = fr[src].reshape((fr[0], *sizes))

        return const
    table = where

    def per_lane(fr: Frame) -> None:
        fr[dst][table[fr[lane]]] = fr[src].reshape((fr[0], *sizes))

    return per_lane


def _reshape(src: int, res: int, shape: tuple[int, ...]) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fr[src].reshape((fr[0], *shape))

    return run


def _empty(res: int, shape: tuple[int, ...], dtype: np.dtype) -> Step:
    zeros = np.zeros

    def run(fr: Frame) -> None:
        fr[res] = zeros((fr[0], *shape), dtype)

    return run


def _alias(src: int, res: int) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fr[src]

    return run


def _lane_result(src: int, res: int, lane: int) -> Step:
    def run(fr: Frame) -> None:
        fr[res] = fr[src][:, lane]

    return run


def _transpose(src: int, res: int, perm: tuple[int, ...]) -> Step:
    """A view, not `eval_op`'s contiguous copy: no value is ever written after it is
    made (in-place inserts only write fresh buffers), so the two cannot be told apart,
    and the consumer reads the strides it would otherwise have copied."""
    transpose = np.transpose
    axes = (0, *(p + 1 for p in perm))

    def run(fr: Frame) -> None:
        fr[res] = transpose(fr[src], axes)

    return run


def _concat(srcs: tuple[int, ...], res: int, axis: int) -> Step:
    concatenate = np.concatenate

    def run(fr: Frame) -> None:
        fr[res] = concatenate([fr[s] for s in srcs], axis=axis)

    return run


def _mvm(vec: int, weight: int, stacked: bool, rank: int, res: int) -> Step:
    """`vector @ weight` per instance. A shared weight multiplies the stacked vectors
    directly; stacked weights pair up with the vectors instance by instance."""
    matmul = np.matmul
    if not stacked:

        def shared(fr: Frame) -> None:
            w = fr[weight]
            if w.__class__ is list:  # one weight per instance (tiles differ)
                v = fr[vec]
                fr[res] = np.stack([matmul(v[i], w[i]) for i in range(len(w))])
            else:
                fr[res] = matmul(fr[vec], w)

        return shared
    if rank == 1:

        def rows(fr: Frame) -> None:
            fr[res] = matmul(fr[vec][:, None, :], fr[weight])[:, 0, :]

        return rows
    pad = (1,) * (rank - 2)

    def paired(fr: Frame) -> None:
        w = fr[weight]
        fr[res] = matmul(fr[vec], w.reshape((w.shape[0], *pad, *w.shape[1:])))

    return paired


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], a: int,
            a_shape: tuple[int, ...] | None, b: int, b_shape: tuple[int, ...] | None,
            res: int) -> Step:
    if a_shape is None and b_shape is None:

        def same(fr: Frame) -> None:
            fr[res] = fn(fr[a], fr[b])

        return same

    def expanded(fr: Frame) -> None:
        x, y = fr[a], fr[b]
        if a_shape is not None:
            x = x.reshape((fr[0], *a_shape))
        if b_shape is not None:
            y = y.reshape((fr[0], *b_shape))
        fr[res] = fn(x, y)

    return expanded


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
            out = zeros((fr[0], *shape), _F32)
            out[inner] = fr[src]
            fr[res] = out

        return run
    fill, empty = np.float32(value), np.empty

    def fill_run(fr: Frame) -> None:
        out = empty((fr[0], *shape), _F32)
        out[...] = fill
        out[inner] = fr[src]
        fr[res] = out

    return fill_run


def _generic(op: Operation, srcs: tuple[int, ...], res: int) -> Step:
    """`eval_op` on a representative op, instance by instance."""
    operands, result = op.operands(), op.results()[0]
    stack = np.stack

    def run(fr: Frame) -> None:
        outs: list[Any] = []
        for i in range(fr[0]):
            env: dict[Value, object] = dict(zip(operands, [fr[s][i] for s in srcs],
                                                strict=True))
            eval_op(op, env, {})
            outs.append(env[result])
        fr[res] = stack(outs)

    return run
