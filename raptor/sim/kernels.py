"""Compute bodies compiled once per structure, executed for many instances at once.

A scheduled program repeats a few dozen body structures hundreds of times (the lanes of a
layer differ only in the fragments they read). `signature` reduces a body to what its
execution depends on: op classes, attributes, types, and operands as positions (body values
numbered in order, outside values by first use). `Templates` compiles each signature once
into closures over the slots of a list, one per body op, made by the maker `KERNELS`
registers for its op class; an instance only binds the values it reads and defines, and the
regions its `pim.load`s of function inputs read. Compiling every instance cost more than the
numpy work on small tiles. (Generating Python source per template ran a little faster, but
`compile()` cost about 16 us a line, more than it saved.)

Each closure runs its op for k instances at once, on arrays stacked over the instances along
a new leading axis (`numerics.py` groups them), with `eval_op`'s results; ops without a fast
form call `eval_op` instance by instance.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any

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


_Spec = tuple[Callable[[Operation], object], bool]
_SPECS: dict[type, _Spec] = {}
"""Per op class: its attribute getter, and whether its offsets are part of the structure
(all sliced ops but `pim.load`)."""


def _spec(cls: type[Operation]) -> _Spec:
    spec = _SPECS[cls] = (_attr_getter(cls), cls is not LoadOp and "offsets" in cls.DEF.kinds)
    return spec


def signature(op: Operation, fixed: Mapping[Value, int]) -> tuple[tuple[object, ...], list[Value]]:
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
        attrs, sliced = specs.get(cls) or _spec(cls)
        refs = []
        for v in inner.operands():
            i = ids.get(v)
            if i is None:
                i = ids[v] = -1 - len(frees)
                frees.append(v)
            refs.append(i)
        where: object = None
        if sliced:
            offs = inner.offsets  # type: ignore[attr-defined]
            where = tuple([a.const for a in offs])
            for a in offs:
                if a.terms:
                    where = tuple([_offset_key(b, fixed, ids) for b in offs])
                    break
        results = inner.results()
        for r in results:
            ids[r] = n
            n += 1
        parts.append((cls, tuple(refs), attrs(inner), where, *[type_key(r) for r in results]))
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
    weights: tuple[tuple[int | str, tuple[int, ...]], ...]
    """Per MVM: the index of its weight in the instance's reads, or a body weight's symbol
    (-1: a weight the body computes), and the weight's shape (its array group)."""
    loads: tuple[int, ...]
    """Body positions of the `pim.load`s (whose regions each instance supplies)."""
    load_reads: frozenset[int]
    """Indices of the reads that are load buffers (given as `params`, not as reads)."""
    shared: frozenset[int]
    """Indices, among the reads that are not load buffers, of the MVM-only weights (passed
    unstacked: one array, or a list when the instances' arrays differ)."""
    stacked: tuple[bool, ...]
    """Per result: stacked over the instances (False: one array for all, a body weight)."""
    listed: frozenset[int] = frozenset()
    """Indices, among the reads that are not load buffers, of large reads only an
    elementwise op's right operand reads (`_Builder.listed_reads`): a group of several
    instances passes the instances' arrays unstacked (a tuple)."""


_LISTED_MIN = 2048
"""Elements of one instance's read from which adding it instance by instance beats
stacking it (two passes over it fewer, a ufunc call per instance more; measured: 800
reads of 3,584 elements 3.1 against 5.6-6.0 ms, of 896 elements 1.34 against 1.1 ms)."""


Fail = Callable[[Operation, str], SimError]


