"""Execution costs of IR ops in integer ns, from the target. One table for everybody:
the ComputeGraph (scheduler estimates) and the simulator charge exactly these figures, so
with contention off the simulated latency equals the estimate."""

from __future__ import annotations

from raptor.ir.core import Block, Operation, Value
from raptor.ir.ops import (
    BinaryOp,
    ConcatOp,
    ExtractSliceOp,
    InsertSliceOp,
    LoadOp,
    MaterializeLayoutOp,
    MvmOp,
    PadOp,
    ReduceOp,
    StoreOp,
    TransposeOp,
    UnaryOp,
)
from raptor.ir.types import TensorType
from raptor.target import Target

UNARY_PASSES = {"softmax": 4, "silu": 2, "hard_swish": 2, "prelu": 3}
"""Vector passes of the composite activations (others take one pass per element)."""


def _t(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def mvm_count(op: MvmOp) -> int:
    """One crossbar MVM per input vector (row) of the operand."""
    shape = _t(op.vector).static_shape
    n = 1
    for d in shape[:-1]:
        n *= d
    return n


def shared_read_ns(target: Target, nbytes: int) -> int:
    """Shared (host) memory read of `nbytes`: accesses of `shared_access_bytes` each."""
    accesses = -(-nbytes // target.shared_access_bytes)
    return target.ns(accesses * target.shared_read_cycles)


def shared_write_ns(target: Target, nbytes: int) -> int:
    accesses = -(-nbytes // target.shared_access_bytes)
    return target.ns(accesses * target.shared_write_cycles)


def op_cost_ns(op: Operation, target: Target) -> int:
    """Cost of one execution of a lane-body op (nested regions are not included)."""
    if isinstance(op, MvmOp):
        return mvm_count(op) * target.mvm_ns()
    if isinstance(op, BinaryOp):
        return target.vector_ns(_t(op.result).numel)
    if isinstance(op, UnaryOp):
        return UNARY_PASSES.get(op.op, 1) * target.vector_ns(_t(op.result).numel)
    if isinstance(op, ReduceOp):
        return target.vector_ns(_t(op.source).numel)
    if isinstance(op, ExtractSliceOp | ConcatOp | PadOp | MaterializeLayoutOp):
        return target.local_copy_ns(_t(op.results()[0]).nbytes)
    if isinstance(op, InsertSliceOp):
        return target.local_copy_ns(_t(op.source).nbytes)
    if isinstance(op, TransposeOp):
        # memory traffic plus strided vector work
        t = _t(op.result)
        return target.local_copy_ns(t.nbytes) + target.vector_ns(t.numel)
    if isinstance(op, LoadOp):
        return shared_read_ns(target, _t(op.result).nbytes)
    if isinstance(op, StoreOp):
        return shared_write_ns(target, _t(op.value).nbytes)
    return 0  # reshape, empty, weights, yields, publications: runtime-free


def block_cost_ns(block: Block, target: Target) -> int:
    """One execution of a body (one lane)."""
    return sum(op_cost_ns(op, target) for op in block.ops)


def block_mvms(block: Block) -> int:
    return sum(mvm_count(op) for op in block.ops if isinstance(op, MvmOp))
