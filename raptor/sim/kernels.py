"""Precompiled numpy closures for lane-body ops.

The simulator executes every op of every lane; going through `eval_op`'s isinstance chain
and per-call affine evaluation costs more than the numpy work itself on small tiles. Each
op is therefore turned once into a closure over its operands, with slice regions resolved
ahead of time (constants, the core-batch lane substituted, per-lane tables for batch lanes).
The closures keep `eval_op`'s semantics; ops without a fast form call `eval_op` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
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
    MaterializeLayoutOp,
    MvmOp,
    PadOp,
    ParallelInsertSliceOp,
    ReduceOp,
    ReshapeOp,
    TransposeOp,
    UnaryOp,
)
from raptor.ir.types import TensorType
from raptor.sim.errors import SimError

Env = dict[Value, Any]
"""One core's values: numpy arrays, and ints for lane indices."""
Kernel = Callable[[Env], None]
Region = Callable[[Env], tuple[slice, ...]]
Where = tuple[slice, ...] | Region
"""A region known at compile time (the slice tuple) or depending on the lane."""

GENERIC_OPS = (UnaryOp, ReduceOp, TransposeOp, ConcatOp, PadOp, MaterializeLayoutOp)
"""Ops `eval_op` can run when they have no dedicated closure below."""

_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "vadd": np.add, "vsub": np.subtract, "vmul": np.multiply, "vdiv": np.divide,
    "vmax": np.maximum, "vmin": np.minimum,
}
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, np.float32(0)), "tanh": np.tanh, "exp": np.exp,
    "neg": np.negative,
}
"""Unary ops that are one float32 ufunc, as in `eval_op`."""
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
def _const_slices(offsets: tuple[int, ...], sizes: tuple[int, ...], strides: tuple[int, ...]
                  ) -> tuple[slice, ...]:
    """`slices` for constant offsets, shared between the many ops cutting the same box."""
    return slices(offsets, sizes, strides)


def region(offsets: Sequence[Affine], sizes: Sequence[int], strides: Sequence[int],
           fixed: Mapping[Value, int], lanes: Mapping[Value, int]) -> Where:
    """The slice tuple of a strided region, or a function of the env giving it.

    Constant offsets (after substituting the core-batch lane) give the tuple itself, which
    kernels index with directly. Offsets depending only on one batch lane variable of
    known count become a table indexed by the lane, so a lane costs one list lookup
    instead of affine arithmetic.
    """
    if not any(a.terms for a in offsets):
        return _const_slices(tuple([a.const for a in offsets]), tuple(sizes), tuple(strides))
    offs = resolve(offsets, fixed)
    free = {v for a in offs for v in a.vars()}
    if not free:
        return _const_slices(tuple([a.const for a in offs]), tuple(sizes), tuple(strides))
    if len(free) == 1:
        (var,) = free
        if var in lanes:
            table = [slices([a.evaluate({var: i}) for a in offs], sizes, strides)
                     for i in range(lanes[var])]
            return lambda env: table[env[var]]

    def dynamic(env: Env) -> tuple[slice, ...]:
        return slices([a.const + sum(c * env[v] for c, v in a.terms) for a in offs],
                      sizes, strides)

    return dynamic


def kernel(op: Operation, fixed: Mapping[Value, int], lanes: Mapping[Value, int],
           in_place: bool = False) -> Kernel:
    """A closure executing one lane-body op on an env; raises KernelError if unsupported.

    `in_place` lets an insert_slice write into its destination instead of a copy: the
    caller guarantees the destination is a buffer nobody else can see (a fresh
    tensor.empty or insert result whose only use is this op). Every other value is shared
    freely (extract_slice and reshape return views): SSA values are never written."""
    if isinstance(op, MvmOp):
        return _mvm(op)
    if isinstance(op, BinaryOp):
        return _binary(op)
    if isinstance(op, UnaryOp) and op.op in _UNARY and info(op.result).dtype == _F32:
        return _ufunc(op.source, op.result, _UNARY[op.op])
    if isinstance(op, ExtractSliceOp):
        return _extract(op, region(op.offsets, op.sizes, op.strides, fixed, lanes))
    if isinstance(op, InsertSliceOp):
        return _insert(op, region(op.offsets, op.sizes, op.strides, fixed, lanes), in_place)
    if isinstance(op, ParallelInsertSliceOp):
        return _publish(op, region(op.offsets, op.sizes, op.strides, fixed, lanes))
    if isinstance(op, ReshapeOp):
        src, res, shape = op.source, op.result, info(op.result).shape

        def reshape(env: Env) -> None:
            env[res] = env[src].reshape(shape)

        return reshape
    if isinstance(op, EmptyOp):
        t = info(op.result)
        res, shape, dtype = op.result, t.shape, t.dtype

        def empty(env: Env) -> None:
            env[res] = np.zeros(shape, dtype)

        return empty
    if isinstance(op, TransposeOp):
        return _transpose(op)
    if isinstance(op, ConcatOp):
        return _concat(op)
    if isinstance(op, PadOp):
        return _pad(op)
    if isinstance(op, MaterializeLayoutOp):
        src, res = op.source, op.result

        def alias(env: Env) -> None:
            env[res] = env[src]

        return alias
    if isinstance(op, LaneResultOp):
        src, res, lane = op.source, op.result, op.lane

        def lane_view(env: Env) -> None:
            env[res] = env[src][lane]

        return lane_view
    if isinstance(op, GENERIC_OPS):
        return _generic(op)
    raise KernelError(f"{op.NAME} cannot execute here")