@dataclass
class Templates:
    """The templates of one compilation, by signature."""

    body_cost: Callable[[list[Operation]], int]
    """The cost of one execution of a body's ops (`raptor.solver.costs.body_cost_ns`)."""
    weight: Callable[[WeightOp], np.ndarray]
    by_key: dict[tuple[object, ...], Template] = field(default_factory=dict)

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
Step = tuple[int, Callable[[Frame], Any]]
"""A body op's step: the runner sets slot `step[0]` of the frame to `step[1](frame)` (one
call a step, not a wrapper's two)."""
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
        self.unzeroed: set[Value] = set()
        """Empties every element of which is written before anything reads it."""
        self.uses: Counter[Value] = Counter()
        """How many body ops read each value."""
        self.owned: set[Value] = set()
        """Values made as new arrays that no other value shares (MVM and binary results)."""
        self.listed: set[Value] = set()
        """Reads passed unstacked (`Template.listed`) and the whole views of them that
        alias their slot (no step)."""
        self.copies: set[Value] = set()
        """Reads that a group of several instances stacks into a new array
        (`numerics._group`; one instance reads its value itself), and whole views of
        them that nothing else reads: new arrays nothing else shares when k > 1 (a single
        lane's body: lanes would read them again)."""

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
            elif self.lanes == 1:
                self.copies.add(v)
            self.define(v)
        loads = [pos for pos, o in enumerate(self.ops) if isinstance(o, LoadOp)]
        params = self.size
        self.size += len(loads) + 1  # and the lane, a single body's one lane unread
        lane = self.size - 1
        if isinstance(self.op, ScheduledComputeBatchOp):
            self.slot[self.args[0]] = lane
            accs = [(self.define(a), info(r)) for a, r in
                    zip(self.args[1 + n:], self.op.outs, strict=True)]
        else:
            accs = []
        weights, outs, cost, count = self.body(reads, params)
        if not self.batch:
            want = len(self.op.outs) if isinstance(self.op, ScheduledComputeOp) else \
                len(self.op.results())
            if len(outs) != want:
                raise self.fail(self.op, f"body yields {len(outs)} values for {want} results")
        else:
            outs = [s for s, _ in accs]
        return Template(_runner(self.size, lane, self.lanes, accs, outs, self.steps),
                        self.lanes * cost, self.lanes * count, tuple(weights), tuple(loads),
                        load_reads, shared, tuple(s not in self.flat for s in outs),
                        frozenset(i for i, v in enumerate(env_reads) if v in self.listed))

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

    def listed_reads(self, covering: set[Operation | Value]) -> dict[Operation, Value]:
        """Large reads (`_LISTED_MIN`) that only an elementwise ufunc's right operand of the
        result's shape reads, directly or through whole views of the read's own shape
        (reshapes, covering inserts, full slices) nothing else reads: kept in `listed`,
        the views aliasing the read's slot (returned: view op -> read)."""
        aliased: dict[Operation, Value] = {}
        users: dict[Value, list[Operation]] = {}
        for o in self.ops:
            for v in _read_by(o, covering):
                users.setdefault(v, []).append(o)
        for r in [v for v in self.copies if math.prod(info(v).shape) >= _LISTED_MIN]:
            shape, v = info(r).shape, r
            chain: list[Operation] = []
            while self.uses[v] == 1 and len(users.get(v, ())) == 1:
                (u,) = users[v]
                if isinstance(u, BinaryOp):
                    if (u.rhs is v and u.lhs is not v and isinstance(BINARY[u.op], np.ufunc)
                            and info(u.lhs).shape == info(u.result).shape == shape
                            and info(u.lhs).dtype == info(u.result).dtype == info(v).dtype
                            == _F32):
                        self.listed.update((r, *(o.results()[0] for o in chain)))
                        aliased.update((o, r) for o in chain)
                    break
                if not (_whole(u, covering) and info(u.results()[0]).shape == shape):
                    break
                chain.append(u)
                v = u.results()[0]
        return aliased

    def whole(self, src: Value, res: Value) -> None:
        """`res` is all of `src`, reshaped or sliced whole (the same C-ordered memory): one
        of `copies` when `src` is and nothing else reads `src`."""
        if src in self.copies and self.uses[src] == 1:
            self.copies.add(res)

    def stacked(self, v: Value) -> int:
        """A slot holding `v` stacked over the instances (a body weight is broadcast)."""
        s = self.slot[v]
        if s not in self.flat:
            return s
        shape = info(v).shape
        b = self.define(v)  # later reads of v find the broadcast view
        self.steps.append(_put(b, lambda fr: np.broadcast_to(fr[s], (fr[0], *shape))))
        return b

    def body(self, reads: list[Value], params: int
             ) -> tuple[list[tuple[int | str, tuple[int, ...]]], list[int], int, int]:
        """Builds the steps; returns the MVMs' weights, the slots a single body yields, its
        cost and its op count."""
        weights: list[tuple[int | str, tuple[int, ...]]] = []
        outs: list[int] = []
        costed: list[Operation] = []
        count = 0
        read_index = {v: i for i, v in enumerate(reads)}
        # An insert may write into its destination when that is a fresh buffer
        # (tensor.empty or an insert result) whose only use is this insert.
        uses = self.uses = Counter(v for o in self.ops for v in o.operands())
        covering = self.covering(uses)
        self.unzeroed = self.filled(uses)
        fresh = {o.result for o in self.ops if isinstance(o, EmptyOp | InsertSliceOp)
                 and uses[o.result] == 1 and o not in covering}
        symbols: dict[Value, str] = {}
        aliased = self.listed_reads(covering)
        for inner in self.ops:
            if inner in aliased:
                self.slot[inner.results()[0]] = self.slot[aliased[inner]]
                costed.append(inner)
                count += 1
                continue
            if inner in covering or (isinstance(inner, EmptyOp) and inner.result in covering):
                if isinstance(inner, InsertSliceOp):
                    self.steps.append(_k_reshape(self, inner, False))
                costed.append(inner)
                count += 1
                continue
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
                weights.append((symbols[w] if w in symbols else read_index.get(w, -1),
                                info(w).shape))
            try:
                if isinstance(inner, LoadOp):
                    self.steps.append(_load(params, self.define(inner.result),
                                            info(inner.result).shape))
                    params += 1
                else:
                    self.steps.append(self.step(inner, isinstance(inner, InsertSliceOp)
                                                and inner.dest in fresh))
                costed.append(inner)
            except KernelError as e:
                raise self.fail(inner, str(e)) from None
            count += 1
        if not self.batch and not isinstance(self.op, ScheduledComputeOp):
            outs.extend(self.slot[r] for r in self.op.results())
        return weights, outs, self.t.body_cost(costed), count

    def covering(self, uses: Counter[Value]) -> set[Operation | Value]:
        """Inserts that fill all of a `tensor.empty` used by nothing else, and those
        empties: the insert's result is its source reshaped (a view; nothing writes into
        it, as it is not fresh), and the empty is never made."""
        empties = {o.result for o in self.ops if isinstance(o, EmptyOp) and uses[o.result] == 1}
        found: set[Operation | Value] = set()
        for o in self.ops:
            if isinstance(o, InsertSliceOp) and o.dest in empties:
                dest, src = info(o.dest), info(o.source)
                if (src.dtype == dest.dtype and tuple(o.sizes) == dest.shape
                        and all(a.is_const and a.const == 0 for a in o.offsets)
                        and all(st == 1 for st in o.strides)):
                    found.update((o, o.dest))
        return found

    def filled(self, uses: Counter[Value]) -> set[Value]:
        """Empties that a chain of inserts at constant offsets fills completely before
        anything reads it (each link of the chain used only as the next insert's
        destination): they need no zeros."""
        into = {o.dest: o for o in self.ops if isinstance(o, InsertSliceOp)}
        found = set()
        for o in self.ops:
            if not isinstance(o, EmptyOp) or uses[o.result] != 1:
                continue
            written = np.zeros(info(o.result).shape, bool)
            v: Value = o.result
            while (ins := into.get(v)) is not None:
                offs = resolve(ins.offsets, self.fixed)
                if not all(a.is_const for a in offs):
                    break
                written[const_slices(tuple(a.const for a in offs), tuple(ins.sizes),
                                     tuple(ins.strides))] = True
                v = ins.result
                if uses[v] != 1:
                    break
            if written.all():
                found.add(o.result)
        return found

    def region(self, op: ExtractSliceOp | InsertSliceOp | ParallelInsertSliceOp
               ) -> Callable[[Frame], tuple[slice, ...]]:
        """The slice tuple (all instances, then the region), or one per lane."""
        offs = resolve(op.offsets, self.fixed)
        sizes, strides = tuple(op.sizes), tuple(op.strides)
        if all(a.is_const for a in offs):
            sl = (_ALL, *const_slices(tuple(a.const for a in offs), sizes, strides))
            return lambda fr: sl
        lane = self.args[0] if self.batch else None
        stray = [v for a in offs for v in a.vars() if v is not lane]
        if stray:
            raise KernelError(f"offset depends on %{stray[0].name}, which is neither the "
                              "batch lane nor a core-batch lane")
        assert lane is not None
        table = [(_ALL, *const_slices(tuple(a.evaluate({lane: i}) for a in offs), sizes,
                                      strides)) for i in range(self.lanes)]
        slot = self.slot[lane]
        return lambda fr: table[fr[slot]]

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


