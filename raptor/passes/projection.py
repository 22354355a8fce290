"""The publication map: which producer fragments each graph instance reads.

Every lane of a graph batch and every graph compute is an *instance*. For each instance and
each of its inputs this computes the logical box the instance reads (the union of its slices
of that input, lane substituted) and the *pieces* that cover it: physical fragments (producer
instance, result, slot) with the logical region each fills. Blueprint families are projected
analytically (slot ranges per dimension), so the cost is linear in the entries. A read that is
not a slice keeps the whole producer value (the conservative, complete dependency).

The scheduler's dependencies and transfer bytes (solver) and the materialized receives
(MergeComputeNodes) both come from here, so they agree by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, reduce

from raptor.ir.core import Affine, Value
from raptor.ir.ops import (
    BlueprintOp,
    ComputeOp,
    ExtractSliceOp,
    FuncOp,
    GraphComputeBatchOp,
    GraphComputeOp,
    MaterializeLayoutOp,
    ParallelInsertSliceOp,
    WeightOp,
)
from raptor.ir.types import TensorType
from raptor.passes.demand import Region, body_demand, extract_source_box


class ProjectionError(Exception):
    """Malformed publication metadata: graph construction fails with this message."""


@dataclass(frozen=True)
class Box:
    """Half-open logical box `[lo_d, hi_d)` per dimension."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @staticmethod
    def whole(shape: tuple[int, ...]) -> Box:
        return Box((0,) * len(shape), shape)

    def union(self, other: Box) -> Box:
        return Box(tuple(map(min, self.lo, other.lo)), tuple(map(max, self.hi, other.hi)))

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(h - lo for lo, h in zip(self.lo, self.hi, strict=True))


@dataclass(frozen=True)
class Piece:
    """Fragment `slot` of result `result` of `producer` fills `offsets/sizes/strides` of the
    consumer-visible logical tensor. `crop` is set when only part of a whole-value fragment
    (a single graph compute's result) is read: the offsets of that part inside the fragment,
    whose shape is then `fragment`."""

    producer: int
    result: int
    slot: int
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    fragment: TensorType
    crop: tuple[int, ...] | None = None

    @property
    def box(self) -> Box:
        hi = tuple(o + (s - 1) * st + 1 if s else o
                   for o, s, st in zip(self.offsets, self.sizes, self.strides, strict=True))
        return Box(self.offsets, hi)


@dataclass
class InputUse:
    """How an instance reads input `index` of its op."""

    index: int
    kind: str  # "arg" (function argument), "weight", "placed" (fragments of instances)
    value: Value
    box: Box
    pieces: list[Piece] = field(default_factory=list)


@dataclass
class Instance:
    id: int
    op: ComputeOp
    lane: int | None
    name: str
    batch: int
    uses: list[InputUse] = field(default_factory=list)

    def fragment_type(self, result: int) -> TensorType:
        """The whole fragment this instance publishes for `result`: a lane's slot of its
        batch's N x F result, or a single compute's result (a piece may crop it)."""
        t = _t(self.op.outs[result])
        return TensorType(t.static_shape[1:], t.dtype) if self.lane is not None else t


@dataclass
class _Entry:
    """A placement family: slots lo..hi of physical value → region affine in the slot."""

    source: Value
    lo: int
    hi: int
    offsets: tuple[Affine, ...]
    var: Value | None
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    @cached_property
    def affine(self) -> list[tuple[int, int]]:
        """(constant, slot coefficient) of the region's offset along each dimension. Held
        by the entry itself: `entries` builds fresh entries for batch results and graph
        computes, so a cache keyed by `id(entry)` answered a collected entry's dims for a
        new one at the same address (a nondeterministic IndexError in `pieces`)."""
        return [(o.const, o.coef(self.var) if self.var is not None else 0)
                for o in self.offsets]


def _t(v: Value) -> TensorType:
    t = v.type
    if not isinstance(t, TensorType) or not t.is_static:
        raise ProjectionError(f"%{v.name} must be a static tensor, got {t}")
    return t