def _generic(op: Operation) -> Kernel:
    def run(env: Env) -> None:
        eval_op(op, env, {})

    return run


def _ufunc(src: Value, res: Value, fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    def run(env: Env) -> None:
        env[res] = fn(env[src])

    return run


def _mvm(op: MvmOp) -> Kernel:
    w, v, res = op.weight, op.vector, op.result
    if info(w).dtype == _F32 and info(v).dtype == _F32:
        matmul = np.matmul

        def run(env: Env) -> None:
            env[res] = matmul(env[v], env[w])

        return run
    return _generic(op)


def _binary(op: BinaryOp) -> Kernel:
    a, b, res = op.lhs, op.rhs, op.result
    ta, tb, tr = info(a), info(b), info(res)
    f32 = ta.dtype == tb.dtype == tr.dtype == _F32
    if ta.shape == tb.shape:
        same_shape = ta.shape == tr.shape
    else:
        try:
            same_shape = np.broadcast_shapes(ta.shape, tb.shape) == tr.shape
        except ValueError:
            same_shape = False
    if f32 and same_shape:
        fn = _BINARY[op.op]

        def run(env: Env) -> None:
            env[res] = fn(env[a], env[b])

        return run
    return _generic(op)


def _extract(op: ExtractSliceOp, where: Where) -> Kernel:
    src, res, shape = op.source, op.result, info(op.result).shape
    if isinstance(where, tuple):
        sl = where

        def const(env: Env) -> None:
            env[res] = env[src][sl].reshape(shape)

        return const

    def run(env: Env) -> None:
        env[res] = env[src][where(env)].reshape(shape)

    return run


def _insert(op: InsertSliceOp, where: Where, in_place: bool) -> Kernel:
    src, dst, res, sizes = op.source, op.dest, op.result, tuple(op.sizes)
    if isinstance(where, tuple):
        sl = where
        if in_place:

            def write_const(env: Env) -> None:
                out = env[dst]
                out[sl] = env[src].reshape(sizes)
                env[res] = out

            return write_const

        def copy_const(env: Env) -> None:
            out = env[dst].copy()
            out[sl] = env[src].reshape(sizes)
            env[res] = out

        return copy_const
    if in_place:

        def write(env: Env) -> None:
            out = env[dst]
            out[where(env)] = env[src].reshape(sizes)
            env[res] = out

        return write

    def run(env: Env) -> None:
        out = env[dst].copy()
        out[where(env)] = env[src].reshape(sizes)
        env[res] = out

    return run


def _publish(op: ParallelInsertSliceOp, where: Where) -> Kernel:
    """Writes in place: the destination is the batch's own zero-initialised result."""
    src, dst, sizes = op.source, op.dest, tuple(op.sizes)
    if isinstance(where, tuple):
        sl = where

        def const(env: Env) -> None:
            env[dst][sl] = env[src].reshape(sizes)

        return const

    def run(env: Env) -> None:
        env[dst][where(env)] = env[src].reshape(sizes)

    return run


def _transpose(op: TransposeOp) -> Kernel:
    src, res, perm = op.source, op.result, tuple(op.perm)
    transpose, contiguous = np.transpose, np.ascontiguousarray

    def run(env: Env) -> None:
        env[res] = contiguous(transpose(env[src], perm))

    return run


def _concat(op: ConcatOp) -> Kernel:
    srcs, res, dim = tuple(op.sources), op.result, op.dim
    concatenate = np.concatenate

    def run(env: Env) -> None:
        env[res] = concatenate([env[s] for s in srcs], axis=dim)

    return run


def _pad(op: PadOp) -> Kernel:
    """`np.pad` with a constant, as `eval_op`: the border holds the value cast to the
    element type, the interior the source."""
    src, res = op.source, op.result
    ts, tr = info(src), info(res)
    low, high = tuple(op.low), tuple(op.high)
    value = float(op.value)
    if (ts.dtype != _F32 or tr.dtype != _F32 or len(low) != len(ts.shape)
            or len(high) != len(ts.shape) or min((*low, *high), default=0) < 0
            or tuple(n + a + b for n, a, b in zip(ts.shape, low, high, strict=True))
            != tr.shape):
        return _generic(op)
    shape = tr.shape
    inner = tuple(slice(a, a + n) for a, n in zip(low, ts.shape, strict=True))
    if value == 0.0 and math.copysign(1.0, value) > 0:
        zeros = np.zeros

        def run(env: Env) -> None:
            out = zeros(shape, _F32)
            out[inner] = env[src]
            env[res] = out

        return run
    fill = np.float32(value)
    empty = np.empty

    def fill_run(env: Env) -> None:
        out = empty(shape, _F32)
        out[...] = fill
        out[inner] = env[src]
        env[res] = out

    return fill_run
