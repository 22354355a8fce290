"""Execution costs of IR ops in integer ns, from the target. One table for everybody:
the ComputeGraph (scheduler estimates) and the simulator charge exactly these figures, so
with contention off the simulated latency equals the estimate."""

from __future__ import annotations

from collections.abc import Callable

from raptor.ir.core import Block, Operation
from raptor.ir.ops import MvmOp
from raptor.target import Target


def shared_read_ns(target: Target, nbytes: int) -> int:
    """Shared (host) memory read of `nbytes`: accesses of `shared_access_bytes` each."""
    return target.ns(-(-nbytes // target.shared_access_bytes) * target.shared_read_cycles)


def shared_write_ns(target: Target, nbytes: int) -> int:
    return target.ns(-(-nbytes // target.shared_access_bytes) * target.shared_write_cycles)


_NS: dict[str, Callable[[Target, int], int]] = {
    "mvm": lambda t, n: n * t.mvm_ns(),
    "vector": lambda t, n: t.vector_ns(n),
    "copy": lambda t, n: t.local_copy_ns(n),
    "shared_read": shared_read_ns,
    "shared_write": shared_write_ns,
}
"""`Work` kind → ns for its amount on a target."""


def op_cost_ns(op: Operation, target: Target) -> int:
    """Cost of one execution of a lane-body op (nested regions are not included): what the
    op declares it asks of the machine (`Operation.work`), priced for `target`."""
    return sum(w.times * _NS[w.kind](target, w.amount) for w in op.work())


def block_cost_ns(block: Block, target: Target) -> int:
    """One execution of a body (one lane)."""
    return sum(op_cost_ns(op, target) for op in block.ops)


def block_mvms(block: Block) -> int:
    return sum(op.count for op in block.ops if isinstance(op, MvmOp))