class Projection:
    """Instances of a canonical graph function and the pieces each one reads."""

    def __init__(self, func: FuncOp) -> None:
        self.instances: list[Instance] = []
        self.first: dict[ComputeOp, int] = {}
        self.lane_of_slot: dict[Value, tuple[GraphComputeBatchOp, int, dict[int, int]]] = {}
        self.placement: dict[Value, list[_Entry]] = {}
        self.producer_of: dict[Value, tuple[ComputeOp, int]] = {}
        self.func_args = set(func.args)
        self._readers: dict[tuple[ComputeOp, Value], list[Reader] | str] = {}
        self._demand: dict[ComputeOp, dict[Value, Region]] = {}
        self._sources: dict[Value, tuple[int, int, dict[int, int] | None, TensorType]] = {}
        batch_ids = 0
        for op in func.body.ops:
            if isinstance(op, GraphComputeBatchOp):
                if op.assembly:
                    raise ProjectionError(f"{op.where()}: logical-assembly batch reached "
                                          "scheduling; canonicalize first")
                self.first[op] = len(self.instances)
                for lane in range(op.lanes):
                    self.instances.append(Instance(len(self.instances), op, lane,
                                                   f"b{batch_ids}.l{lane}", batch_ids))
                self._publications(op)
                batch_ids += 1
            elif isinstance(op, GraphComputeOp):
                self.first[op] = len(self.instances)
                self.instances.append(Instance(len(self.instances), op, None,
                                               f"c{len(self.instances)}", -1))
                for r, res in enumerate(op.outs):
                    self.producer_of[res] = (op, r)
            elif isinstance(op, BlueprintOp):
                self.placement[op.result] = [
                    _Entry(op.sources[e.source], e.slots().start, e.slots().stop, e.offsets,
                           e.var, e.sizes, e.strides) for e in op.entries]
        for inst in self.instances:
            inst.uses = self._uses(inst)

    # -------------------------------------------------------------- producers
    def _publications(self, op: GraphComputeBatchOp) -> None:
        for r, (res, out) in enumerate(zip(op.outs, op.out_args, strict=True)):
            pubs = [p for p in op.body.ops if isinstance(p, ParallelInsertSliceOp)
                    and p.dest is out]
            if len(pubs) != 1 or not pubs[0].offsets:
                raise ProjectionError(f"{op.where()}: result {r} needs exactly one publication")
            slot = pubs[0].offsets[0]
            if any(v is not op.lane for v in slot.vars()):
                raise ProjectionError(f"{pubs[0].where()}: publication slot is not affine in "
                                      "the lane")
            lanes = {slot.substitute(op.lane, lane).const: lane for lane in range(op.lanes)}
            if sorted(lanes) != list(range(op.lanes)):
                raise ProjectionError(f"{pubs[0].where()}: publication slots are not a "
                                      f"permutation of 0..{op.lanes - 1}")
            self.lane_of_slot[res] = (op, r, lanes)
            self.producer_of[res] = (op, r)

    def entries(self, v: Value) -> list[_Entry] | None:
        """Placement families of a value, or None when it is opaque (no fragment map)."""
        owner = v.owner
        if isinstance(owner, MaterializeLayoutOp):
            return self.entries(owner.source)
        if v in self.placement:
            return self.placement[v]
        if v in self.lane_of_slot:  # a physical batch consumed directly: slot s is [s, 0...]
            t = _t(v)
            var = Value(v.type, "s")
            offs = (Affine(0, ((1, var),)),) + (Affine(0),) * (t.rank - 1)
            return [_Entry(v, 0, t.static_shape[0], offs, var, (1, *t.static_shape[1:]),
                           (1,) * t.rank)]
        if v in self.producer_of:  # a graph compute result: one piece, the whole value
            t = _t(v)
            return [_Entry(v, 0, 1, (Affine(0),) * t.rank, None, t.static_shape, (1,) * t.rank)]
        return None

    # -------------------------------------------------------------- consumers
    def _uses(self, inst: Instance) -> list[InputUse]:
        op = inst.op
        args = op.in_args if isinstance(op, GraphComputeBatchOp) else op.body.args[:len(op.inputs)]
        lane = inst.lane or 0
        uses = []
        for i, (v, arg) in enumerate(zip(op.inputs, args, strict=True)):
            shape = _t(v).static_shape
            if isinstance(v.owner, WeightOp):
                uses.append(InputUse(i, "weight", v, Box.whole(shape)))
                continue
            box, need = self._read_box(op, arg, shape, lane)
            if v in self.func_args:
                uses.append(InputUse(i, "arg", v, box))
                continue
            entries = self.entries(v)
            if entries is None:
                raise ProjectionError(f"{op.where()}: input {i} (%{v.name}) has no producer "
                                      "the scheduler can map")
            pieces = self.pieces(entries, need)
            uses.append(InputUse(i, "placed", v, reduce(Box.union, (p.box for p in pieces), box),
                                 pieces))
        return uses

    def _read_box(self, op: ComputeOp, arg: Value, shape: tuple[int, ...], lane: int
                  ) -> tuple[Box, Box]:
        """The union of the slices of `arg` in the body at this lane (the whole tensor for
        any other use), and the part of it the body's results depend on (`demand`). The
        readers of each argument are analysed once per op."""
        key = (op, arg)
        readers = self._readers.get(key)
        if readers is None:
            demand = self._demand.get(op)
            if demand is None:
                demand = self._demand[op] = body_demand(op.body)
            readers = self._readers[key] = _readers(op, arg, demand)
        if isinstance(readers, str):
            return Box.whole(shape), Box.whole(shape)

        def span(used: list[Span]) -> Box:
            if not used:  # nothing read
                return Box((0,) * len(shape), (0,) * len(shape))
            dims = range(len(shape))
            return Box(tuple(min(c[d] + k[d] * lane for c, k, _ in used) for d in dims),
                       tuple(max(c[d] + k[d] * lane + e[d] for c, k, e in used) for d in dims))

        return span([r for r, _ in readers]), span([n for _, n in readers if n is not None])

    def pieces(self, entries: list[_Entry], box: Box) -> list[Piece]:
        pieces = []
        for e in entries:
            lo, hi = e.lo, e.hi
            ck = e.affine
            for d, (c, k) in enumerate(ck):
                ext = (e.sizes[d] - 1) * e.strides[d] + 1 if e.sizes[d] else 0
                # region along d at slot s: [c + k*s, c + k*s + ext) must meet [blo, bhi)
                blo, bhi = box.lo[d], box.hi[d]
                if k == 0:
                    if not (c < bhi and c + ext > blo):
                        hi = lo
                    continue
                a = (blo - ext - c) / k
                b = (bhi - c) / k
                s_lo, s_hi = (a, b) if k > 0 else (b, a)
                lo = max(lo, math.floor(s_lo) + 1)
                hi = min(hi, math.ceil(s_hi))
            if lo >= hi:
                continue
            producer0, r, lanes, frag = self._source(e.source)
            # Only the part inside the box is received of one whole value (slot 0), or of a
            # slot whose fragment is laid out as its region.
            whole = lanes is None and e.var is None
            croppable = all(st == 1 for st in e.strides) and (whole or frag.static_shape == e.sizes)
            for s in range(lo, hi):
                offs = tuple(c + k * s for c, k in ck)
                producer = producer0 + lanes[s] if lanes is not None else producer0
                c_lo = tuple(map(max, offs, box.lo)) if croppable else offs
                sizes = tuple(min(o + n, b) - a for o, n, b, a in zip(
                    offs, e.sizes, box.hi, c_lo, strict=True)) if croppable else e.sizes
                if sizes == tuple(e.sizes):
                    pieces.append(Piece(producer, r, s, offs, e.sizes, e.strides, frag))
                else:
                    pieces.append(Piece(producer, r, 0 if whole else s, c_lo, sizes, e.strides,
                                        TensorType(sizes, frag.dtype),
                                        tuple(a - o for a, o in zip(c_lo, offs, strict=True))))
        return pieces

    def _source(self, src: Value) -> tuple[int, int, dict[int, int] | None, TensorType]:
        """First instance, result index, slot -> lane map (batches) and fragment type."""
        got = self._sources.get(src)
        if got is None:
            t = _t(src)
            if src in self.lane_of_slot:
                op, r, lanes = self.lane_of_slot[src]
                got = (self.first[op], r, lanes, TensorType(t.static_shape[1:], t.dtype))
            else:
                cop, r = self.producer_of[src]
                got = (self.first[cop], r, None, t)
            self._sources[src] = got
        return got


