"""The simulator's capacity check: a program whose local buffers exceed a core's memory at
some instant does not run. Every core runs its program in order, so the buffers live at
any instant are those of one step of the allocation (`raptor.passes.memory`): the check
is that no step's addresses reach past `local_memory_bytes`, nor shared memory's past
`shared_memory_bytes`."""

from __future__ import annotations

from raptor.ir.module import Module
from raptor.passes.memory import MemoryPlan, plan_memory
from raptor.sim.errors import SimError
from raptor.target import Target


def check_occupancy(module: Module, target: Target, plan: MemoryPlan | None = None) -> None:
    """Raise `SimError` naming the first core (or shared memory) over capacity. `plan`:
    the caller's `plan_memory(module, target)`, if it made one (planning ResNet-50 takes a
    minute)."""
    over = (plan if plan is not None else plan_memory(module, target)).over_capacity()
    if over:
        raise SimError(f"program exceeds the target's memory: {over[0]}")
