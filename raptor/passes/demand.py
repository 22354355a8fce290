"""Demand analysis of a lane body: which elements of each value the body's results use.

A convolution lane reads a band of its input with every channel, builds the im2col rows and
then keeps only the K rows of its crossbar tile; the other channels are read for nothing.
This pass walks the body backwards from what it publishes and bounds, per value, the box of
elements that can reach a result, so that the publication map (`projection`) gathers — and
the schedule sends — only that box. Elements outside it may hold anything (materialization
leaves them zero): by construction nothing computed from them is published.

Each op maps a demand on its result to demands on its operands. Boxes are bounding boxes
(one half-open range per dimension), so every rule may over-approximate but never drops a
used element; an op without a rule demands all of its operands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from raptor.ir.core import Block, Operation, Value
from raptor.ir.ops import (
    BinaryOp,
    ConcatOp,
    ExtractSliceOp,
    MvmOp,
    PadOp,
    ReshapeOp,
    TransposeOp,
    UnaryOp,
)
from raptor.ir.types import TensorType

Region = tuple[tuple[int, int], ...]
"""Half-open [lo, hi) per dimension."""


def _shape(v: Value) -> tuple[int, ...]:
    t = v.type
    if not isinstance(t, TensorType) or not t.is_static:
        return ()
    return t.static_shape


def full(shape: Sequence[int]) -> Region:
    return tuple((0, n) for n in shape)


def _union(a: Region | None, b: Region) -> Region:
    if a is None:
        return b
    return tuple((min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b, strict=True))


def _empty(r: Region) -> bool:
    return any(lo >= hi for lo, hi in r)


def flat_box(r: Region, src: Sequence[int], dst: Sequence[int]) -> Region:
    """Bounding box in shape ``dst`` of the elements of box ``r`` in shape ``src`` that a
    row-major reshape maps there (through the range of their flat indices)."""
    first = last = 0  # flat indices, inclusive
    for (a, b), n in zip(r, src, strict=True):
        first, last = first * n + a, last * n + b - 1
    out: list[tuple[int, int]] = []
    stride = math.prod(dst)
    narrowed = True
    for n in dst:
        stride //= n
        if narrowed:
            i, j = first // stride, last // stride
            out.append((i, j + 1))
            narrowed = i == j
            first -= i * stride
            last -= i * stride
        else:
            out.append((0, n))
    return tuple(out)


def _extract_dims(op: ExtractSliceOp) -> list[int | None]:
    """Result dim -> source dim of a (possibly rank-reducing) slice (None: none)."""
    res = _shape(op.result)
    out: list[int | None] = []
    j = 0
    for i, n in enumerate(op.sizes):
        if j < len(res) and res[j] == n and len(op.sizes) - i >= len(res) - j:
            out.append(i)
            j += 1
    return out if j == len(res) else [None] * len(res)


def extract_source_box(op: ExtractSliceOp, demand: Region, offsets: Sequence[int]) -> Region:
    """The source elements a demanded box of the slice's result comes from (``offsets``
    are the slice's constant offsets, the lane substituted)."""
    dims = _extract_dims(op)
    out = [(o, o + (n - 1) * st + 1 if n else o)
           for o, n, st in zip(offsets, op.sizes, op.strides, strict=True)]
    for j, i in enumerate(dims):
        if i is None:
            return tuple(out)
        a, b = demand[j]
        o, st = offsets[i], op.strides[i]
        out[i] = (o + a * st, o + (b - 1) * st + 1)
    return tuple(out)


def _operand_demands(op: Operation, d: Region) -> list[tuple[Value, Region]]:
    """What ``op`` needs of its operands to produce box ``d`` of its result."""
    if isinstance(op, ExtractSliceOp):
        if all(a.is_const for a in op.offsets) and None not in _extract_dims(op):
            return [(op.source, extract_source_box(op, d, [a.const for a in op.offsets]))]
    elif isinstance(op, PadOp):
        src = _shape(op.source)
        box = tuple((max(0, a - lo), min(n, b - lo))
                    for (a, b), lo, n in zip(d, op.low, src, strict=True))
        return [] if _empty(box) else [(op.source, box)]
    elif isinstance(op, ConcatOp):
        out = []
        at = 0
        dim = op.dim % len(d)
        for v in op.sources:
            n = _shape(v)[dim]
            a, b = max(d[dim][0], at), min(d[dim][1], at + n)
            if a < b:
                out.append((v, (*d[:dim], (a - at, b - at), *d[dim + 1:])))
            at += n
        return out
    elif isinstance(op, ReshapeOp):
        return [(op.source, flat_box(d, _shape(op.result), _shape(op.source)))]
    elif isinstance(op, TransposeOp):
        return [(op.source, tuple(d[j] for j in np.argsort(op.perm)))]  # the inverse permutation
    elif isinstance(op, MvmOp):
        return [(op.weight, full(_shape(op.weight))),
                (op.vector, (*d[:-1], (0, _shape(op.vector)[-1])))]
    elif isinstance(op, BinaryOp):
        out = []
        for v in (op.lhs, op.rhs):
            s = _shape(v)
            lead = len(d) - len(s)
            out.append((v, tuple((0, 1) if n == 1 else d[lead + k] for k, n in enumerate(s))))
        return out
    elif isinstance(op, UnaryOp) and op.op != "softmax":
        return [(op.source, d)]
    return [(v, full(_shape(v))) for v in op.operands()]


def body_demand(block: Block) -> dict[Value, Region]:
    """Demanded box of every value of ``block`` that anything published depends on
    (values missing from the result are not needed at all)."""
    demand: dict[Value, Region] = {}
    for op in reversed(block.ops):
        results = op.results()
        if len(results) == 1 and results[0] not in demand:
            continue  # nothing published depends on this op
        if len(results) != 1:  # publications, yields, stores: all they name is needed
            for v in op.operands():
                demand[v] = full(_shape(v))
            continue
        for v, box in _operand_demands(op, demand[results[0]]):
            if len(box) == len(_shape(v)) and not _empty(box):
                demand[v] = _union(demand.get(v), box)
    return demand
