"""The values of a simulated run, computed after its timing (values never depend on time).

An instruction's level is the first level at which all its operands exist (a value made at
level L exists from L + 1, a message's value from the level of its send: a level's sends
run first, on what earlier levels made, and a whole value sent is the sender's own); the
accesses to
one shared buffer also keep the event loop's order among themselves, which settles every race
on a buffer exactly as the timed run did (accesses to different buffers cannot race, so they
keep no order: the inferences of a stream then share levels, and their computes stack). The
computes of one level are independent, so all instances of one template in a level run
together, one numpy call per body op on arrays stacked over the instances: that is what makes
the numerics cheap on real models, whose layers are hundreds of instances of a few dozen
bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from raptor.sim.errors import SimError
from raptor.sim.kernels import Template, stack
from raptor.sim.program import COMPUTE, LOAD, Instr, Move, Program

Level = tuple[dict[Template, list[Instr]], list[Move], list[Instr]]
"""One level: its computes by template (instances in the order the loop performed them),
its sends of regions (run first: a send that forwards what another sent comes after it),
then its memory accesses in the loop's order."""


def levels(program: Program, order: Sequence[Instr]) -> list[Level]:
    """The recorded instructions by level (see the module docstring), with the sends of
    regions of each value (`Program.views`) in the level after the one that makes it."""
    values, buffers = program.slots
    ready = [0] * values  # per (core, value) slot, the level it exists from
    memory = [0] * buffers  # per buffer, the level of its latest access
    store_done: dict[int, int] = {}
    out: list[Level] = [({}, [], [])]
    views = program.views

    def made(v: int, level: int) -> None:
        """Value `v` exists from `level`: its sends of regions, and theirs, run there."""
        if level >= len(out):
            out.extend([({}, [], []) for _ in range(level + 1 - len(out))])
        moves = views[v].copy()
        for move in moves:  # the list grows while it is walked: forwarded regions
            dst = move[1]
            ready[dst] = level
            more = views.get(dst)
            if more is not None:
                moves += more
        out[level][1].extend(moves)

    for v in program.initial_views:
        made(v, 0)
    get = ready.__getitem__
    for ins in order:
        kind = ins.kind
        ins_in, ins_out = ins.slots_in, ins.slots_out
        if kind == COMPUTE:
            level = max(map(get, ins_in)) if ins_in else 0
            for v in ins_out:
                ready[v] = level + 1
                if v in views:
                    made(v, level + 1)
        else:
            buf = ins.buffer_slot
            if kind == LOAD:
                level = max([memory[buf], *[store_done[s] for s in ins.deps]])
                v = ins_out[0]
                ready[v] = level + 1
                if v in views:
                    made(v, level + 1)
            else:
                level = max(memory[buf], ready[ins_in[0]])
                store_done[ins.store_id] = level + 1
            memory[buf] = level
        if level >= len(out):
            out += [({}, [], []) for _ in range(level + 1 - len(out))]
        if kind == COMPUTE:
            assert ins.template is not None
            groups = out[level][0]
            group = groups.get(ins.template)
            if group is None:
                groups[ins.template] = [ins]
            else:
                group.append(ins)
        else:
            out[level][2].append(ins)
    return out


STACKED, LISTED, SHARED = range(3)
"""How a group of several instances passes a read: stacked over the instances, as the
tuple of the instances' arrays (`Template.listed`), or as an MVM-only weight
(`Template.shared`: one array when all instances share it, else their list)."""


Plan = list[tuple[list[Move], list["GroupRun"], list[Instr]]]
"""A run's numerics, ready to execute: per level, its sends of regions, its groups as
functions of the values, its memory accesses (`plan`)."""

GroupRun = Callable[[list[Any]], None]
"""Runs one group of instances on a run's values (`_group`)."""


def plan(program: Program, order: Sequence[Instr]) -> Plan:
    """The numerics of a run whose event loop performed `order`: its `levels`, each group
    with its gathers made (the read and result slots by column, the loads' regions). It
    depends on the order alone, not on the values, so a `Program` keeps the last one and
    the next run of the same order (any inputs; the timing depends on none) reuses it."""
    cached = program.plan
    if cached is not None and cached[0] == order:  # identity per element: a C loop
        return cached[1]
    made = [(moves, [_group(group) for group in groups.values()], accesses)
            for groups, moves, accesses in levels(program, order)]
    program.plan = (list(order), made)
    return made


def execute(program: Program, order: Sequence[Instr]) -> None:
    """Compute every value of a run whose event loop performed `order`; fills the run's
    values (`Program.values`, by slot) and the shared buffers. Raises SimError naming the
    core and op that fails."""
    values = program.values
    for moves, groups, accesses in plan(program, order):
        try:
            for move in moves:  # a send is a view of the region it sends
                src, dst, sl, shape = move
                values[dst] = values[src][sl] if shape is None else values[src][sl].reshape(shape)
        except (ValueError, IndexError) as e:
            raise _failed(next(i for p in program.cores.values() for i in p if i.move is move),
                          e) from None
        for run in groups:
            run(values)
        for ins in accesses:
            assert ins.access is not None
            buf, sl, shape = ins.access
            try:
                if ins.kind == LOAD:
                    values[ins.slots_out[0]] = buf[sl].copy().reshape(shape)
                else:
                    buf[sl] = values[ins.slots_in[0]].reshape(shape)
            except (ValueError, IndexError) as e:
                raise _failed(ins, e) from None


def _group(group: list[Instr]) -> GroupRun:
    """A function running the k instances of one template at once on a run's values and
    handing each its slice of the results; what it gathers (slots by column, loads'
    regions) is found here, once per plan."""
    first = group[0]
    tpl = first.template
    assert tpl is not None
    k, run, shared, listed = len(group), tpl.run, tpl.shared, tpl.listed
    params = [[ins.params[j] for ins in group] for j in range(len(tpl.loads))]
    if k == 1:
        cols = [(s, i in shared) for i, s in enumerate(first.slots_in)]
        outs = [(s, tpl.stacked[t]) for t, s in enumerate(first.slots_out)]

        def one(values: list[Any]) -> None:
            try:
                res = run(1, [values[s] if flat else values[s][None] for s, flat in cols],
                          params)
            except (ValueError, IndexError) as e:
                raise _failed(first, e) from None
            for (s, stacked), out in zip(outs, res, strict=True):
                values[s] = out[0] if stacked else out

        return one
    # k >= 2: each column's slots gathered in one C call (a tuple)
    gets = [(itemgetter(*col), SHARED if i in shared else LISTED if i in listed else STACKED)
            for i, col in enumerate(zip(*[ins.slots_in for ins in group], strict=True))]
    results = [(col, tpl.stacked[t])
               for t, col in enumerate(zip(*[ins.slots_out for ins in group], strict=True))]

    def many(values: list[Any]) -> None:
        try:
            reads: list[Any] = []
            for get, how in gets:
                arrays = get(values)
                if how == STACKED:
                    reads.append(stack(arrays))
                elif how == LISTED:
                    reads.append(arrays)
                else:
                    x = arrays[0]
                    reads.append(x if all(a is x for a in arrays) else list(arrays))
            res = run(k, reads, params)
        except (ValueError, IndexError) as e:
            raise _failed(first, e) from None
        for (col, stacked), out in zip(results, res, strict=True):
            if stacked:
                for s, row in zip(col, out, strict=True):
                    values[s] = row
            else:
                for s in col:
                    values[s] = out

    return many


def _failed(ins: Instr, e: Exception) -> SimError:
    return SimError(f"core {ins.core} failed at {ins.where} {ins.name}: {e}")
