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

from collections.abc import Sequence
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


def execute(program: Program, order: Sequence[Instr]) -> None:
    """Compute every value of a run whose event loop performed `order`; fills the run's
    values (`Program.values`, by slot) and the shared buffers. Raises SimError naming the
    core and op that fails."""
    values = program.values
    for groups, moves, accesses in levels(program, order):
        try:
            for move in moves:  # a send is a view of the region it sends
                src, dst, sl, shape = move
                values[dst] = values[src][sl] if shape is None else values[src][sl].reshape(shape)
        except (ValueError, IndexError) as e:
            raise _failed(next(i for p in program.cores.values() for i in p if i.move is move),
                          e) from None
        for group in groups.values():
            _run_group(values, group)
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


def _run_group(values: list[Any], group: list[Instr]) -> None:
    """Run k instances of one template at once and hand each its slice of the results."""
    first = group[0]
    tpl = first.template
    assert tpl is not None
    k = len(group)
    try:
        reads: list[Any] = []
        if k == 1:
            for i, s in enumerate(first.slots_in):
                x = values[s]
                reads.append(x if i in tpl.shared else x[None])
        else:
            for i, col in enumerate(zip(*[ins.slots_in for ins in group], strict=True)):
                arrays = itemgetter(*col)(values)  # k >= 2: a tuple, gathered in C
                if i in tpl.shared:
                    x = arrays[0]
                    reads.append(x if all(a is x for a in arrays) else list(arrays))
                elif i in tpl.listed:
                    reads.append(arrays)
                else:
                    reads.append(stack(arrays))
        params = [[ins.params[j] for ins in group] for j in range(len(tpl.loads))]
        outs = tpl.run(k, reads, params)
    except (ValueError, IndexError) as e:
        raise _failed(first, e) from None
    if k == 1:
        for t, s in enumerate(first.slots_out):
            values[s] = outs[t][0] if tpl.stacked[t] else outs[t]
        return
    for t, col in enumerate(zip(*[ins.slots_out for ins in group], strict=True)):
        out = outs[t]
        if tpl.stacked[t]:
            for s, row in zip(col, out, strict=True):
                values[s] = row
        else:
            for s in col:
                values[s] = out


def _failed(ins: Instr, e: Exception) -> SimError:
    return SimError(f"core {ins.core} failed at {ins.where} {ins.name}: {e}")
