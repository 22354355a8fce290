"""Layout selectors: exact = exhaustive brute force ≤ iterative, disabled; results dense."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from raptor.rewrite.eggfile import resolve_rules_dir
from raptor.rewrite.layout import LayoutError, LayoutPlan, LayoutTables, derive_layout_tables
from raptor.rewrite.select import (
    _LocalSearch,
    evaluate,
    plan_layouts,
    select_disabled,
    select_exact,
    select_iterative,
)

from .plangraphs import ALL_GATES, chain, plan_graphs

D, R = "DenseNCHW", "NHWCRowStrip"


def brute_force(tables: LayoutTables) -> int | None:
    """Minimal cost over every assignment, vectorised over the assignments with numpy."""
    plans = list(tables.alternatives)
    pos = {p: k for k, p in enumerate(plans)}
    every = [a for alts in tables.alternatives.values() for a in alts]
    layouts = sorted(
        {a.result for a in every}
        | {op for a in every for op in a.operands}
        | set(tables.fixed_layouts.values())
    )
    code = {name: k for k, name in enumerate(layouts)}
    grid = np.indices([len(tables.alternatives[p]) for p in plans]).reshape(len(plans), -1)
    n = grid.shape[1]

    def column(p: int, field: str) -> np.ndarray:
        values = [getattr(a, field) for a in tables.alternatives[p]]
        table = np.array([code[v] if isinstance(v, str) else v for v in values])
        return table[grid[pos[p]]]

    cost = sum((column(p, "cost") for p in plans), np.zeros(n, dtype=np.int64))
    need: dict[tuple[int, int], np.ndarray] = {}
    for c, values in tables.operand_values.items():
        for i, v in enumerate(values):
            wanted = np.array([code[a.operands[i]] for a in tables.alternatives[c]])[grid[pos[c]]]
            for layout in range(len(layouts)):
                need[v, layout] = need.get((v, layout), np.zeros(n, bool)) | (wanted == layout)
    for v, names in tables.return_layouts.items():
        for name in names:
            need[v, code[name]] = np.ones(n, bool)
    illegal = np.zeros(n, bool)
    for (v, dst), mask in need.items():
        src = column(v, "result") if v in pos else np.full(n, code[tables.fixed_layouts[v]])
        for s, name in enumerate(layouts):
            if s == dst:
                continue
            hit = mask & (src == s)
            step = tables.materialize_cost.get((v, name, layouts[dst]))
            if step is None:
                illegal |= hit
            else:
                cost = cost + step * hit
    return None if illegal.all() else int(cost[~illegal].min())


def _results_dense(tables: LayoutTables, result_choice: dict, mats: list) -> bool:
    returned = {m.value for m in mats if m.returned and m.to_layout == D}
    return all(
        result_choice[p].result == D or p in returned
        for p, plan in tables.plans.items()
        if plan.is_output
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_graphs(max_plans=12))
def test_exact_matches_brute_force(plans: list[LayoutPlan]) -> None:
    tables = derive_layout_tables(plans)
    exact = select_exact(tables)
    iterative = select_iterative(tables)
    dense = select_disabled(tables)
    assert exact.status == "OPTIMAL"
    assert exact.cost == brute_force(tables)
    assert exact.cost <= iterative.cost
    assert exact.cost <= dense.cost
    for selection in (exact, iterative, dense):
        assert evaluate(tables, selection.choice) == (selection.cost, selection.materializations)
        assert _results_dense(tables, selection.choice, selection.materializations)
        assert (
            sum(m.cost for m in selection.materializations)
            + sum(a.cost for a in selection.choice.values())
            == selection.cost
        )
        counts = selection.counts
        assert counts[D] + counts[R] == len(plans)


def test_iterative_stays_dense_where_exact_is_cheaper() -> None:
    plans = chain(["conv", "relu", "maxpool", "conv"])
    iterative = plan_layouts(plans, "iterative")
    exact = plan_layouts(plans, "exact")
    assert iterative.counts == {D: 4, R: 0, "materializations": 0, "cost": 0}
    assert iterative.status == "converged in 1 rounds"
    # Four row-strip plans (-2 each) and one materialization of the result (+3).
    assert exact.counts == {D: 0, R: 4, "materializations": 1, "cost": -5}
    assert iterative.cost - exact.cost == 5
    (mat,) = exact.materializations
    assert (mat.producer, mat.from_layout, mat.to_layout, mat.returned) == (3, R, D, True)


def test_materialization_shared_by_consumers() -> None:
    # conv (row strip) feeds two dense-only gemms: one materialization, two consumers.
    plans = [
        *chain(["conv", "relu", "conv"]),
        LayoutPlan(3, "gemm", [2, None], {}, True),
        LayoutPlan(4, "softmax", [2], {}, True),
    ]
    plans[2] = LayoutPlan(2, "conv", [1, None], ALL_GATES, False)
    exact = plan_layouts(plans)
    assert exact.cost == -6 + 3
    (mat,) = exact.materializations
    assert mat.consumers == ((3, 0), (4, 0)) and not mat.returned


def test_external_operand_materialized_per_use() -> None:
    plans = [
        *chain(["conv", "relu", "conv", "relu"]),
        LayoutPlan(4, "add", [3, None], {}, False),
        LayoutPlan(5, "relu", [4], {}, False),
        LayoutPlan(6, "conv", [5, None], ALL_GATES, True),
    ]
    plans[3] = LayoutPlan(3, "relu", [2], {}, False)
    exact = plan_layouts(plans)
    argument = [m for m in exact.materializations if m.producer is None]
    assert exact.choice[4].result == R
    assert [(m.from_layout, m.to_layout, m.consumers) for m in argument] == [(D, R, ((4, 1),))]


def test_disabled_selects_alternative_zero() -> None:
    result = plan_layouts(chain(["conv", "silu", "maxpool", "flatten", "gemm"]), "disabled")
    assert {a.index for a in result.choice.values()} == {0}
    assert result.materializations == [] and result.cost == 0


def test_unknown_selector_and_bad_graphs() -> None:
    with pytest.raises(LayoutError, match="unknown layout selector"):
        plan_layouts(chain(["relu"]), "greedy")
    with pytest.raises(LayoutError, match="unknown producer"):
        plan_layouts([LayoutPlan(0, "relu", [7])])
    with pytest.raises(LayoutError, match="duplicate plan id"):
        plan_layouts([LayoutPlan(0, "relu", [None]), LayoutPlan(0, "relu", [None])])
    with pytest.raises(LayoutError, match="invalid kind"):
        plan_layouts([LayoutPlan(0, "re lu", [None])])


EDITS = {
    "negative-materialize": (
        r"\(set \(MaterializeCost \(DenseNCHW\) \(NHWCRowStrip\)\) 3\)",
        "(set (MaterializeCost (DenseNCHW) (NHWCRowStrip)) -1)",
    ),
    "no-rowstrip-to-dense": (r"\(set \(MaterializeCost \(NHWCRowStrip\) \(DenseNCHW\)\) 3\)", ""),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_exact_matches_brute_force_with_edited_costs(edit: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(resolve_rules_dir(None), rules)
    layout = rules / "layout.egg"
    pattern, new = EDITS[edit]
    text, n = re.subn(pattern, new, layout.read_text())
    assert n == 1
    layout.write_text(text)
    graphs = [
        chain(["conv", "relu", "maxpool", "conv"]),
        [
            *chain(["conv", "relu", "conv"]),
            LayoutPlan(3, "add", [2, 0], {}, False),
            LayoutPlan(4, "concat", [3, 1, None], {}, False),
            LayoutPlan(5, "gemm", [4, None], {}, True),
            LayoutPlan(6, "silu", [3], {}, True),
        ],
    ]
    for plans in graphs:
        tables = derive_layout_tables(plans, rules)
        exact = select_exact(tables)
        assert exact.cost == brute_force(tables)
        assert exact.cost <= select_iterative(tables).cost
        assert _results_dense(tables, exact.choice, exact.materializations)


def test_iterative_non_convergence_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_LocalSearch, "improve", lambda self, plan: True)
    with pytest.raises(LayoutError, match="did not converge in 7 rounds"):
        plan_layouts(chain(["conv", "relu", "conv"]), "iterative")
