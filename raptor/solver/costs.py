"""Execution costs of IR ops in integer ns, from the target. One table for everybody:
the ComputeGraph (scheduler estimates) and the simulator charge exactly these figures, so
with contention off the simulated latency equals the estimate."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from raptor.ir.core import Block, Operation, Value
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


def body_cost_ns(ops: Iterable[Operation], target: Target) -> int:
    """One execution of a body's ops (one lane). Its MVMs run on the core's `mvm_units`
    (`Target.mvm_group_ns`: one array group at a time, several groups at once) unless one
    reads another's result (then one after another); everything else adds up."""
    other = 0
    counts: dict[Value, int] = {}
    derived: set[Value] = set()
    chained = False
    for op in ops:
        if isinstance(op, MvmOp):
            chained = chained or op.vector in derived
            counts[op.weight] = counts.get(op.weight, 0) + op.count
        else:
            other += op_cost_ns(op, target)
        if isinstance(op, MvmOp) or any(v in derived for v in op.operands()):
            derived.update(op.results())
    mvms = list(counts.values())
    return other + (sum(mvms) * target.mvm_ns() if chained else target.mvm_group_ns(mvms))


def block_cost_ns(block: Block, target: Target) -> int:
    """One execution of a body (one lane)."""
    return body_cost_ns(block.ops, target)


def block_mvms(block: Block) -> int:
    return sum(op.count for op in block.ops if isinstance(op, MvmOp))
