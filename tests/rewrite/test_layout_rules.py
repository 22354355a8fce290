"""rules/layout.egg: the capability matrix of the spec, and that editing it changes behaviour."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from raptor.rewrite.eggfile import resolve_rules_dir
from raptor.rewrite.layout import GATES, LayoutPlan, RuleError, derive_layout_tables
from raptor.rewrite.select import SELECTORS, plan_layouts

from .plangraphs import ALL_GATES, chain

D, R, F = "DenseNCHW", "NHWCRowStrip", "Fragmented"

# kind, operand count → alternatives as (operand layouts, result layout, intrinsic cost),
# with every gate true. Written from the spec's compatibility matrix.
MATRIX: dict[str, tuple[int, set[tuple[tuple[str, ...], str, int]]]] = {
    "conv": (3, {((D, D, D), D, 0), ((D, D, D), R, -2), ((R, D, D), R, -2)}),
    "maxpool": (1, {((D,), D, 0), ((D,), R, -2), ((R,), R, -2)}),
    "global_avgpool": (1, {((D,), D, 0), ((D,), R, -2), ((R,), R, -2)}),
    "relu": (1, {((D,), D, 0), ((R,), R, -2)}),
    "silu": (1, {((D,), D, 0), ((R,), R, -3)}),
    "resize_nearest": (1, {((D,), D, 0), ((R,), R, -2)}),
    "bias_add": (2, {((D, D), D, 0), ((R, D), R, -2)}),
    "add": (2, {((D, D), D, 0), ((R, R), R, -2)}),
    "concat": (3, {((D, D, D), D, 0), ((R, R, R), R, -2)}),
    "flatten": (1, {((D,), D, 0), ((F,), D, 0), ((R,), D, 0)}),
    "gemm": (2, {((D, D), D, 0)}),
    "softmax": (1, {((D,), D, 0)}),
}

UNGATED = {"relu", "silu", "add", "concat"}


def _single(kind: str, arity: int, gates: dict[str, bool]) -> list[LayoutPlan]:
    return [LayoutPlan(0, kind, [None] * arity, gates, True)]


def _alternatives(plans: list[LayoutPlan], rules: Path | None = None) -> set[tuple]:
    tables = derive_layout_tables(plans, rules)
    return {(a.operands, a.result, a.cost) for a in tables.alternatives[0]}


@pytest.mark.parametrize("kind", sorted(MATRIX))
def test_capability_matrix(kind: str) -> None:
    arity, expected = MATRIX[kind]
    plans = _single(kind, arity, ALL_GATES)
    assert _alternatives(plans) == expected
    tables = derive_layout_tables(plans)
    assert tables.alternatives[0][0].index == 0
    assert tables.alternatives[0][0].result == D


@pytest.mark.parametrize("kind", sorted(MATRIX))
def test_gates_close_alternatives(kind: str) -> None:
    arity, expected = MATRIX[kind]
    closed = _alternatives(_single(kind, arity, dict.fromkeys(GATES, False)))
    if kind in UNGATED:
        assert closed == expected
    else:
        assert closed == {a for a in expected if a[1] == D and R not in a[0]}


def test_externals_dense_and_results_dense() -> None:
    tables = derive_layout_tables(chain(["conv", "relu"]))
    assert set(tables.fixed_layouts.values()) == {D}
    assert tables.return_layouts == {1: frozenset({D})}
    assert tables.materialize_cost[1, R, D] == 3
    assert (1, D, F) not in tables.materialize_cost
    assert tables.fired["relu-rowstrip"] == 1 and tables.fired["dense"] == 2


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(resolve_rules_dir(None), target)
    return target


def _edit(path: Path, pattern: str, new: str) -> None:
    text, n = re.subn(pattern, new, path.read_text(), count=1, flags=re.S)
    assert n == 1, pattern
    path.write_text(text)


RESIDUAL = [
    *chain(["conv", "relu", "maxpool", "conv", "relu", "conv"]),
    LayoutPlan(6, "add", [5, 2], {}, False),
    LayoutPlan(7, "relu", [6], {}, False),
    LayoutPlan(8, "global_avgpool", [7], ALL_GATES, False),
    LayoutPlan(9, "flatten", [8], ALL_GATES, False),
    LayoutPlan(10, "gemm", [9, None], {}, True),
]
RESIDUAL[5] = LayoutPlan(5, "conv", [4, None], ALL_GATES, False)


def test_residual_graph_uses_row_strips() -> None:
    result = plan_layouts(RESIDUAL)
    assert result.counts[R] >= 8
    assert result.choice[10].result == D


def test_raising_row_strip_cost_makes_everything_dense(rules_copy: Path) -> None:
    _edit(rules_copy / "layout.egg", r"\(set \(RowStripCost\) -2\)", "(set (RowStripCost) 1)")
    for selector in SELECTORS:
        result = plan_layouts(RESIDUAL, selector, rules_copy)
        assert result.counts[R] == 0 and result.counts["materializations"] == 0
        assert result.cost == 0


def test_removing_silu_rule_makes_silu_dense(rules_copy: Path) -> None:
    plans = chain(["conv", "silu", "conv", "silu", "conv"])
    shipped = plan_layouts(plans)
    assert [shipped.choice[p].result for p in (1, 3)] == [R, R]
    assert "silu-rowstrip" in shipped.fired
    silu_rule = r'\(rule \(\(PlanKind p "silu"\).*?:name "silu-rowstrip"\)'
    _edit(rules_copy / "layout.egg", silu_rule, "")
    edited = plan_layouts(plans, "exact", rules_copy)
    assert [edited.choice[p].result for p in (1, 3)] == [D, D]
    assert "silu-rowstrip" not in edited.fired
    assert edited.cost > shipped.cost


def test_materialize_cost_is_editable(rules_copy: Path) -> None:
    plans = chain(["conv", "gemm"])
    assert plan_layouts(plans).choice[0].result == D
    for pair in ("(DenseNCHW) (NHWCRowStrip)", "(NHWCRowStrip) (DenseNCHW)"):
        _edit(
            rules_copy / "layout.egg",
            re.escape(f"(set (MaterializeCost {pair}) 3)"),
            f"(set (MaterializeCost {pair}) 1)",
        )
    edited = plan_layouts(plans, "exact", rules_copy)
    assert edited.choice[0].result == R and edited.cost == -1


def test_missing_dense_rule_is_reported(rules_copy: Path) -> None:
    _edit(rules_copy / "layout.egg", r'\(rule \(\(PlanKind p k\).*?:name "dense"\)', "")
    with pytest.raises(RuleError, match=r"plan 1 \(gemm\) no alternative"):
        derive_layout_tables(chain(["conv", "gemm"]), rules_copy)
