"""The egglog bridge's schema: every relation Python writes as facts or reads back, declared
once with its column names and egglog sorts.

The rule files declare the same relations (`(relation Batch (i64 i64))`); loading a rule
program checks that they agree (`eggfile.check_schema`), the fact loader writes rows in
this column order and the reader decodes rows by these sorts, so a renamed relation or a
dropped column is one clear error at load time rather than a KeyError after saturation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Relation:
    """A relation (or, with `output`, a function whose value is its last column)."""

    name: str
    columns: tuple[str, ...]
    sorts: tuple[str, ...]
    output: str | None = None

    @property
    def arity(self) -> int:
        return len(self.columns)

    def spelling(self) -> str:
        """How the rule file declares it."""
        if self.output is None:
            return f"(relation {self.name} ({' '.join(self.sorts)}))"
        return f"(function {self.name} ({' '.join(self.sorts[:-1])}) {self.output} ...)"


def relation(name: str, spec: str) -> Relation:
    """`relation("PubDim", "b r d c k size stride")`; a column is `name` (i64) or
    `name:Sort`."""
    cols = [c.partition(":") for c in spec.split()]
    return Relation(name, tuple(n for n, _, _ in cols), tuple(s or "i64" for _, _, s in cols))


def function(name: str, spec: str, output: str) -> Relation:
    """A function of the inputs in `spec` whose value (sort `output`) is the last column."""
    r = relation(name, spec)
    return Relation(name, (*r.columns, "value"), (*r.sorts, output), output)


@dataclass(frozen=True)
class Schema:
    """One rule program's interface: the facts Python states, the tables it reads."""

    program: str
    facts: tuple[Relation, ...]
    reads: tuple[Relation, ...]


LAYOUT = Schema(
    "layout",
    facts=(
        relation("PlanKind", "plan kind:String"),
        relation("Operand", "plan index value"),
        relation("Gate", "plan gate:String"),
        relation("External", "value"),
        relation("FunctionResult", "plan"),
    ),
    reads=(
        relation("Alt", "plan alt result:Layout cost"),
        relation("AltOperand", "plan alt index layout:Layout"),
        relation("FixedLayout", "value layout:Layout"),
        relation("ReturnLayout", "value layout:Layout"),
        function("MatCost", "value from:Layout to:Layout", "i64"),
    ),
)
"""`rules/layout.egg`: the plan graph in, the capability matrix and costs out."""

CANONICALIZE = Schema(
    "canonicalize",
    facts=(
        relation("Batch", "batch lanes"),
        relation("PubDim", "batch result dim const coef size stride"),
        relation("FragDim", "batch result dim extent"),
        relation("BatchValue", "value batch result"),
        relation("Concat", "value dim"),
        relation("ConcatIn", "value position input"),
        relation("ConcatAt", "value position start"),
        relation("Opaque", "value"),
        relation("Materialize", "value source from to"),
        relation("Slice", "value source rank"),
        relation("SliceDim", "value dim start size"),
    ),
    reads=(
        relation("PhysDim", "batch result dim extent"),
        relation("Entry", "value entry:EntryId batch result dim const coef size stride"),
        relation("EntrySlots", "value entry:EntryId lo hi"),
        relation("Blocked", "value"),
        relation("Identity", "value source"),
    ),
)
"""`rules/canonicalize.egg`: publication geometry and placement values in, the physical
shapes, Blueprint entries and identities out."""

SCHEMAS = {s.program: s for s in (LAYOUT, CANONICALIZE)}
