"""Layout planning bridge: plan graph → egglog facts → `rules/layout.egg` → derived tables.

The plan graph is IR-independent (`LayoutPlan`). Facts and tables follow `schema.LAYOUT`;
the rule file decides which alternatives exist, what they cost and what a materialization
costs. This module only encodes and decodes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from raptor.ir.ops import LAYOUTS
from raptor.rewrite.eggfile import RuleError, load_program

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


def _facts(plans: dict[int, LayoutPlan]
           ) -> tuple[dict[str, list[tuple[object, ...]]], dict[int, tuple[int, ...]],
                      dict[int, tuple[int, int]]]:
    """The plan graph as `schema.LAYOUT` facts, the operand value ids per plan and the
    external values (a `None` operand gets a value id above every plan id)."""
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
    rows: dict[str, list[tuple[object, ...]]] = {
        "PlanKind": [(p.id, p.kind) for p in plans.values()],
        "Operand": [(c, i, v) for c, vals in operand_values.items() for i, v in enumerate(vals)],
        "Gate": [(p.id, g) for p in plans.values() for g, ok in sorted(p.gates.items()) if ok],
        "External": [(v,) for v in externals],
        "FunctionResult": [(p.id,) for p in plans.values() if p.is_output],
    }
    return rows, operand_values, externals


def derive_layout_tables(plans: Sequence[LayoutPlan],
                         rules_dir: str | os.PathLike[str] | None = None) -> LayoutTables:
    """Run `rules/layout.egg` over the plan graph and decode the derived tables."""
    by_id = _validate(plans)
    program = load_program("layout", rules_dir)
    rows, operand_values, externals = _facts(by_id)
    program.load_facts(rows)
    program.run_schedule()

    alt_rows: dict[tuple[int, int], tuple[str, int]] = {}
    for p, a, result, cost in program.rows("Alt"):
        if alt_rows.get((p, a), (result, cost)) != (result, cost):
            raise RuleError(f"layout rules define plan {p} alternative {a} twice")
        alt_rows[p, a] = (str(result), cost)
    operand_layouts: dict[tuple[int, int, int], str] = {}
    for p, a, i, layout in program.rows("AltOperand"):
        if (p, a, i) in operand_layouts:
            raise RuleError(f"layout rules give plan {p} alternative {a} operand {i} two layouts")
        operand_layouts[p, a, i] = str(layout)

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

    fixed = {v: str(layout) for v, layout in program.rows("FixedLayout")}
    missing = sorted(set(externals) - set(fixed))
    if missing:
        raise RuleError(f"layout rules give external value {missing[0]} no FixedLayout")
    returns: dict[int, set[str]] = {}
    for v, layout in program.rows("ReturnLayout"):
        returns.setdefault(v, set()).add(str(layout))
    mat = {(v, str(src), str(dst)): cost for v, src, dst, cost in program.rows("MatCost")}
    named = {a.result for alts in alternatives.values() for a in alts} | set(
        operand_layouts.values()) | set(fixed.values()) | {x for ls in returns.values()
                                                            for x in ls} | {
        x for _, src, dst in mat for x in (src, dst)}
    unknown = sorted(named - set(LAYOUTS))
    if unknown:  # the layout pass would write IR the verifier rejects (LAYOUT-1)
        raise RuleError(f"{program.where}: error: the layout rules derive layout "
                        f"{unknown[0]!r}, which Raptor does not implement (known: "
                        f"{', '.join(LAYOUTS)})")
    return LayoutTables(by_id, {p: tuple(alts) for p, alts in alternatives.items()},
                        operand_values, externals, fixed,
                        {v: frozenset(ls) for v, ls in returns.items()}, mat,
                        dict(program.fired))