Span = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""(offset constants, lane coefficients, extents) of a slice of an argument."""
Reader = tuple[Span, Span | None]
"""A slice of an argument and the part of it the body's results depend on (None: none)."""


def _readers(op: ComputeOp, arg: Value, demand: dict[Value, Region]) -> list[Reader] | str:
    """The slices of `arg` in the body, each with its demanded part; "whole" when any use
    is not a slice or an offset depends on something but the lane."""
    lane = op.body.args[0] if isinstance(op, GraphComputeBatchOp) else None
    out: list[Reader] = []
    for inner in op.body.walk():
        if inner is op or arg not in inner.operands():
            continue
        if not isinstance(inner, ExtractSliceOp) or inner.source is not arg:
            return "whole"
        if any(v is not lane for o in inner.offsets for v in o.vars()):
            return "whole"
        c = tuple(o.const for o in inner.offsets)
        k = tuple(o.coef(lane) if lane is not None else 0 for o in inner.offsets)
        e = tuple((n - 1) * st + 1 if n else 0 for n, st in zip(inner.sizes, inner.strides,
                                                                strict=True))
        need: Span | None = None
        if inner.result in demand:
            box = extract_source_box(inner, demand[inner.result], c)
            need = (tuple(a for a, _ in box), k, tuple(b - a for a, b in box))
        out.append(((c, k, e), need))
    return out
