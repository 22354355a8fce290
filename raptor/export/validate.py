"""Checks of an exported program that pimsim-nn does not make itself.

pimsim-nn accepts a send and a receive of different sizes, a send to a core without
instructions (it crashes), a group outside a core's array-group map only at load, any
address (its `memory_size` is never checked), a core whose last instruction is scalar
(it never finishes) and a deadlock (it only times out). This module reads the instruction
lists the way pimsim-nn executes them — registers set by `sldi`, send/receive pairs matched
in program order per (sender, receiver), every transfer blocking, `sync` and `wait` counting
on event registers — and lists what is wrong.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from raptor.export.chip import GLOBAL_MEMORY
from raptor.export.pimsim import EVENT_REGISTERS, SCALAR_OPS, VECTOR_OPERANDS, Export

REGISTERS = 32
SIZED = {"lmv": ("rs1", "rd"), "lldi": ("rd",), "recv": ("rd",), "send": ("rd",), "ld": ("rd",),
         "st": ("rs1",)}
"""The register fields of the local-memory ranges of `size` bytes an instruction touches."""


def _ranges(ins: dict[str, Any], regs: list[int], act: int, groups: int
            ) -> tuple[list[tuple[int, int]], list[str]]:
    """Local-memory byte ranges the instruction touches, and its other problems."""
    op = ins["op"]
    problems: list[str] = []

    def r(field: str) -> int:
        return regs[ins[field]]

    if op == "mvmul":
        if not 0 <= ins["group"] < groups:
            problems.append(f"array group {ins['group']} outside the core's {groups} groups")
        return [(r("rs1"), r("rs1") + 1), (r("rd"), r("rd") + 1)], problems
    if op in VECTOR_OPERANDS:
        n = ins["len"] * act
        if op in ("vmv", "vavg"):  # rs2 is a stride
            return [(r("rs1"), r("rs1") + n),
                    (r("rd"), r("rd") + (act if op == "vavg" else n))], problems
        return [(r(f), r(f) + n) for f in ("rs1", "rd", "rs2")[:1 + VECTOR_OPERANDS[op]]], problems
    if op == "send" and ins["rd"] != ins["rs1"]:
        problems.append("send must name its buffer in both rd and rs1 (pimsim-nn reads "
                        "at rd and checks hazards at rs1)")
    size = ins.get("size", 0)
    return [(r(f), r(f) + size) for f in SIZED.get(op, ())], problems


def validate(export: Export) -> list[str]:
    """Every problem found, one line each (empty: pimsim-nn can run it as intended)."""
    t = export.chip.target
    act = export.chip.act
    local = export.chip.local_bytes
    problems: list[str] = []
    comm: dict[int, list[tuple[str, int, int, int]]] = {}
    active = {c for c, p in export.cores.items() if p.instructions}
    for core, prog in sorted(export.cores.items()):
        ins_list = prog.instructions
        if not ins_list:
            continue
        where = f"core {core}"
        if ins_list[0]["op"] != "setbw":
            problems.append(f"{where}: the program must start with setbw")
        last = ins_list[-1]["op"]
        if last in SCALAR_OPS or last in ("setbw", "nop"):
            problems.append(f"{where}: last instruction {last} is scalar; the core would "
                            "never finish")
        if sum(prog.groups) > t.crossbars_per_core:
            problems.append(f"{where}: array groups hold {sum(prog.groups)} crossbars, the "
                            f"core has {t.crossbars_per_core}")
        regs = [0] * REGISTERS
        mine: list[tuple[str, int, int, int]] = []
        for pc, ins in enumerate(ins_list):
            at = f"{where} pc {pc} ({ins['op']})"
            bad = [k for k in ("rd", "rs1", "rs2") if k in ins and not 0 <= ins[k] < REGISTERS]
            if bad:
                problems.append(f"{at}: register field {bad[0]} = {ins[bad[0]]} outside "
                                f"0..{REGISTERS - 1}")
                continue
            if ins["op"] == "sldi":
                if not -(2 ** 31) <= ins["imm"] < 2 ** 31:
                    problems.append(f"{at}: immediate {ins['imm']} does not fit 32 bits")
                regs[ins["rd"]] = ins["imm"]
                continue
            glob = None
            if ins["op"] in ("ld", "st"):
                pair = ins["rs1"] if ins["op"] == "ld" else ins["rd"]
                if pair % 2 or pair + 1 >= REGISTERS:
                    problems.append(f"{at}: the global address needs an even register pair")
                    continue
                glob = (regs[pair] << 32) | (regs[pair + 1] & 0xFFFFFFFF)
            ranges, more = _ranges(ins, regs, act, len(prog.groups))
            problems.extend(f"{at}: {m}" for m in more)
            for lo, hi in ranges:
                if lo < 0 or hi > local:
                    problems.append(f"{at}: local bytes [{lo}, {hi}) outside the "
                                    f"{local}-byte local memory")
            if glob is not None and (glob < 0 or glob + ins["size"] > t.shared_memory_bytes):
                problems.append(f"{at}: global bytes [{glob}, {glob + ins['size']}) outside "
                                f"the {t.shared_memory_bytes}-byte global memory")
            if ins["op"] in ("send", "recv"):
                peer = ins["core"]
                if peer in (core, GLOBAL_MEMORY) or not 0 <= peer < t.num_cores:
                    problems.append(f"{at}: partner core {peer} is not another core of the "
                                    f"{t.num_cores}")
                elif peer not in active:
                    problems.append(f"{at}: partner core {peer} has no instructions "
                                    "(pimsim-nn crashes on such a send)")
                mine.append((ins["op"], peer, ins["size"], pc))
            if ins["op"] in ("sync", "wait"):
                reg = ins["event_register"]
                if not 0 <= reg < EVENT_REGISTERS:
                    problems.append(f"{at}: event register {reg} outside 0..{EVENT_REGISTERS - 1}")
                    continue
                if ins["op"] == "sync":
                    peer = ins["core"]
                    if peer == core or peer not in active:
                        problems.append(f"{at}: sync to core {peer}, which is not another "
                                        "core with instructions")
                        continue
                    mine.append(("sync", peer, reg, pc))
                else:
                    if ins["wait_value"] < 1:
                        problems.append(f"{at}: wait for {ins['wait_value']} (at least 1)")
                    mine.append(("wait", reg, ins["wait_value"], pc))
        comm[core] = mine
    problems.extend(_pairs(comm))
    return problems


def _pairs(comm: dict[int, list[tuple[str, int, int, int]]]) -> list[str]:
    """Match sends and receives as pimsim-nn does (both block; per (sender, receiver) in
    program order): sizes must agree, and every transfer must complete. A `sync` adds one
    to an event register of its target core at once; a `wait` blocks until its register
    holds its value, then subtracts it."""
    heads = dict.fromkeys(comm, 0)
    events: dict[tuple[int, int], int] = {}
    queue = deque(comm)
    problems: list[str] = []
    while queue:
        c = queue.popleft()
        i = heads[c]
        if i >= len(comm[c]):
            continue
        kind, peer, size, pc = comm[c][i]
        if kind == "sync":
            events[(peer, size)] = events.get((peer, size), 0) + 1
            heads[c] += 1
            queue.extend((c, peer))
            continue
        if kind == "wait":
            if events.get((c, peer), 0) >= size:
                events[(c, peer)] -= size
                heads[c] += 1
                queue.append(c)
            continue
        if peer not in comm:
            continue
        j = heads[peer]
        if j >= len(comm[peer]):
            continue
        pkind, ppeer, psize, ppc = comm[peer][j]
        if ppeer != c or {kind, pkind} != {"send", "recv"}:
            continue
        if size != psize:
            mine, theirs = (c, size, pc), (peer, psize, ppc)
            (s, sn, spc), (r, rn, rpc) = (mine, theirs) if kind == "send" else (theirs, mine)
            problems.append(f"core {s} sends {sn} bytes to core {r} (pc {spc}) but core {r} "
                            f"receives {rn} bytes (pc {rpc})")
        heads[c] += 1
        heads[peer] += 1
        queue.extend((c, peer))
    stuck = [c for c in comm if heads[c] < len(comm[c])]
    if stuck:
        lines = []
        for c in stuck[:8]:
            kind, peer, size, pc = comm[c][heads[c]]
            lines.append(f"core {c} pc {pc} wait for {size} on event register {peer}"
                         if kind == "wait" else f"core {c} pc {pc} {kind} "
                         f"{'to' if kind == 'send' else 'from'} core {peer}")
        problems.append(f"deadlock: {len(stuck)} cores wait forever ({'; '.join(lines)})")
    return problems