def _read_by(op: Operation, covering: set[Operation | Value]) -> tuple[Value, ...]:
    """What `op`'s step reads: an insert covering an empty reads only its source."""
    if op in covering:
        return (op.source,)  # type: ignore[attr-defined]
    return tuple(op.operands())


def _whole(op: Operation, covering: set[Operation | Value]) -> bool:
    """Whether `op` is all of its one operand, reshaped or sliced whole."""
    if isinstance(op, ReshapeOp | MaterializeLayoutOp) or op in covering:
        return True
    return isinstance(op, ExtractSliceOp) and _full(op)


def _full(op: ExtractSliceOp) -> bool:
    """A slice of all of the source (zero offsets, unit strides)."""
    return tuple(op.sizes) == info(op.source).shape and all(st == 1 for st in op.strides) \
        and all(a.is_const and a.const == 0 for a in op.offsets)


Maker = Callable[[_Builder, Any, bool], Step | None]
"""`make(builder, op, in_place)`: the step running `op` on stacked instances, or None for
`eval_op` instance by instance (`in_place`: an insert may write into its destination)."""


def _put(res: int, fn: Callable[[Frame], Any]) -> Step:
    """The step setting slot `res` to `fn(frame)`."""
    return res, fn


def _k_extract(b: _Builder, op: ExtractSliceOp, _: bool) -> Step:
    """A view, reshaped only where the result's shape is not the region's (rank-reducing)."""
    src, at, shape = b.stacked(op.source), b.region(op), info(op.result).shape
    if _full(op):
        b.whole(op.source, op.result)
    if tuple(op.sizes) == shape:
        return _put(b.define(op.result), lambda fr: fr[src][at(fr)])
    return _put(b.define(op.result), lambda fr: fr[src][at(fr)].reshape((fr[0], *shape)))


