"""The chip's shared (global) memory in the event loop: loads wait for the stores they read,
counters (`pim.signal` / `pim.wait`) count completed signals, and inside a stream a load must
read data its own inference stored, else `Race`. When requests are served is the protocol's
(`protocol.Mesh.serve`); what an access does is here.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from raptor.ir.core import Value
from raptor.sim.errors import Race
from raptor.sim.program import LOAD, SIGNAL, STORE, Box, Instr, overlap, value_name
from raptor.sim.protocol import RUN
from raptor.sim.report import MEMORY, QUEUE

if TYPE_CHECKING:
    from raptor.sim.engine import Core, Engine

STORES_WAIT = "waiting for stores to shared memory"
"""The trace's reason when a load or store waits for the stores it depends on."""


def count_wait(ins: Instr) -> str:
    """The trace's reason when wait `ins` waits for its counter."""
    return f"waiting for {ins.label} >= {ins.threshold}"


class SharedMemory:
    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.free = 0
        """When the memory has served its last request."""
        self.store_done: dict[int, int] = {}
        self.store_waiters: dict[int, list[Core]] = {}
        self.counts: dict[tuple[Value, int], list[int]] = {}
        """Per counter, the sorted times its signals completed (count at t: how many <= t)."""
        self.count_waiters: dict[tuple[Value, int], list[Core]] = {}
        self.tags: dict[Value, dict[Box, int]] = {}
        """Per shared buffer a stream stores into: the inference each stored box holds."""

    def counter_ready(self, st: Core, ins: Instr) -> bool:
        """A wait whose counter has reached its threshold (by the core's clock, or later:
        then the core blocks until the signal completes); False parks the core until a
        signal on the counter."""
        assert ins.counter is not None
        if st.wait_count is ins and st.wake > st.clock:  # woken: blocked until the signal
            self.e.block(st, st.wake, count_wait(ins))
        st.wait_count = None
        need, times = ins.threshold, self.counts.get(ins.counter, [])
        if len(times) >= need:  # a threshold of 0 or less is always reached
            if need > 0 and times[need - 1] > st.clock:
                self.e.block(st, times[need - 1], count_wait(ins))
            return True
        st.wait_count = ins
        self.count_waiters.setdefault(ins.counter, []).append(st)
        return False

    def signalled(self, ins: Instr, end: int) -> None:
        """A signal completed at `end`: count it and wake the cores it may satisfy."""
        assert ins.counter is not None
        times = self.counts.setdefault(ins.counter, [])
        bisect.insort(times, end)
        waiters = self.count_waiters.get(ins.counter)
        if not waiters:
            return
        keep = []
        for w in waiters:
            wi = w.wait_count
            if wi is not None and len(times) >= wi.threshold:
                w.wake = times[wi.threshold - 1]
                self.e.push(max(self.e.now, w.clock), RUN, w)
            else:
                keep.append(w)
        self.count_waiters[ins.counter] = keep

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

    def ready(self, st: Core, ins: Instr) -> bool:
        """A load waits for every overlapping store it depends on; False parks the core."""
        ready = st.clock
        for sid in ins.deps:
            done = self.store_done.get(sid)
            if done is None:
                st.wait_store = sid
                self.store_waiters.setdefault(sid, []).append(st)
                return False
            ready = max(ready, done)
        if ready > st.clock:
            self.e.block(st, ready, STORES_WAIT)
        return True

    def access(self, st: Core, ins: Instr, start: int) -> None:
        """Perform a load/store starting at `start` (>= the core's clock) and advance it."""
        e = self.e
        if start > st.clock:
            e.block(st, start, QUEUE)
        end = start + ins.cost
        if e.spans is not None:
            e.spans.append((st.cid, start, ins.cost, ins.label, MEMORY, ins.where))
        st.busy += ins.cost
        st.clock = end
        if ins.kind >= SIGNAL:  # counters carry no data: not part of the numerics
            if ins.kind == SIGNAL:
                e.report.signals += 1
                self.signalled(ins, end)
            else:
                e.report.waits += 1
            return
        if ins.region is not None:
            self.check_race(ins)
        e.order.append(ins)
        self.accessed(ins, end)

    def accessed(self, ins: Instr, end: int) -> None:
        """Count a load or store done at `end`; a store wakes the loads waiting for it."""
        rep = self.e.report
        if ins.kind == STORE:
            rep.shared_writes += 1
            rep.shared_write_bytes += ins.nbytes
            self.store_done[ins.store_id] = end
            for waiter in self.store_waiters.pop(ins.store_id, []):
                waiter.wait_store = -1
                self.e.push(self.e.now, RUN, waiter)
        elif ins.kind == LOAD:
            rep.shared_reads += 1
            rep.shared_read_bytes += ins.nbytes
