"""Spilling: values a core cannot keep in its local memory go to shared memory and come back.

Runs on a scheduled program (after materialization) for each `pim.core` program whose
allocated footprint (`raptor.passes.memory`) exceeds the target's `local_memory_bytes`; for
a stream program (`pim.stream`) on one iteration's body: a value is stored and loaded back
within its inference, so one spill buffer serves every inference (the core runs them in
order).

At the step where the most bytes are live, it evicts, Belady-style, the live values whose next
use is furthest away (not used at that step): the value is stored once to its own
`pim.alloc_shared` buffer after its last use before the step (`pim.store`), and loaded back
into a fresh value just before its next use (`pim.load`), which every later use then reads.
A reloaded value evicted again is not stored again (shared memory still holds it). It
repeats until the footprint fits or nothing is left to evict; once no step has more bytes
live than the memory but the placed buffers still reach past it (fragmentation), it evicts
at the fullest step where they do. `spill(..., exact=True)` first chooses the evictions with
a small exact model instead (`_CoreSpiller.evict_exact`); Belady stays the default
(docs/benchmarks.md §1d compares them).

What may be evicted: a top-level value that owns its buffer alone — a compute's result, a
received fragment already read once (storing one still in flight would wait for its data),
or a reload. What is live inside one compute (its gathered inputs, intermediates, result)
cannot be: a compute that alone exceeds the memory must be split before (lowering does not
gather what cannot fit, `raptor.passes.memory.gather_fits`).

The pass only rewrites IR; the caller prices the `Spill.ops` it returns with the target's
shared-memory costs (the chip serves them one at a time) in its estimate.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from raptor.ir.core import Affine, Block, Operation, Value
from raptor.ir.module import Module
from raptor.ir.ops import (
    AllocSharedOp,
    ChannelReceiveOp,
    CoreOp,
    LoadOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    StoreOp,
    StreamOp,
)
from raptor.ir.rewriting import replace_uses
from raptor.ir.types import TensorType
from raptor.passes.memory import (
    _breadth,
    _CoreAllocator,
    _iteration,
    _Storage,
    activation_bytes,
)
from raptor.target import Target

MAX_SPILLS = 4000
"""Eviction rounds tried per core before giving up (each re-plans the core's memory)."""
EXACT_UNITS = 5.0
"""CP-SAT deterministic time per core for the exact eviction model (about 5 s idle)."""
STALE = 8
"""Rounds without a smaller footprint after which a core is given up."""


@dataclass
class CoreSpill:
    """What spilling did on one core."""

    core: int
    stores: int = 0
    loads: int = 0
    stored_bytes: int = 0
    loaded_bytes: int = 0
    ops: list[tuple[Operation, int]] = field(default_factory=list)
    """Each spill op with the number of the core's tasks run before it (a scheduled batch
    counts its lanes): the caller charges it to the task it follows."""


@dataclass
class Spill:
    """Spilling of a whole program: per core, and the cores it could not fit."""

    cores: dict[int, CoreSpill] = field(default_factory=dict)
    unfit: list[int] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(c.stored_bytes + c.loaded_bytes for c in self.cores.values())


@dataclass
class _Names:
    """A counter that keeps the spill buffers' and reloads' names distinct in a module."""

    count: int = 0


def _heights(storages: list[_Storage], steps: int) -> np.ndarray:
    """The highest address in use at each step (as `_breadth` counts steps), once the
    buffers are placed."""
    height = np.zeros(steps, dtype=np.int64)
    for s in storages:
        seg = height[s.start:s.end + 1]
        np.maximum(seg, s.addr + s.size, out=seg)
    return height


def _allocate(body: Block, core: int, eb: int, carried: dict[Value, int] | None = None
              ) -> tuple[_CoreAllocator, int]:
    """The core's allocation and its footprint."""
    alloc = _CoreAllocator(body, core, eb, carried=carried)
    alloc.run()
    return alloc, alloc.allocate().peak_bytes


class _CoreSpiller:
    """Evictions on one core program."""

    def __init__(self, func_body: Block, core: CoreOp, target: Target, eb: int,
                 names: _Names, exact: bool = False) -> None:
        self.func_body = func_body
        self.exact = exact
        self.names = names
        self.body = _iteration(core.body)[0]
        self.cap = target.local_memory_bytes
        self.eb = eb
        self.home: dict[Value, Value] = {}
        """A value whose data is already in shared memory -> its buffer."""
        self.out = CoreSpill(core.core)

    def run(self) -> bool:
        """Evict until the core fits; whether it does. While more bytes are live at some
        step than the memory holds, evict at the fullest step; once none is (the
        allocation is fragmented), at the fullest of the steps whose buffers reach past
        the memory that has anything to evict, the bytes above the memory there."""
        best, stale = -1, 0
        if self.exact and not self.evict_exact(_allocate(self.body, self.out.core, self.eb)[0]):
            return False
        for _ in range(MAX_SPILLS):
            alloc, footprint = _allocate(self.body, self.out.core, self.eb)
            if footprint <= self.cap:
                return True
            best, stale = (footprint, 0) if best < 0 or footprint < best else (best, stale + 1)
            if stale == STALE:
                return False
            breadth = _breadth(alloc.storages, alloc.step)
            step = int(breadth.argmax())
            if int(breadth[step]) > self.cap:
                over = int(breadth[step]) - self.cap
                if not self.evict(alloc, step, over, over):
                    return False
                continue
            height = _heights(alloc.storages, len(breadth))
            high = np.flatnonzero(height > self.cap)
            if not any(self.evict(alloc, int(t), int(height[t]) - self.cap, 1)
                       for t in high[np.argsort(-breadth[high], kind="stable")]):
                return False
        return False

    def evict_exact(self, alloc: _CoreAllocator) -> bool:
        """Choose every eviction at once: the idle stretches (between a value's uses, or
        a compute's result and its first use) to spend in shared memory so that at each
        op no more bytes are live than the memory holds, moving the fewest bytes (a value
        is stored once, loaded back once per stretch). CP-SAT, one worker, deterministic
        time `EXACT_UNITS`; False when no choice frees enough (what the computes hold by
        themselves does not fit)."""
        ops = self.body.ops
        index = {id(op): i for i, op in enumerate(ops)}
        breadth = _breadth(alloc.storages, alloc.step)
        need: dict[int, int] = {}  # top-level op -> bytes to free while it runs
        for t in np.flatnonzero(breadth > self.cap).tolist():
            where = alloc.where[min(t, len(alloc.where) - 1)]
            if where is not None:
                i = index[id(where[1] if where[1] is not None else where[0])]
                need[i] = max(need.get(i, 0), int(breadth[t]) - self.cap)
        if not need:
            return True
        uses: dict[Value, list[int]] = {}
        for i, op in enumerate(ops):
            for v in op.operands():
                uses.setdefault(v, []).append(i)
        defined: dict[int, list[int]] = {}  # storage -> where its top-level values are made
        for i, op in enumerate(ops):
            for v in op.results():
                if v in alloc.loc:
                    defined.setdefault(id(alloc.loc[v][0]), []).append(i)
        over = sorted(need)
        gaps: list[tuple[Value, int, int, int]] = []
        for i, op in enumerate(ops):
            if not isinstance(op, ScheduledComputeOp | ChannelReceiveOp | LoadOp):
                continue
            for v in op.results():
                if not isinstance(v.type, TensorType) or v not in alloc.loc:
                    continue
                st, off = alloc.loc[v]
                if off or st.pinned or st.size != alloc.nbytes(v):
                    continue
                # a receive still in flight cannot be stored: its first stretch stays; a
                # value owns its buffer alone until a later one is made in it (in place)
                points = ([] if isinstance(op, ChannelReceiveOp) else [i]) + uses.get(v, [])
                for a, b in itertools.pairwise(points):
                    lo = bisect.bisect_right(over, a)
                    if lo < len(over) and over[lo] < b and \
                            bisect.bisect_left(defined[id(st)], b) == 1:
                        gaps.append((v, a, b, st.size))
        model = cp_model.CpModel()
        x = [model.new_bool_var(f"g{k}") for k in range(len(gaps))]
        stored = {v: model.new_bool_var(f"v{k}") for k, v in enumerate(dict.fromkeys(
            g[0] for g in gaps))}
        for k, (v, *_) in enumerate(gaps):
            model.add_implication(x[k], stored[v])
        for j, n in need.items():
            cover = [(x[k], g[3]) for k, g in enumerate(gaps) if g[1] < j < g[2]]
            if sum(size for _, size in cover) < n:
                return False
            model.add(sum(size * var for var, size in cover) >= n)
        size_of = {g[0]: g[3] for g in gaps}
        model.minimize(sum(size_of[v] * var for v, var in stored.items())
                       + sum(g[3] * x[k] for k, g in enumerate(gaps)))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        solver.parameters.max_deterministic_time = EXACT_UNITS
        if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        chosen = sorted((g for k, g in enumerate(gaps) if solver.value(x[k])),
                        key=lambda g: g[1])
        current: dict[Value, Value] = {}
        for v, a, b, _ in chosen:
            cur = current.get(v, v)
            now = list(self.body.ops)
            at = next(i for i, op in enumerate(now) if op is ops[a])
            cur_uses = [i for i, op in enumerate(now) if cur in op.operands()]
            if not any(now[u] is ops[b] for u in cur_uses if u > at):
                continue  # an earlier choice moved this stretch's reader: Belady follows
            current[v] = self.spill(cur, now, cur_uses, at)
        return True

    def evict(self, alloc: _CoreAllocator, step: int, excess: int, need: int) -> bool:
        """Evict values live at `step` (furthest next use first) until `excess` bytes are
        freed; False when evicting every candidate would not free the `need` bytes (what
        the compute there holds by itself does not fit)."""
        ops = self.body.ops
        index = {id(op): i for i, op in enumerate(ops)}
        where = alloc.where[min(step, len(alloc.where) - 1)]
        if where is None:
            return False
        at = index[id(where[1] if where[1] is not None else where[0])]
        while at + 1 < len(ops) and isinstance(ops[at], LoadOp):
            at += 1  # loads held for the op that reads them: evict for that op
        uses: dict[Value, list[int]] = {}
        for i, op in enumerate(ops):
            for v in op.operands():
                uses.setdefault(v, []).append(i)
        owners: dict[int, int] = {}  # storage -> top-level values defined by then in it
        for op in ops[:at + 1]:
            for v in op.results():
                if v in alloc.loc:
                    s = alloc.loc[v][0]
                    owners[id(s)] = owners.get(id(s), 0) + 1
        cands: list[tuple[int, int, int, Value]] = []
        for i, op in enumerate(ops[:at]):
            for v in op.results():
                if not isinstance(v.type, TensorType) or v not in alloc.loc:
                    continue
                s, off = alloc.loc[v]
                if off or s.pinned or s.size != alloc.nbytes(v) or owners.get(id(s)) != 1 \
                        or not s.start <= step <= s.end:
                    continue
                us = uses.get(v, [])
                before = [u for u in us if u <= at]
                later = [u for u in us if u > at]
                if at in us or not later:
                    continue
                if isinstance(op, ChannelReceiveOp) and not before:
                    continue  # still in flight: a store would wait for its data
                if not isinstance(op, ScheduledComputeOp | ChannelReceiveOp | LoadOp):
                    continue
                cands.append((later[0], s.size, i, v))
        if sum(c[1] for c in cands) < need:
            return False
        freed = 0
        chosen = list(ops)
        # furthest next use first; among those, the largest
        for _, size, _, v in sorted(cands, key=lambda c: (-c[0], -c[1], c[2])):
            self.spill(v, chosen, uses[v], at)
            freed += size
            if freed >= excess:
                break
        return True

    def spill(self, v: Value, old: list[Operation], uses: list[int], at: int) -> Value:
        """Store `v` after its last use up to `at` (unless shared memory holds it) and load
        it back before its next use. `uses` and `at` index the program as it was when the
        eviction was chosen (`old`): ops are found again by identity."""
        t = v.type
        assert isinstance(t, TensorType)
        shape = t.static_shape
        zero, ones = tuple(Affine(0) for _ in shape), (1,) * len(shape)
        before = old[min(u for u in uses if u > at)]
        after: Operation | None = None
        buf = self.home.get(v)
        if buf is None:
            buf = Value(t, f"spill{self.names.count}")
            alloc = AllocSharedOp(buf)
            alloc.own_results()
            self.func_body.ops.insert(0, alloc)
            last = max([u for u in uses if u <= at], default=-1)
            after = old[last] if last >= 0 else next(op for op in old if v in op.results())
            self.out.stores += 1
            self.out.stored_bytes += t.numel * self.eb
        back = Value(t, f"reload{self.names.count}")
        self.names.count += 1
        ld = LoadOp(buf, back, zero, shape, ones)
        ld.own_results()
        self.home[back] = buf
        self.out.loads += 1
        self.out.loaded_bytes += t.numel * self.eb
        ops = self.body.ops
        nxt = next(i for i, op in enumerate(ops) if op is before)
        replace_uses(Block([], ops[nxt:]), v, back)
        ops.insert(nxt, ld)
        if after is not None:
            pos = next(i for i, op in enumerate(ops) if op is after)
            ops.insert(pos + 1, StoreOp(v, buf, zero, shape, ones))
        return back

    def finish(self) -> CoreSpill:
        """Record each spill op with the tasks run before it."""
        done = 0
        buffers = set(self.home.values())
        for op in self.body.ops:
            if isinstance(op, ScheduledComputeOp):
                done += 1
            elif isinstance(op, ScheduledComputeBatchOp):
                done += op.lanes
            elif isinstance(op, StoreOp | LoadOp) and op.buffer in buffers:
                self.out.ops.append((op, done))
        return self.out


def spill(module: Module, target: Target, exact: bool = False) -> Spill:
    """Spill on every core program of `module`'s main function that does not fit its
    local memory (see the module docstring); rewrites `module` in place. `exact`: choose
    the evictions with the exact model first (`_CoreSpiller.evict_exact`), then Belady
    for what fragmentation leaves."""
    eb = activation_bytes(target)
    func = module.main()
    out = Spill()
    names = _Names()
    for op in list(func.body.ops):
        if not isinstance(op, CoreOp):
            continue
        body, carried = _iteration(op.body)
        if _allocate(body, op.core, eb, carried)[1] <= target.local_memory_bytes:
            continue
        if body not in (op.body, *(o.body for o in op.body.ops if isinstance(o, StreamOp))):
            out.unfit.append(op.core)  # spilling a skewed loop body is not done
            continue
        sp = _CoreSpiller(func.body, op, target, eb, names, exact)
        if not sp.run():
            out.unfit.append(op.core)
        if sp.home:
            out.cores[op.core] = sp.finish()
    return out
