"""SSA values, blocks, operations, locations and affine lane expressions.

Ops are small typed dataclasses declared with `opdef.op_def` (see `ops.py`); this module
holds what they share, including the field kinds an op declaration is written with.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from raptor.ir.types import TensorType, Type

if TYPE_CHECKING:
    from raptor.ir.opdef import OpDef
    from raptor.ir.printer import Printer


@dataclass(frozen=True, slots=True)
class Location:
    """Where an op came from: `file:line:col` (1-based)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Value:
    """An SSA value. `name` is a printing hint (kept from parsed text)."""

    __slots__ = ("name", "owner", "type")

    def __init__(self, type: Type, name: str | None = None) -> None:
        self.type = type
        self.name = name
        self.owner: Operation | Block | None = None

    def __repr__(self) -> str:
        return f"Value(%{self.name}: {self.type})"

    @property
    def tensor(self) -> TensorType:
        """The type of a value known to be a tensor (built or verified IR)."""
        t = self.type
        assert isinstance(t, TensorType)
        return t

    @property
    def shape(self) -> tuple[int, ...]:
        """The static shape of a value known to be a static tensor."""
        return self.tensor.static_shape


@dataclass(eq=False)
class Block:
    """A single-block region: arguments then an op list."""

    args: list[Value] = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)

    def __post_init__(self) -> None:
        for a in self.args:
            a.owner = self

    def walk(self) -> Iterator[Operation]:
        """Every op in this block and its nested regions, in pre-order (iterative: real
        programs nest shallowly but hold hundreds of thousands of ops)."""
        stack: list[Iterator[Operation]] = [iter(self.ops)]
        while stack:
            for op in stack[-1]:
                yield op
                regions = op.regions()
                if regions:
                    stack.extend(iter(r.ops) for r in reversed(regions))
                    break
            else:
                stack.pop()


Operand = Value
"""Field kinds of an op declaration (`opdef.op_def` reads them from the annotations): an
operand, a variadic operand list, a result, a variadic result list, a region whose entry
block prints its arguments (`^bb0(...)`), and a region that has none."""
Operands = list[Value]
Result = Value
Results = list[Value]
Region = Block
BareRegion = Block


class Work(NamedTuple):
    """What one execution of an op asks of the machine, independent of any target: `kind`
    is `mvm` (amount: crossbar MVMs), `vector` (elements through the vector unit, `times`
    passes), `copy` (bytes moved in local memory), `shared_read` or `shared_write` (bytes
    to or from shared memory). The solver's cost table turns it into ns."""

    kind: str
    amount: int
    times: int = 1


class Operation:
    """Base of every op, declared with `opdef.op_def`, which generates the generic view
    (`operands()`, `results()`, `regions()`) the verifier, printer and analyses use."""

    NAME: ClassVar[str] = ""
    FORMAT: ClassVar[str] = ""
    """The textual format after `results = name` (see `opdef`)."""
    DEF: ClassVar[OpDef]
    """The declaration as `op_def` read it."""
    SCOPES: ClassVar[bool] = True
    """Whether the values its region defines are invisible after it (the printer may reuse
    their names there; the parser forgets them)."""
    loc: Location | None = None

    def operands(self) -> list[Value]:
        return []

    def results(self) -> list[Value]:
        return []

    def regions(self) -> list[Block]:
        return []

    @property
    def name(self) -> str:
        """The printed op name (`pim.relu` for the unary family whose NAME is `pim.unary`)."""
        return self.NAME

    def verify(self) -> None:
        """Local structural checks; raise `VerifyError` naming the violated rule."""

    WORK: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(kind, field) pairs: `vector` over the field's elements, `copy`/`shared_*` of its
    bytes (none: a view, a constant or a terminator)."""

    def work(self) -> tuple[Work, ...]:
        """The op's cost, target-independent, from `WORK` unless the op says otherwise."""
        types = [(kind, getattr(self, name).type) for kind, name in self.WORK]
        return tuple(Work(kind, t.numel if kind == "vector" else t.nbytes) for kind, t in types)

    def print(self, p: Printer) -> None:  # pragma: no cover - op_def generates it
        raise NotImplementedError(self.NAME)

    def walk(self) -> Iterator[Operation]:
        yield self
        for region in self.regions():
            yield from region.walk()

    def own_results(self) -> None:
        for r in self.results():
            r.owner = self

    def where(self) -> str:
        return str(self.loc) if self.loc else f"<{self.name}>"


@dataclass(frozen=True, slots=True)
class Affine:
    """`const + sum(coef * var)`: offsets that may depend on the lane or a family variable."""

    const: int = 0
    terms: tuple[tuple[int, Value], ...] = ()

    @staticmethod
    def of(x: int | Value | Affine) -> Affine:
        if isinstance(x, Affine):
            return x
        if isinstance(x, Value):
            return Affine(0, ((1, x),))
        return Affine(int(x))

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, var: Value | None) -> int:
        return sum(c for c, v in self.terms if v is var)

    def evaluate(self, env: dict[Value, int]) -> int:
        return self.const + sum(c * env[v] for c, v in self.terms)

    def substitute(self, var: Value, value: int) -> Affine:
        kept = tuple((c, v) for c, v in self.terms if v is not var)
        return Affine(self.const + value * self.coef(var), kept)

    def vars(self) -> list[Value]:
        return [v for _, v in self.terms]

    def render(self, name_of: dict[Value, str]) -> str:
        """`%a+2*%b-3`: terms in order, then the constant (alone when there are no terms)."""
        parts = [("%" if c == 1 else f"{c}*%") + name_of[v] for c, v in self.terms]
        if not parts:
            return str(self.const)
        text = "".join(p if i == 0 or p[0] == "-" else "+" + p for i, p in enumerate(parts))
        return text + (f"{self.const:+d}" if self.const else "")


AffineLike = int | Value | Affine


def affines(xs: Sequence[AffineLike]) -> tuple[Affine, ...]:
    return tuple(Affine.of(x) for x in xs)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One verifier or parser finding, printed as `file:line:col: error: [RULE] message`."""

    loc: Location | None
    rule: str
    message: str

    def __str__(self) -> str:
        where = str(self.loc) if self.loc else "<unknown>"
        tag = f"[{self.rule}] " if self.rule else ""
        return f"{where}: error: {tag}{self.message}"


class VerifyError(Exception):
    """Raised by `Operation.verify`; the verifier collects these as diagnostics."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"[{rule}] {message}")
        self.rule = rule
        self.message = message


class IRError(Exception):
    """Invalid IR found outside the verifier (e.g. by the interpreter); carries diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("\n".join(str(d) for d in diagnostics))
        self.diagnostics = diagnostics
