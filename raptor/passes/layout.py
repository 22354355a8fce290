"""Layout planning pass: the plan graph → `rules/layout.egg` → an exact selection.

Python states the plan graph and each plan's interface predicates (can this lowering produce
row strips for this geometry?); the rules derive the legal alternatives and costs, and the
selector picks one per plan. Lowering then follows the selection: a DenseNCHW result is
reassembled into dense storage before its consumers read it, a NHWCRowStrip result is read by
its consumers as row fragments directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from raptor.frontend.plan import Plan, PlanGraph
from raptor.rewrite.layout import LayoutPlan
from raptor.rewrite.select import LayoutSelection, plan_layouts

SELECTORS = ("exact", "iterative", "disabled")


@dataclass
class LayoutChoice:
    """What lowering needs: each plan's result layout and each operand's required layout."""

    result: dict[int, str] = field(default_factory=dict)
    operand: dict[tuple[int, int], str] = field(default_factory=dict)

    def result_of(self, plan: int) -> str:
        return self.result.get(plan, "DenseNCHW")

    def operand_of(self, plan: int, index: int) -> str:
        return self.operand.get((plan, index), "DenseNCHW")


def _gates(plan: Plan, graph: PlanGraph) -> dict[str, bool]:
    """Interface predicates: what the row-band lowering can do for this plan's geometry."""
    out = graph.values[plan.outputs[0]].shape
    rows = len(out) == 4 and out[2] > 1
    gates = {
        "canLowerConvPlanToRowStrip": plan.kind == "conv" and rows,
        "canConsumeAndProduceRowStrip": plan.kind == "conv" and rows,
        "canLowerMaxPoolPlanToRowStrip": plan.kind == "maxpool" and rows,
        "canLowerGlobalAveragePoolPlanToRowStrip": plan.kind == "global_avgpool",
        "canLowerResizeNearestPlanToRowStrip": plan.kind == "resize_nearest" and rows,
        "canLowerFlattenFromRowStrip": plan.kind == "flatten",
        "isSupportedBiasAddValue": plan.kind == "bias_add",
    }
    return {k: v for k, v in gates.items() if v}


def layout_plans(graph: PlanGraph) -> list[LayoutPlan]:
    producer = {o: i for i, p in enumerate(graph.plans) for o in p.outputs}
    outputs = {v.name for v in graph.outputs}
    return [LayoutPlan(i, p.kind, [producer.get(n) for n in p.inputs], _gates(p, graph),
                       any(o in outputs for o in p.outputs))
            for i, p in enumerate(graph.plans)]


def select_layouts(graph: PlanGraph, selector: str = "exact",
                   rules_dir: str | os.PathLike[str] | None = None
                   ) -> tuple[LayoutSelection, LayoutChoice]:
    sel = plan_layouts(layout_plans(graph), selector, rules_dir)
    return sel, LayoutChoice({pid: alt.result for pid, alt in sel.choice.items()},
                             {(pid, i): lay for pid, alt in sel.choice.items()
                              for i, lay in enumerate(alt.operands)})
