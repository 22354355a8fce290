"""The chip's shared (global) memory: inside a stream a load must read data its own inference
stored, else `Race` (checked on the order the loop ran its accesses in); loads wait for the
stores they read and counters (`pim.signal` / `pim.wait`) count completed signals, in the
compiled loop (`raptor.sim.loop`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raptor.ir.core import Value
from raptor.sim.errors import Race
from raptor.sim.program import STORE, Box, Instr, overlap, value_name

if TYPE_CHECKING:
    from raptor.sim.engine import Engine

STORES_WAIT = "waiting for stores to shared memory"
"""The trace's reason when a load or store waits for the stores it depends on."""


def count_wait(ins: Instr) -> str:
    """The trace's reason when wait `ins` waits for its counter."""
    return f"waiting for {ins.label} >= {ins.threshold}"


class SharedMemory:
    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.counts: dict[tuple[Value, int], list[int]] = {}
        """Per counter, the sorted times its signals completed (count at t: how many <= t;
        the compiled loop's, for `Engine.why`)."""
        self.tags: dict[Value, dict[Box, int]] = {}
        """Per shared buffer a stream stores into: the inference each stored box holds."""

    def check_race(self, ins: Instr) -> None:
        """Inside a stream a store tags its box with its inference, and a load must read
        only boxes tagged with its own."""
        assert ins.region is not None
        buf, box = ins.region
        if buf not in self.e.program.written:
            return
        tags = self.tags.setdefault(buf, {})
        if ins.kind == STORE:
            tags[box] = ins.inference
            return
        seen = [(b, t) for b, t in tags.items() if overlap(box, b)]
        bad = next((t for _, t in seen if t != ins.inference), None)
        if bad is not None or not seen:
            held = f"inference {bad}'s data" if bad is not None else "nothing stored yet"
            raise Race(f"race on {value_name(buf)}: core {ins.core} at {ins.where} loads for "
                       f"inference {ins.inference} at {self.e.now} ns but the buffer holds "
                       f"{held} (a pim.wait missing or misplaced?)")
