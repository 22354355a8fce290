"""Plan graphs for the layout tests: fixed shapes and a hypothesis strategy."""

from __future__ import annotations

from hypothesis import strategies as st

from raptor.rewrite.layout import GATES, LayoutPlan

ALL_GATES = dict.fromkeys(GATES, True)

KINDS = (
    "conv",
    "relu",
    "silu",
    "maxpool",
    "global_avgpool",
    "resize_nearest",
    "bias_add",
    "add",
    "concat",
    "flatten",
    "gemm",
    "softmax",
)
"""Kinds the generator draws; gemm and softmax only have the dense alternative."""


def chain(kinds: list[str], gates: dict[str, bool] | None = None) -> list[LayoutPlan]:
    """A chain of single-input plans (conv/bias_add/gemm also take a weight); last is output."""
    plans = []
    for i, kind in enumerate(kinds):
        data = None if i == 0 else i - 1
        operands = [data, None] if kind in ("conv", "bias_add", "gemm") else [data]
        plans.append(LayoutPlan(i, kind, operands, dict(gates or ALL_GATES), i == len(kinds) - 1))
    return plans


@st.composite
def plan_graphs(draw: st.DrawFn, max_plans: int = 12) -> list[LayoutPlan]:
    """Random plan DAGs: chains, residual adds, values with several consumers, outputs."""
    n = draw(st.integers(1, max_plans))
    plans: list[LayoutPlan] = []
    consumed: set[int] = set()
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))

        def value(i: int = i) -> int | None:
            if i == 0 or draw(st.integers(0, 5)) == 0:
                return None
            return draw(st.integers(max(0, i - 4), i - 1))

        if kind in ("conv", "bias_add", "gemm"):
            operands = [value(), None]
        elif kind == "add":
            operands = [value(), value()]
        elif kind == "concat":
            operands = [value() for _ in range(draw(st.integers(1, 3)))]
        else:
            operands = [value()]
        gates = {g: draw(st.booleans()) for g in GATES}
        consumed.update(v for v in operands if v is not None)
        plans.append(LayoutPlan(i, kind, operands, gates, draw(st.booleans())))
    return [
        LayoutPlan(p.id, p.kind, p.operands, p.gates, p.is_output or p.id not in consumed)
        for p in plans
    ]
