"""Generic IR surgery used by passes: replace uses, count uses, drop dead pure ops."""

from __future__ import annotations

import dataclasses
from collections import Counter

from raptor.ir.core import Block, Operation, Value
from raptor.ir.ops import BlueprintOp, MaterializeLayoutOp, WeightOp


def replace_uses(root: Block, old: Value, new: Value) -> None:
    """Point every operand field that holds `old` at `new` (lists included)."""
    for op in root.walk():
        for f in dataclasses.fields(op):  # type: ignore[arg-type]
            cur = getattr(op, f.name)
            if cur is old:
                setattr(op, f.name, new)
            elif isinstance(cur, list) and any(x is old for x in cur):
                setattr(op, f.name, [new if x is old else x for x in cur])


PURE = (BlueprintOp, WeightOp, MaterializeLayoutOp)


def drop_dead(root: Block) -> int:
    """Remove pure ops whose results are unused (repeat until stable); returns how many."""
    removed = 0
    while True:
        uses = Counter(v for op in root.walk() for v in op.operands())
        dead: list[Operation] = [op for op in root.ops if isinstance(op, PURE)
                                 and not any(uses[r] for r in op.results())]
        if not dead:
            return removed
        gone = set(map(id, dead))
        root.ops = [op for op in root.ops if id(op) not in gone]
        removed += len(dead)