def _k_insert(b: _Builder, op: InsertSliceOp, in_place: bool) -> Step:
    """Writes into the destination only when the caller proved nobody else sees it; SSA
    values are otherwise never written (extract_slice and reshape share views)."""
    src, dst, at, sizes = b.stacked(op.source), b.stacked(op.dest), b.region(op), tuple(op.sizes)
    if info(op.source).shape == sizes:  # no reshape to the region's shape

        def insert(fr: Frame) -> Any:
            out = fr[dst] if in_place else fr[dst].copy()
            out[at(fr)] = fr[src]
            return out
    else:

        def insert(fr: Frame) -> Any:
            out = fr[dst] if in_place else fr[dst].copy()
            out[at(fr)] = fr[src].reshape((fr[0], *sizes))
            return out

    return _put(b.define(op.result), insert)


def _k_publish(b: _Builder, op: ParallelInsertSliceOp, _: bool) -> Step:
    """Writes in place: the destination is the batch's own zero-initialised result."""
    src, dst, at, sizes = b.stacked(op.source), b.stacked(op.dest), b.region(op), tuple(op.sizes)

    def publish(fr: Frame) -> Any:
        out = fr[dst]
        out[at(fr)] = fr[src].reshape((fr[0], *sizes))
        return out

    return dst, publish


def _k_transpose(b: _Builder, op: TransposeOp, _: bool) -> Step:
    """A view, not `eval_op`'s contiguous copy: no value is ever written after it is
    made (in-place inserts only write fresh buffers), so the two cannot be told apart,
    and the consumer reads the strides it would otherwise have copied."""
    src, axes = b.stacked(op.source), (0, *(p + 1 for p in op.perm))
    return _put(b.define(op.result), lambda fr: fr[src].transpose(axes))


def _k_mvm(b: _Builder, op: MvmOp, _: bool) -> Step | None:
    """`vector @ weight` per instance. A shared weight multiplies the stacked vectors
    directly; stacked weights pair up with the vectors instance by instance."""
    tw, tv = info(op.weight), info(op.vector)
    if not (tw.dtype == _F32 and tv.dtype == _F32 and len(tw.shape) == 2):
        return None
    w, vec, matmul = b.slot[op.weight], b.stacked(op.vector), np.matmul
    res, rank, shape = b.define(op.result), len(tv.shape), info(op.result).shape
    b.owned.add(op.result)
    if w in b.flat:

        def shared(fr: Frame) -> Any:
            ws = fr[w]
            if ws.__class__ is list:  # one weight per instance (tiles differ): each
                v = fr[vec]           # product straight into its row of the result,
                out = np.empty((len(ws), *shape), _F32)  # the products of one weight
                for i in sorted(range(len(ws)), key=[id(x) for x in ws].__getitem__):
                    matmul(v[i], ws[i], out=out[i])  # in a row, while it is cached
                return out
            return matmul(fr[vec], ws)

        return _put(res, shared)
    if rank == 1:
        return _put(res, lambda fr: matmul(fr[vec][:, None, :], fr[w])[:, 0, :])
    axes = tuple(range(1, rank - 1))  # the weights' batch axes line up with the vectors'
    return _put(res, lambda fr: matmul(fr[vec], np.expand_dims(fr[w], axes)))


