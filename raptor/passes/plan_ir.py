"""The plan graph as IR: `spat.plan.<kind>` ops (after import) and, after layout planning,
their selected layouts with `spat.materialize_layout` where producer and consumer disagree.
This is the form `--print-ir-after import|layout` shows."""

from __future__ import annotations

from raptor.frontend.plan import PlanGraph
from raptor.ir.builder import new_func
from raptor.ir.core import Value
from raptor.ir.module import Module
from raptor.ir.ops import Attr, MaterializeLayoutOp, PlanOp
from raptor.ir.types import TensorType
from raptor.passes.layout import LayoutChoice
from raptor.passes.lower import sanitize


def _attr(v: object) -> Attr | None:
    if isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple) and all(isinstance(x, int) for x in v):
        return [int(x) for x in v]
    if isinstance(v, list | tuple) and all(isinstance(x, int | float) for x in v):
        return [float(x) for x in v]
    return None


def plan_module(graph: PlanGraph, layouts: LayoutChoice | None = None) -> Module:
    """Plan ops with their weights as `spat.weight`; layouts and materializations if given."""
    def t(name: str) -> TensorType:
        return TensorType(tuple(graph.values[name].shape))

    func, b = new_func("main", [(sanitize(v.name), t(v.name)) for v in graph.inputs],
                       [t(v.name) for v in graph.outputs])
    values: dict[str, Value] = dict(zip((v.name for v in graph.inputs), func.args, strict=True))
    layout_of = {v.name: "DenseNCHW" for v in graph.inputs}
    constants = {}

    def to(name: str, want: str) -> Value:
        """Value `name` in layout `want`, materialized when it has another."""
        v, have = values[name], layout_of.get(name, "DenseNCHW")
        if want == have:
            return v
        m = Value(v.type)
        b.add(MaterializeLayoutOp(v, m, have, want))
        return m

    for i, plan in enumerate(graph.plans):
        ins = [to(name, layouts.operand_of(i, k)) if layouts is not None and name in layout_of
               else values[name] for k, name in enumerate(plan.inputs)]
        for role, w in plan.weights.items():
            sym = sanitize(f"{plan.name}.{role}")
            constants[sym] = w
            ins.append(b.weight(sym, TensorType(tuple(int(d) for d in w.shape))))
        attrs = {k: a for k, v in plan.attrs.items() if (a := _attr(v)) is not None}
        if layouts is not None:
            attrs["layout"] = layouts.result_of(i)
        outs = [Value(t(o), sanitize(o)) for o in plan.outputs]
        b.add(PlanOp(plan.kind, ins, outs, attrs))
        for o, v in zip(plan.outputs, outs, strict=True):
            values[o] = v
            if layouts is not None:
                layout_of[o] = layouts.result_of(i)
    b.ret([to(out.name, "DenseNCHW") for out in graph.outputs])  # results are returned dense
    return Module([func], constants, filename=graph.name)
