"""The values of a simulated run, computed after its timing (values never depend on time).

An instruction's level is the first level at which all its operands exist (a value made at
level L exists from L + 1; a message's value from one level after its send); the accesses to
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
from typing import Any

from raptor.ir.core import Value
from raptor.sim.errors import SimError
from raptor.sim.kernels import Template, stack
from raptor.sim.program import COMPUTE, LOAD, SEND, Instr, Program, value_name


def levels(program: Program, order: Sequence[Instr]) -> list[list[Instr]]:
    """The recorded instructions by level (see the module docstring)."""
    values, buffers = program.slots
    ready = [0] * values  # per (core, value) slot, the level it exists from
    memory = [0] * buffers  # per buffer, the level of its latest access
    store_done: dict[int, int] = {}
    out: list[list[Instr]] = []
    get = ready.__getitem__
    for ins in order:
        kind = ins.kind
        ins_in, ins_out = ins.slots_in, ins.slots_out
        if kind == COMPUTE:
            level = max(map(get, ins_in)) if ins_in else 0
            for v in ins_out:
                ready[v] = level + 1
        elif kind == SEND:
            level = ready[ins_in[0]]
            ready[ins_out[0]] = level + 1
        else:
            buf = ins.buffer_slot
            if kind == LOAD:
                level = max([memory[buf], *[store_done[s] for s in ins.deps]])
                ready[ins_out[0]] = level + 1
            else:
                level = max(memory[buf], ready[ins_in[0]])
                store_done[ins.store_id] = level + 1
            memory[buf] = level
        if level >= len(out):
            out += [[] for _ in range(level + 1 - len(out))]
        out[level].append(ins)
    return out


def execute(program: Program, order: Sequence[Instr]) -> None:
    """Compute every value of a run whose event loop performed `order`; fills the cores'
    envs and the shared buffers. Raises SimError naming the core and op that fails."""
    envs = program.envs
    for level in levels(program, order):
        groups: dict[Template, list[Instr]] = {}
        for ins in level:
            if ins.kind == COMPUTE:
                assert ins.template is not None
                groups.setdefault(ins.template, []).append(ins)
        for group in groups.values():
            _run_group(envs, group)
        for ins in level:
            if ins.kind == COMPUTE:
                continue
            env = envs[ins.core]
            try:
                if ins.kind == SEND:
                    assert ins.value is not None and ins.partner is not None
                    assert ins.partner.value is not None
                    data = env[ins.value] if ins.payload is None else ins.payload(env)
                    envs[ins.peer][ins.partner.value] = data
                else:
                    assert ins.fn is not None
                    ins.fn(env)
            except (ValueError, IndexError) as e:
                raise _failed(ins, e) from None


def _run_group(envs: dict[int, dict[Value, Any]], group: list[Instr]) -> None:
    """Run k instances of one template at once and hand each its slice of the results."""
    first = group[0]
    tpl = first.template
    assert tpl is not None
    k = len(group)
    try:
        reads: list[Any] = []
        for i, v in enumerate(first.reads):
            if i in tpl.shared:
                arrays = [envs[ins.core][ins.reads[i]] for ins in group]
                same = all(a is arrays[0] for a in arrays)
                reads.append(arrays[0] if same else arrays)
            elif k == 1:
                reads.append(envs[first.core][v][None])
            else:
                reads.append(stack([envs[ins.core][ins.reads[i]] for ins in group]))
        params = [[ins.params[j] for ins in group] for j in range(len(tpl.loads))]
        outs = tpl.run(k, reads, params)
    except (ValueError, IndexError) as e:
        raise _failed(first, e) from None
    except KeyError as e:
        bad = next(ins for ins in group for v in ins.reads if v not in envs[ins.core])
        missing = next(v for v in bad.reads if v not in envs[bad.core])
        raise SimError(f"core {bad.core} failed at {bad.where} {bad.name}: "
                       f"{value_name(missing)} is used before it is defined") from e
    for j, ins in enumerate(group):
        env = envs[ins.core]
        for t, v in enumerate(ins.defines):
            env[v] = outs[t][j] if tpl.stacked[t] else outs[t]


def _failed(ins: Instr, e: Exception) -> SimError:
    return SimError(f"core {ins.core} failed at {ins.where} {ins.name}: {e}")
