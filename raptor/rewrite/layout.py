"""Layout planning bridge: plan graph → egglog facts → `rules/layout.egg` → derived tables.

The plan graph is IR-independent (`LayoutPlan`). Facts are bulk-loaded with egglog's
`(input relation "file.tsv")`; the rule file decides which alternatives exist, what they
cost and what a materialization costs. This module only encodes and decodes.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from egglog import bindings

from raptor.rewrite.eggfile import RuleError, RuleProgram, load_program

DENSE = "DenseNCHW"
ROW_STRIP = "NHWCRowStrip"

GATES = (
    "canLowerConvPlanToRowStrip",
    "canConsumeAndProduceRowStrip",
    "canLowerMaxPoolPlanToRowStrip",
    "canLowerGlobalAveragePoolPlanToRowStrip",
    "canLowerResizeNearestPlanToRowStrip",
    "canLowerFlattenFromRowStrip",
    "isSupportedBiasAddValue",
)
"""The interface predicates of the layout spec that `rules/layout.egg` reads as `Gate` facts."""

_WORD = re.compile(r"[A-Za-z0-9_.\-]+")


class LayoutError(Exception):
    """The plan graph is malformed or no legal layout assignment exists."""


@dataclass(frozen=True)
class LayoutPlan:
    """One plan op: its kind, operand producers (None: argument/weight) and gates."""

    id: int
    kind: str
    operands: Sequence[int | None]
    gates: dict[str, bool] = field(default_factory=dict)
    is_output: bool = False


@dataclass(frozen=True)
class Alternative:
    """One advertised alternative: a layout per operand, a result layout, an intrinsic cost."""

    index: int
    operands: tuple[str, ...]
    result: str
    cost: int


@dataclass
class LayoutTables:
    """What the rules derived for a plan graph.

    Values are identified by ids: a plan's result has the plan's id; each `None` operand gets
    its own external value id (above every plan id), recorded in `externals`.
    """

    plans: dict[int, LayoutPlan]
    alternatives: dict[int, tuple[Alternative, ...]]
    operand_values: dict[int, tuple[int, ...]]
    externals: dict[int, tuple[int, int]]
    fixed_layouts: dict[int, str]
    return_layouts: dict[int, frozenset[str]]
    materialize_cost: dict[tuple[int, str, str], int]
    fired: dict[str, int]
    seconds: float

    def consumers(self) -> dict[int, list[tuple[int, int]]]:
        """Value id → (consumer plan, operand index) pairs, in plan order."""
        uses: dict[int, list[tuple[int, int]]] = {v: [] for v in self.plans}
        for v in self.externals:
            uses[v] = []
        for c, values in self.operand_values.items():
            for i, v in enumerate(values):
                uses[v].append((c, i))
        return uses


def _validate(plans: Sequence[LayoutPlan]) -> dict[int, LayoutPlan]:
    by_id: dict[int, LayoutPlan] = {}
    for plan in plans:
        if plan.id in by_id:
            raise LayoutError(f"duplicate plan id {plan.id}")
        if not _WORD.fullmatch(plan.kind):
            raise LayoutError(f"plan {plan.id}: invalid kind {plan.kind!r}")
        for gate in plan.gates:
            if not _WORD.fullmatch(gate):
                raise LayoutError(f"plan {plan.id}: invalid gate name {gate!r}")
        by_id[plan.id] = plan
    for plan in plans:
        for i, producer in enumerate(plan.operands):
            if producer is not None and producer not in by_id:
                raise LayoutError(f"plan {plan.id} operand {i}: unknown producer {producer}")
    return by_id


def _write_tsv(path: Path, rows: Iterable[tuple[object, ...]]) -> None:
    path.write_text("".join("\t".join(map(str, row)) + "\n" for row in rows), encoding="utf-8")


def _load_facts(
    program: RuleProgram, plans: dict[int, LayoutPlan]
) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, int]]]:
    """Bulk-load the plan graph; return operand value ids and external values."""
    next_id = max(plans, default=-1) + 1
    operand_values: dict[int, tuple[int, ...]] = {}
    externals: dict[int, tuple[int, int]] = {}
    for plan in plans.values():
        values: list[int] = []
        for i, producer in enumerate(plan.operands):
            if producer is None:
                externals[next_id] = (plan.id, i)
                producer, next_id = next_id, next_id + 1
            values.append(producer)
        operand_values[plan.id] = tuple(values)
    tables: dict[str, list[tuple[object, ...]]] = {
        "PlanKind": [(p.id, p.kind) for p in plans.values()],
        "Operand": [(c, i, v) for c, vals in operand_values.items() for i, v in enumerate(vals)],
        "Gate": [(p.id, g) for p in plans.values() for g, ok in sorted(p.gates.items()) if ok],
        "External": [(v,) for v in externals],
        "FunctionResult": [(p.id,) for p in plans.values() if p.is_output],
    }
    with tempfile.TemporaryDirectory(prefix="raptor-layout-") as tmp:
        commands = []
        for name, rows in tables.items():
            path = Path(tmp) / f"{name}.tsv"
            _write_tsv(path, rows)
            commands.append(f'(input {name} "{path.as_posix()}")')
        program.run("\n".join(commands), "<layout facts>")
    return operand_values, externals


class _Decoder:
    """Reads rows of a frozen e-graph as Python values."""

    def __init__(self, egraph: bindings.EGraph) -> None:
        self.egraph = egraph
        self.frozen = egraph.freeze().functions
        self.layouts = {
            fn.rows[0].output: name
            for name, fn in self.frozen.items()
            if fn.output_sort == "Layout" and not fn.input_sorts and fn.rows
        }

    def rows(self, table: str, sorts: str) -> list[tuple[int | str, ...]]:
        """Rows of `table` (inputs, then output), decoded per letter: `i` i64, `L` Layout."""
        out: list[tuple[int | str, ...]] = []
        for row in self.frozen[table].rows:
            cells = [*row.inputs, row.output]
            decoded: list[int | str] = []
            for sort, cell in zip(sorts, cells, strict=False):
                value = self.egraph.value_to_i64(cell) if sort == "i" else self.layouts[cell]
                decoded.append(value)
            out.append(tuple(decoded))
        return out


def derive_layout_tables(
    plans: Sequence[LayoutPlan], rules_dir: str | os.PathLike[str] | None = None
) -> LayoutTables:
    """Run `rules/layout.egg` over the plan graph and decode the derived tables."""
    by_id = _validate(plans)
    start = time.perf_counter()
    program = load_program("layout", rules_dir)
    operand_values, externals = _load_facts(program, by_id)
    program.run_schedule()
    decoder = _Decoder(program.egraph)

    alt_rows: dict[tuple[int, int], tuple[str, int]] = {}
    for p, a, result, cost in decoder.rows("Alt", "iiLi"):
        alt = (int(p), int(a))
        if alt in alt_rows and alt_rows[alt] != (result, cost):
            raise RuleError(f"layout rules define plan {p} alternative {a} twice")
        alt_rows[alt] = (str(result), int(cost))
    operand_layouts: dict[tuple[int, int, int], str] = {}
    for p, a, i, layout in decoder.rows("AltOperand", "iiiL"):
        slot = (int(p), int(a), int(i))
        if slot in operand_layouts:
            raise RuleError(f"layout rules give plan {p} alternative {a} operand {i} two layouts")
        operand_layouts[slot] = str(layout)

    alternatives: dict[int, list[Alternative]] = {p: [] for p in by_id}
    for (p, a), (result, cost) in sorted(alt_rows.items()):
        layouts = []
        for i in range(len(operand_values[p])):
            if (p, a, i) not in operand_layouts:
                raise RuleError(f"layout rules give plan {p} alternative {a} no operand {i} layout")
            layouts.append(operand_layouts[p, a, i])
        alternatives[p].append(Alternative(a, tuple(layouts), result, cost))
    for p, alts in alternatives.items():
        if not alts:
            raise RuleError(f"layout rules give plan {p} ({by_id[p].kind}) no alternative")

    fixed = {int(v): str(layout) for v, layout in decoder.rows("FixedLayout", "iL")}
    missing = sorted(set(externals) - set(fixed))
    if missing:
        raise RuleError(f"layout rules give external value {missing[0]} no FixedLayout")
    returns: dict[int, set[str]] = {}
    for v, layout in decoder.rows("ReturnLayout", "iL"):
        returns.setdefault(int(v), set()).add(str(layout))
    mat = {
        (int(v), str(src), str(dst)): int(cost)
        for v, src, dst, cost in decoder.rows("MatCost", "iLLi")
    }
    return LayoutTables(
        plans=by_id,
        alternatives={p: tuple(alts) for p, alts in alternatives.items()},
        operand_values=operand_values,
        externals=externals,
        fixed_layouts=fixed,
        return_layouts={v: frozenset(ls) for v, ls in returns.items()},
        materialize_cost=mat,
        fired=dict(program.fired),
        seconds=time.perf_counter() - start,
    )