def _k_binary(b: _Builder, op: BinaryOp, _: bool) -> Step | None:
    """float32 operands whose broadcast is the result shape: the ufunc alone is exact.
    An operand of lower rank is reshaped so that broadcasting against the result lines
    up behind the instance axis."""
    ta, tb, tr = info(op.lhs), info(op.rhs), info(op.result)
    if not ta.dtype == tb.dtype == tr.dtype == _F32:
        return None
    try:
        if np.broadcast_shapes(ta.shape, tb.shape) != tr.shape:
            return None
    except ValueError:
        return None
    fn, rank = BINARY[op.op], len(tr.shape)
    x, y, res = b.stacked(op.lhs), b.stacked(op.rhs), b.define(op.result)
    # the lhs is a new array nothing else reads (a partial sum, or a group's stacked copy
    # of a read when the group has several instances): the result overwrites it, the
    # same values (in the same C order) without allocating another
    into = fn if isinstance(fn, np.ufunc) and ta.shape == tr.shape \
        and b.uses[op.lhs] == 1 else None
    copy = op.lhs in b.copies and op.lhs not in b.owned
    if op.lhs not in b.owned and not copy:
        into = None
    b.owned.add(op.result)
    if op.rhs in b.listed:
        return _each(fn, x, y, res, into is not None and not copy, into is not None)
    xs, ys = ((1,) * (rank - len(t.shape)) + t.shape for t in (ta, tb))
    if len(ta.shape) == len(tb.shape) == rank:
        if into is None:
            return _put(res, lambda fr: fn(fr[x], fr[y]))
        if copy:
            return _put(res, lambda fr: into(fr[x], fr[y], out=fr[x]) if fr[0] > 1
                        else fn(fr[x], fr[y]))
        return _put(res, lambda fr: into(fr[x], fr[y], out=fr[x]))
    if into is None:
        return _put(res, lambda fr: fn(fr[x].reshape((fr[0], *xs)),
                                       fr[y].reshape((fr[0], *ys))))
    if copy:
        return _put(res, lambda fr: into(fr[x], fr[y].reshape((fr[0], *ys)), out=fr[x])
                    if fr[0] > 1 else fn(fr[x], fr[y].reshape((fr[0], *ys))))
    return _put(res, lambda fr: into(fr[x], fr[y].reshape((fr[0], *ys)), out=fr[x]))


def _each(fn: Any, x: int, y: int, res: int, one_into: bool, many_into: bool) -> Step:
    """A binary ufunc whose right operand a group of several instances passes unstacked
    (`Template.listed`): instance by instance into the stacked left operand (`many_into`)
    or a new array; a single instance's operands are stacked views, as usual."""
    def each(fr: Frame) -> Any:
        lhs, rhs = fr[x], fr[y]
        if fr[0] == 1:
            return fn(lhs, rhs, out=lhs) if one_into else fn(lhs, rhs)
        out = lhs if many_into else np.empty(lhs.shape, _F32)
        for xi, yi, oi in zip(lhs, rhs, out, strict=True):
            fn(xi, yi, out=oi)
        return out

    return res, each


def _k_unary(b: _Builder, op: UnaryOp, _: bool) -> Step | None:
    """Elementwise kinds on float32 run on the stacked instances (`Elementwise.stacked`)."""
    spec = op.spec
    if not (spec.stacked and info(op.result).dtype == _F32 and info(op.source).dtype == _F32):
        return None
    nums, fn, src = op.numbers(), spec.fn, b.stacked(op.source)
    return _put(b.define(op.result), lambda fr: fn(fr[src], **nums))


def _k_pad(b: _Builder, op: PadOp, _: bool) -> Step | None:
    """`np.pad` with a constant, as `eval_op`: the border holds the value cast to the
    element type, the interior the source."""
    ts, tr = info(op.source), info(op.result)
    low, high = tuple(op.low), tuple(op.high)
    if not (ts.dtype == tr.dtype == _F32 and len(low) == len(high) == len(ts.shape)
            and min((*low, *high), default=0) >= 0
            and tuple(n + a + b for n, a, b in zip(ts.shape, low, high, strict=True))
            == tr.shape):
        return None
    inner = (_ALL, *(slice(a, a + d) for a, d in zip(low, ts.shape, strict=True)))
    src, res, shape, value = b.stacked(op.source), b.define(op.result), tr.shape, op.value
    zero = value == 0.0 and math.copysign(1.0, value) > 0
    fill = np.float32(value)

    def pad(fr: Frame) -> Any:
        out = np.zeros((fr[0], *shape), _F32) if zero else np.full((fr[0], *shape), fill, _F32)
        out[inner] = fr[src]
        return out

    return res, pad


