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
    """A relation, or with `output` a function whose value is the last column; `spec` is
    `name` (i64) or `name:Sort` per column."""

    name: str
    spec: str
    output: str | None = None

    @property
    def columns(self) -> list[str]:
        return [c.partition(":")[0] for c in self.spec.split()]

    @property
    def sorts(self) -> list[str]:
        return [c.partition(":")[2] or "i64" for c in self.spec.split()]

    def spelling(self) -> str:
        """How the rule file declares it."""
        if self.output is None:
            return f"(relation {self.name} ({' '.join(self.sorts)}))"
        return f"(function {self.name} ({' '.join(self.sorts[:-1])}) {self.output} ...)"


@dataclass(frozen=True)
class Schema:
    """One rule program's interface: the facts Python states, the tables it reads."""

    program: str
    facts: tuple[Relation, ...]
    reads: tuple[Relation, ...]


LAYOUT = Schema("layout", facts=(
    Relation("PlanKind", "plan kind:String"),
    Relation("Operand", "plan index value"),
    Relation("Gate", "plan gate:String"),
    Relation("External", "value"),
    Relation("FunctionResult", "plan"),
), reads=(
    Relation("Alt", "plan alt result:Layout cost"),
    Relation("AltOperand", "plan alt index layout:Layout"),
    Relation("FixedLayout", "value layout:Layout"),
    Relation("ReturnLayout", "value layout:Layout"),
    Relation("MatCost", "value from:Layout to:Layout cost", output="i64"),
))
"""`rules/layout.egg`: the plan graph in, the capability matrix and costs out."""

CANONICALIZE = Schema("canonicalize", facts=(
    Relation("Batch", "batch lanes"),
    Relation("PubDim", "batch result dim const coef size stride"),
    Relation("FragDim", "batch result dim extent"),
    Relation("BatchValue", "value batch result"),
    Relation("Concat", "value dim"),
    Relation("ConcatIn", "value position input"),
    Relation("ConcatAt", "value position start"),
    Relation("Opaque", "value"),
    Relation("Materialize", "value source from to"),
    Relation("Slice", "value source rank"),
    Relation("SliceDim", "value dim start size"),
), reads=(
    Relation("PhysDim", "batch result dim extent"),
    Relation("Entry", "value entry:EntryId batch result dim const coef size stride"),
    Relation("EntrySlots", "value entry:EntryId lo hi"),
    Relation("Blocked", "value"),
    Relation("Identity", "value source"),
))
"""`rules/canonicalize.egg`: publication geometry and placement values in, the physical
shapes, Blueprint entries and identities out."""

SCHEMAS = {s.program: s for s in (LAYOUT, CANONICALIZE)}
