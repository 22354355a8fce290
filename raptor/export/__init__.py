"""Export scheduled IR to pimsim-nn (DATE'24), the field's cycle-level PIM simulator.

`export_pimsim` plans local memory, lowers every core program to pimsim-nn instructions
(`pimsim.py`), derives the chip configuration and NoC table from the target (`chip.py`)
and checks what pimsim-nn does not (`validate.py`). `write_export` lays the files out so
that `ChipTest DIR/program DIR/chip.json` runs them:

    DIR/program/config.json      {"core_cnt": N, "array_group_map": {"core0": [...], ...}}
    DIR/program/core_<id>.json   one instruction list per core (empty for idle cores)
    DIR/chip.json                chip and simulation configuration (latency mode)
    DIR/noc.json                 per-flit latency of every core pair (and the global memory)
    DIR/export.json              what the exporter did: instructions, stand-ins, memory
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from raptor.export.chip import ChipError, PimsimChip
from raptor.export.order import (
    PostedRank,
    Rank,
    channel_rank,
    message_rank,
    pimsim_order,
    posts_earlier,
)
from raptor.export.pimsim import Export, ExportError, lower_module
from raptor.export.validate import validate
from raptor.fileio import write_text_atomic
from raptor.ir.module import Module
from raptor.ir.ops import (
    ChannelReceiveOp,
    ChannelSendOp,
    CoreOp,
    LagOp,
    ScheduledComputeBatchOp,
    ScheduledComputeOp,
    StoreOp,
    StreamOp,
    WeightOp,
)
from raptor.passes.memory import MemoryPlan, plan_memory
from raptor.sim.kernels import info
from raptor.sim.timing import OpTiming
from raptor.solver.blocking import Priced
from raptor.target import Target

if TYPE_CHECKING:
    from raptor.sim.report import Trace

__all__ = ["ChipError", "Export", "ExportError", "PimsimChip", "export_pimsim",
           "pimsim_order", "stream_count", "write_export"]

NOC_FILE = "noc.json"

ORDER_STEPS = 3
"""How many steps each descent of `_best_order` takes at most, by default: on ResNet-18 at
four units each step models about 8 s of candidates (docs/benchmarks.md, wip/ord23)."""


def export_pimsim(module: Module, target: Target, plan: MemoryPlan | None = None,
                  allow_overflow: bool = False, inferences: int | None = None,
                  order_steps: int | None = None) -> Export:
    """pimsim-nn programs for scheduled `module` on `target`; raises `ExportError` listing
    every problem `validate` finds. A program that needs more local or shared memory than
    the target has is refused, unless `allow_overflow`: then the chip is written with the
    local memory the program needs (pimsim-nn never checks it) and `Export.overflow` says by
    how much. The programs follow `pimsim_order` (its receives block); simulate the export's
    timings inside `pimsim_order(module, export.rank)` too. `plan` (made in the
    materialized order, planned here if None) is used unless the blocking order posts some
    receive earlier: then memory is planned in that order. A latency program follows the
    message order Raptor's model of pimsim-nn finds faster (`_best_order`, descents of at
    most `order_steps` steps, `ORDER_STEPS` if None; 0: the channel order, the quickest
    export), and so
    does a one-stage stream (no READY/FREE counters); a program whose channel order
    deadlocks follows the order its messages leave (`_leave_order`).

    A stream program (pipeline mode, `pim.stream` per core) is unrolled for `inferences`
    (default: its own count; at most that many, the inputs it has) into straight-line
    code for pimsim-nn's latency mode, READY/FREE counters as `sync`/`wait` on event
    registers (`pimsim.py`); pimsim-nn's latency is then the time of the whole stream.
    A skewed stream body (`pim.lag`) is refused: its carried values would need their own
    addresses per inference in the unrolled code (not done; the judge does not offer one
    under pimsim-nn's protocol)."""
    if any(isinstance(op, LagOp) for op in module.walk()):
        raise ExportError("a skewed stream body (pim.lag) is not exported to pimsim-nn: "
                          "its carried values would need an address per inference")
    if order_steps is None:
        order_steps = ORDER_STEPS
    if order_steps < 0:
        raise ExportError(f"order_steps must be at least 0, got {order_steps}")
    if inferences is not None:
        count = stream_count(module)
        if count is None:
            raise ExportError("a number of inferences applies to a stream program "
                              "(pipeline mode); this is a latency program")
        if not 1 <= inferences <= count:
            raise ExportError(f"the stream program has inputs for {count} inferences; "
                              f"cannot unroll {inferences} (1..{count})")
    # scheduled for pimsim-nn: receives go where the schedule posted them (`PostedRank`)
    mine = channel_rank(module) if target.protocol == "pimsim-nn" else None
    try:
        ex = _export(module, target, plan, allow_overflow, inferences, mine)
    except ExportError as e:
        if not any(d.startswith("deadlock") for d in e.details):
            raise
        return _leave_order(module, target, plan, allow_overflow, inferences, mine, e)
    return _best_order(module, target, plan, allow_overflow, ex, inferences, order_steps)


def _leave_order(module: Module, target: Target, plan: MemoryPlan | None, allow_overflow: bool,
                 inferences: int | None, mine: Rank | None, failed: ExportError) -> Export:
    """The export in the order the messages leave (`leave_rank`, posted as `mine` is),
    for a program whose channel order deadlocks (raises `failed` if this one cannot be
    made either). Why: a core's sends need not follow the channel order; a layered stream
    (`raptor.solver.pipeline.layered_stream`) sends between its layer ranges at the end of
    its iteration, after sends of later channels, and on pimsim-nn its cores then all
    waited in sends whose receivers walk the channel order (resnet_block,
    mobilenet_block), where the leave order keeps every core's sends in program order."""
    from raptor.sim import SimError

    if plan is None:
        plan = plan_memory(module, target)
    with _stand_in_weights(module):
        try:
            rank = leave_rank(module, target, lowered(module, target, plan, inferences))
            if rank is None:
                raise failed
            ex = _export(module, target, plan, allow_overflow, inferences,
                         PostedRank(rank) if isinstance(mine, PostedRank) else rank)
        except (SimError, ExportError):
            raise failed from None
        with suppress(SimError):  # a stream with READY/FREE counters is not in the model
            ex.model_ns = _model_ns(module, target, ex)
            ex.orders_modeled = 1
    return ex


def _export(module: Module, target: Target, plan: MemoryPlan | None, allow_overflow: bool,
            inferences: int | None, rank: Rank | None) -> Export:
    """The export in the blocking order of `rank`."""
    if posts_earlier(module, rank):  # the addresses must hold in the order pimsim-nn runs
        with pimsim_order(module, rank):
            plan = plan_memory(module, target)
    elif plan is None:
        plan = plan_memory(module, target)
    over = plan.over_capacity()
    if over and not allow_overflow:
        raise ExportError("the program does not fit the target's memory", over)
    chip = _chip(target, plan)
    with pimsim_order(module, rank):
        export = lower_module(module, plan, chip, inferences)
    export.overflow, export.rank = over, rank
    problems = validate(export)
    if problems:
        raise ExportError("the exported program would not run as intended on pimsim-nn", problems)
    return export


def _chip(target: Target, plan: MemoryPlan) -> PimsimChip:
    """The chip for `target`, with the local memory `plan` needs when that is more."""
    top = plan.peak
    need = top.peak_bytes if top is not None else 0
    try:
        return PimsimChip.of(target, need if need > target.local_memory_bytes else 0)
    except ChipError as e:
        raise ExportError(str(e)) from None


def lowered(module: Module, target: Target, plan: MemoryPlan, inferences: int | None = None
            ) -> Export:
    """`module` (a stream unrolled for `inferences`) lowered in its channel order with
    `plan`'s addresses, unchecked: what the exporter prices its ops at (`ExportError` if
    it cannot)."""
    with pimsim_order(module, channel_rank(module)):
        return lower_module(module, plan, _chip(target, plan), inferences)


def task_costs(module: Module, ex: Export, core_tasks: Sequence[Sequence[int]], tasks: int
               ) -> list[Priced]:
    """Per task of the schedule latency program `module` was materialized from
    (``core_tasks``: each core's tasks in program order), its time on pimsim-nn as export
    `ex` prices its ops, for the estimate (`raptor.solver.blocking.blocking_makespan`):
    a scheduled compute's first lane takes its global-memory load and the gathers before
    it, its lanes share the rest evenly, and the last takes the stores after it. Sends,
    receives and the packing of merged messages are the protocol's, priced there."""
    ns = ex.chip.target.ns
    out = [Priced(0, 0, 0, 0, 0)] * tasks
    for core in module.main().body.ops:
        if not isinstance(core, CoreOp):
            continue
        todo = iter(core_tasks[core.core])
        before = OpTiming()  # what runs before the next compute: gathers, or packing
        last = -1
        for op in core.body.ops:
            tm = ex.timings.get((core.core, op), OpTiming())
            if isinstance(op, ScheduledComputeOp | ScheduledComputeBatchOp):
                lanes = [next(todo) for _ in range(op.lanes if isinstance(
                    op, ScheduledComputeBatchOp) else 1)]
                lead = tm.before + before.total - before.memory if tm.memory else 0
                work = tm.total + before.total - before.memory - lead - tm.memory
                for i, t in enumerate(lanes):
                    out[t] = Priced(ns(lead) if i == 0 else 0,
                                    ns(tm.memory + before.memory) if i == 0 else 0,
                                    ns(work // len(lanes) + (work % len(lanes) if i == 0 else 0)),
                                    0, 0)
                last, before = lanes[-1], OpTiming()
            elif isinstance(op, StoreOp) and last >= 0:
                c = out[last]
                out[last] = Priced(c.lead, c.load, c.work + ns(tm.before) + c.tail,
                                   c.store + ns(tm.memory),
                                   ns(tm.total - tm.before - tm.memory))
            elif isinstance(op, ChannelSendOp):
                before = OpTiming()  # a merged message's packing: the protocol's
            elif not isinstance(op, ChannelReceiveOp):
                before = OpTiming(busy=before.busy + tm.total, memory=before.memory + tm.memory)
    return out


def _best_order(module: Module, target: Target, plan: MemoryPlan | None,
                allow_overflow: bool, ex: Export, inferences: int | None,
                steps: int = ORDER_STEPS) -> Export:
    """pimsim-nn's receives block, so the message order decides how long its cores wait:
    the channel order (`ex`) or an order the messages leave in when receives do not block
    (`leave_ranks`), whichever Raptor's model of pimsim-nn finds fastest (the channel
    order on a tie, then the earlier candidate; a candidate that cannot be exported is
    skipped, a descent whose run cannot be simulated stops; the channel order alone when
    the model cannot play it: a stream with READY/FREE counters). Two descents, from the
    channel order and from the materialized order: a step judges the orders messages
    leave in from the current order (from its blocking order, after the first step from
    the materialized order) and moves to the fastest if it is faster, for at most
    ``steps`` steps (0: no search, the channel order). Why descents: run in an order's
    blocking order, a send waits as on pimsim-nn until the program reaches its receive,
    while the receive itself does not block, so the messages leave in an order nearer what
    that program allows; on ResNet-18 and yolo_neck at four units most steps ran faster on
    pimsim-nn too (docs/benchmarks.md, wip/ord23). A stream is judged on all the
    inferences it has inputs for: on pimsim-nn its cores walk one order per inference, and
    the order decides how far a core runs ahead into the next."""
    from raptor.sim import SimError

    tried: list[dict[int, int]] = []
    modeled = 1  # orders run under the model: the channel order, then the candidates

    def fastest(ranks: list[dict[int, int]]) -> tuple[int, Export] | None:
        """The fastest export of the `ranks` not tried yet, with its model time."""
        nonlocal modeled
        out: list[tuple[int, Export]] = []
        for rank in ranks:
            if rank in tried:
                continue
            tried.append(rank)
            try:
                other = _export(module, target, plan, allow_overflow, inferences,
                                PostedRank(rank) if isinstance(ex.rank, PostedRank) else rank)
                other.model_ns = ns = _model_ns(module, target, other)
            except (SimError, ExportError):
                continue
            out.append((ns, other))
            modeled += 1
        return min(out, key=lambda p: p[0], default=None)

    def descend(now: tuple[int, Export] | None) -> tuple[int, Export] | None:
        """Where the descent from `now` ends (None: it had no start)."""
        for _ in range(steps):
            if now is None:
                return None
            try:
                step = fastest(leave_ranks(module, target, now[1], True))
            except SimError:
                return now
            if step is None or step[0] >= now[0]:
                return now
            now = step
        return now

    with _stand_in_weights(module):
        try:
            ex.model_ns = _model_ns(module, target, ex)
        except SimError:
            return ex
        best = (ex.model_ns, ex)
        ends = [descend(best)]
        if steps:
            with suppress(SimError):
                ends.append(descend(fastest(leave_ranks(module, target, ex, False))))
        for end in ends:
            if end is not None and end[0] < best[0]:
                best = end
    best[1].orders_modeled = modeled
    return best[1]


def _model_ns(module: Module, target: Target, ex: Export) -> int:
    """The latency of export `ex` under Raptor's model of pimsim-nn."""
    from raptor.sim import SimOptions, Simulator

    with pimsim_order(module, ex.rank):
        return Simulator(module, target, timings=ex.timings).timing(
            SimOptions.pimsim(trace=False)).latency_ns


def leave_rank(module: Module, target: Target, ex: Export) -> dict[int, int] | None:
    """The order `module`'s messages leave in a run of `ex`'s op costs over Raptor's
    channels, where receives never block (`message_rank`); None if some send did not
    run. Raises `raptor.sim.SimError` when the program cannot be simulated."""
    from raptor.sim import SimOptions, Simulator

    _, trace = Simulator(module, target, timings=ex.timings).traced(
        SimOptions(link_contention=False))
    return _left(module, trace)


def leave_ranks(module: Module, target: Target, ex: Export, blocking: bool
                ) -> list[dict[int, int]]:
    """The distinct orders `module`'s messages leave in over Raptor's channels, where
    receives never block, with `ex`'s op costs and with Raptor's own (the target's): in
    the materialized order (receives posted where the schedule posted them) or, if
    `blocking`, in `ex`'s blocking order (each receive where pimsim-nn's blocks, and a
    send waits for its receive to be posted). Why several: which order pimsim-nn runs
    fastest moves with small cost changes, and no one run's order is fastest everywhere
    (docs/benchmarks.md, wip/ord23). Raises `raptor.sim.SimError` when the program cannot
    be simulated."""
    from raptor.sim import SimOptions, Simulator

    out: list[dict[int, int]] = []
    for timings in (ex.timings, None):
        with pimsim_order(module, ex.rank) if blocking else nullcontext():
            sim = Simulator(module, target, timings=timings)
        _, trace = sim.traced(SimOptions(link_contention=False))
        rank = _left(module, trace)
        if rank is not None and rank not in out:
            out.append(rank)
    return out


def _left(module: Module, trace: Trace) -> dict[int, int] | None:
    """`message_rank` of when each channel's first message left in `trace` (a stream's
    channel carries one message per inference)."""
    first: dict[int, int] = {}
    for _, _, ch, _, t, _ in trace.messages:
        first[ch] = min(t, first.get(ch, t))
    return message_rank(module, first)


@contextmanager
def _stand_in_weights(module: Module) -> Iterator[None]:
    """Zeros for weights a parsed module has no data for (a `.spat` without its npz), for
    the duration: the simulator compiles them, timing never reads them."""
    missing = {op.symbol: info(op.result) for op in module.walk()
               if isinstance(op, WeightOp) and op.symbol not in module.constants}
    for sym, t in missing.items():
        module.constants[sym] = np.zeros(t.shape, dtype=t.dtype)
    try:
        yield
    finally:
        for sym in missing:
            del module.constants[sym]


def stream_count(module: Module) -> int | None:
    """How many inferences a stream program has inputs for (None: a latency program)."""
    counts = [op.count for op in module.walk() if isinstance(op, StreamOp)]
    return min(counts) if counts else None


def serial_bound_ns(export: Export) -> int:
    """An upper bound on the latency of a deadlock-free run: every op of every core one
    after the other plus every message crossing the longest route alone. A timeout above it
    only ever stops a program that hangs."""
    chip = export.chip
    t = chip.target
    ops = [*export.timings.values(), *export.repeated]
    total = sum(tm.total for tm in ops)
    longest = max((chip.flit_ns(a, b) for a in (0, t.num_cores - 1)
                   for b in range(t.num_cores) if a != b), default=0)
    total += sum(2 * longest + chip.flits(tm.nbytes) * longest for tm in ops if tm.nbytes)
    return t.ns(total)


def manifest(export: Export, timeout_ms: float) -> dict[str, Any]:
    t = export.chip.target
    counts = Counter(ins["op"] for prog in export.cores.values() for ins in prog.instructions)
    return {
        "target": t.name,
        "cores_with_instructions": sum(1 for p in export.cores.values() if p.instructions),
        "instructions": export.instructions,
        "by_opcode": dict(sorted(counts.items())),
        "cycles_by_opcode": dict(sorted(export.cycles.items())),
        "per_core": {str(c): len(p.instructions) for c, p in sorted(export.cores.items())},
        "stand_ins": dict(export.notes),
        "activation_bytes": export.chip.act,
        "local_memory": export.memory.to_dict(),
        "local_memory_bytes_written": export.chip.local_bytes,
        "over_capacity": export.overflow,
        "latency_timeout_ms": timeout_ms,
        "message_order": "channel" if export.rank is None or all(
            k == v for k, v in export.rank.items()) else "send time",
        "receives_where_posted": isinstance(export.rank, PostedRank),
        "raptor_pimsim_model_ns": export.model_ns,
        "orders_modeled": export.orders_modeled,
        "mvm": {"front_cycles": export.chip.front, "back_cycles": export.chip.back,
                "compute_cycles": export.chip.mvm_compute(),
                "mvmul_cycles": export.chip.mvmul()},
    }


def write_export(export: Export, out_dir: str | os.PathLike[str],
                 timeout_ms: float | None = None) -> Path:
    """Write the program folder, chip.json, noc.json and export.json into `out_dir`. The
    program folder is built aside and renamed into place, so a reader never sees half of
    it and no core file of an earlier export survives. Returns the folder."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    if timeout_ms is None:
        timeout_ms = max(1.0, math.ceil(2 * serial_bound_ns(export) / 1e6))
    tmp = Path(tempfile.mkdtemp(prefix=".program.", dir=d))
    try:
        (tmp / "config.json").write_text(json.dumps(export.program_config()) + "\n")
        for c in range(export.chip.target.num_cores):
            prog = export.cores.get(c)
            body = prog.instructions if prog is not None else []
            lines = ",\n".join(json.dumps(i, separators=(",", ":")) for i in body)
            (tmp / f"core_{c}.json").write_text(f"[{lines}]\n", encoding="utf-8")
        final = d / "program"
        old = None
        if final.exists():
            old = d / f".program.old.{os.getpid()}"
            final.rename(old)
        tmp.rename(final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_text_atomic(d / NOC_FILE, json.dumps(export.chip.noc(), separators=(",", ":")) + "\n")
    write_text_atomic(d / "chip.json", json.dumps(export.chip.config(NOC_FILE, timeout_ms),
                                                  indent=2) + "\n")
    write_text_atomic(d / "export.json", json.dumps(manifest(export, timeout_ms), indent=2) + "\n")
    return d