def _k_concat(b: _Builder, op: ConcatOp, _: bool) -> Step:
    rank = len(info(op.result).shape)
    srcs, axis = tuple(b.stacked(v) for v in op.sources), op.dim % rank + 1 if rank else 1
    return _put(b.define(op.result), lambda fr: np.concatenate([fr[s] for s in srcs], axis=axis))


def _k_empty(b: _Builder, op: EmptyOp, _: bool) -> Step:
    """Zeros, or uninitialised memory where inserts fill it all before it is read (no
    pass over memory that is overwritten anyway)."""
    t = info(op.result)
    make = np.empty if op.result in b.unzeroed else np.zeros
    return _put(b.define(op.result), lambda fr: make((fr[0], *t.shape), t.dtype))


def _k_reshape(b: _Builder, op: ReshapeOp | InsertSliceOp, _: bool) -> Step:
    src, shape = b.stacked(op.source), info(op.result).shape
    b.whole(op.source, op.result)
    return _put(b.define(op.result), lambda fr: fr[src].reshape((fr[0], *shape)))


def _k_alias(b: _Builder, op: MaterializeLayoutOp, _: bool) -> Step:
    src = b.stacked(op.source)
    b.whole(op.source, op.result)
    return _put(b.define(op.result), lambda fr: fr[src])


def _k_lane_result(b: _Builder, op: LaneResultOp, _: bool) -> Step:
    src, lane = b.stacked(op.source), op.lane
    return _put(b.define(op.result), lambda fr: fr[src][:, lane])


KERNELS: dict[type[Operation], Maker] = {
    ExtractSliceOp: _k_extract, InsertSliceOp: _k_insert, ParallelInsertSliceOp: _k_publish,
    ReshapeOp: _k_reshape, EmptyOp: _k_empty, MaterializeLayoutOp: _k_alias,
    LaneResultOp: _k_lane_result, TransposeOp: _k_transpose, ConcatOp: _k_concat,
    MvmOp: _k_mvm, BinaryOp: _k_binary, UnaryOp: _k_unary, PadOp: _k_pad,
}
"""Op class → the maker of its step (ops absent here run through `eval_op`)."""


def stack(arrays: list[Any]) -> np.ndarray:
    """`np.stack` of same-shaped arrays at `np.array`'s speed: one C call, where
    `np.stack` checks and reshapes every array in Python (3-10x slower on the small arrays
    of a group's instances). Equal results: both copy the arrays along a new first axis
    in their common type."""
    return np.array(arrays)


def _runner(size: int, lane: int, lanes: int, accs: list[tuple[int, TypeInfo]],
            outs: list[int], steps: list[Step]) -> GroupFn:
    """A batch's results (`accs`) start as zeros; every lane publishes into them with
    parallel_insert_slice."""
    zeros = np.zeros

    def run(k: int, reads: list[Any], params: list[Any]) -> list[Any]:
        fr: Frame = [k, *reads, *params]
        fr += [None] * (size - len(fr))
        for slot, t in accs:
            fr[slot] = zeros((k, *t.shape), t.dtype)
        for i in range(lanes):
            fr[lane] = i
            for slot, step in steps:
                fr[slot] = step(fr)
        return [fr[s] for s in outs]

    return run


def _const(res: int, value: np.ndarray) -> Step:
    return _put(res, lambda fr: value)


def _load(param: int, res: int, shape: tuple[int, ...]) -> Step:
    """A load of a function input: each instance's (array, slice tuple) is a parameter."""
    return _put(res, lambda fr: stack([buf[sl] for buf, sl in fr[param]]).reshape(
        (fr[0], *shape)))


def _generic(op: Operation, srcs: tuple[int, ...], res: int) -> Step:
    """`eval_op` on a representative op, instance by instance."""
    operands, result = op.operands(), op.results()[0]

    def run(fr: Frame) -> Any:
        outs: list[Any] = []
        for i in range(fr[0]):
            env: dict[Value, object] = dict(zip(operands, [fr[s][i] for s in srcs], strict=True))
            eval_op(op, env, {})
            outs.append(env[result])
        return np.stack(outs)

    return _put(res, run)
