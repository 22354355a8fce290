"""Textual form of the Spatial IR. `parse(print(m)) == m` and print∘parse is identity."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from raptor.ir.core import Affine, Block, Operation, Value
from raptor.ir.types import IndexType, Type


def fmt_attr(value: object) -> str:
    """Attribute values: ints, floats, strings, bools and lists of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".ein") else text + ".0"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt_attr(v) for v in value) + "]"
    raise TypeError(f"unsupported attribute value {value!r}")


def _entry_scoped(v: Value) -> bool:
    """A Blueprint family variable (`slot %s in 0..N`): an owner-less `index` value whose
    scope is its one entry line, so sibling entries and later ops may reuse its name."""
    return v.owner is None and isinstance(v.type, IndexType)


class Printer:
    """Accumulates lines; assigns each value a unique name within its function."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.added: list[str] = []  # `used` in order of use: a region drops its own on exit
        self.counter = 0

    # ---- names -----------------------------------------------------------
    def name(self, v: Value) -> str:
        got = self.names.get(v)
        if got is not None:
            return got
        hint = v.name
        while hint is None or hint in self.used:
            hint = f"{v.name}_{self.counter}" if v.name else str(self.counter)
            self.counter += 1
        self.names[v] = hint
        if not _entry_scoped(v):  # `hint` is not in `used` here
            self.used.add(hint)
            self.added.append(hint)
        return hint

    def v(self, value: Value) -> str:
        got = self.names.get(value)  # named already: most uses (hot, no second call)
        return "%" + (self.name(value) if got is None else got)

    def vs(self, values: Iterable[Value]) -> str:
        return ", ".join([self.v(x) for x in values])

    def affs(self, xs: Sequence[Affine]) -> str:
        out = []
        for a in xs:
            if a.terms:
                for _, var in a.terms:
                    self.name(var)
                out.append(a.render(self.names))
            else:  # `render` of a constant, without the call
                out.append(str(a.const))
        return "[" + ", ".join(out) + "]"

    @staticmethod
    def ints(xs: Sequence[int]) -> str:
        return "[" + ", ".join(map(str, xs)) + "]"

    @staticmethod
    def types(ts: Sequence[Type]) -> str:
        return ", ".join(str(t) for t in ts)

    @staticmethod
    def result_types(ts: Sequence[Type]) -> str:
        return str(ts[0]) if len(ts) == 1 else "(" + ", ".join(str(t) for t in ts) + ")"

    # ---- layout ----------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def region(self, header: str, block: Block, show_args: bool, scoped: bool = True) -> None:
        """`header {`, optional `^bb0(...)` line, nested ops, `}`; the names it defines are
        free again after it when `scoped` (`Operation.SCOPES`)."""
        self.line(header + " {")
        mark = len(self.added)  # names are scoped: sibling regions may reuse them
        if show_args:
            args = ", ".join(f"{self.v(a)}: {a.type}" for a in block.args)
            self.line(f"^bb0({args}):")
        self.depth += 1
        for op in block.ops:
            op.print(self)
        self.depth -= 1
        if scoped:
            self.used.difference_update(self.added[mark:])  # not a copy per region: quadratic
            del self.added[mark:]
        self.line("}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def print_ir(ops: Sequence[Operation]) -> str:
    """Print top-level ops (functions); one printer so names stay unique."""
    chunks = []
    for op in ops:
        p = Printer()
        op.print(p)
        chunks.append(p.text())
    return "\n".join(chunks)
