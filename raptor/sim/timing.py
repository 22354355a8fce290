"""Per-op times given from outside the simulator (an exporter's model of another machine).

`Simulator(module, target, timings=...)` replaces the cost of each top-level op it names;
with `SimOptions.pimsim()` the event loop also follows pimsim-nn's communication protocol
(see `protocol.py`). Keys are (core, op) because one `pim.core_batch` op runs on several
cores whose costs may differ.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OpTiming:
    """Cycles of one top-level op: `before` it starts (register setup, packing; for an op
    that uses the global memory, until its first access), `busy` (the rest of a compute;
    a send's local read; a receive's local write), and the dispatch gap `after` it.
    `nbytes` is the message size of a send or receive; `memory` the cycles the op holds
    the chip's global memory (its `ld`/`st` services, taken as one block)."""

    before: int = 0
    busy: int = 0
    after: int = 0
    nbytes: int = 0
    memory: int = 0

    @property
    def total(self) -> int:
        return self.before + self.busy + self.after
