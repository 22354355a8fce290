"""A module: the functions of one program plus the constant data weights refer to."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from raptor.ir.core import Operation
from raptor.ir.ops import FuncOp
from raptor.ir.printer import print_ir


@dataclass(eq=False)
class Module:
    funcs: list[FuncOp]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    filename: str = "<memory>"

    def main(self) -> FuncOp:
        """`@main` if present, else the first function."""
        return next((f for f in self.funcs if f.sym_name == "main"), self.funcs[0])

    def walk(self) -> Iterator[Operation]:
        for f in self.funcs:
            yield from f.walk()

    def print(self) -> str:
        return print_ir(self.funcs)
