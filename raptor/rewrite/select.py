"""Layout selection over the tables derived by `rules/layout.egg`.

Three selectors choose one alternative per plan:

* `exact`: CP-SAT, minimal intrinsic + materialization cost. A materialization is one
  `spat.materialize_layout` per (value, target layout), shared by every consumer that needs
  the value in that layout; function results must have their `ReturnLayout`.
* `iterative`: the local search of docs/spec/004_0e4acb9797449932.txt (start at
  alternative 0, strictly cheaper replaces, ties keep, alternating forward/reverse rounds, at
  most 2 × plans + 1 rounds). A candidate is scored by its intrinsic cost plus the
  materializations of its operands and its result.
* `disabled`: alternative 0 everywhere (`--disable-spatial-planning`); materializations
  are still computed.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from raptor.rewrite.layout import (
    DENSE,
    ROW_STRIP,
    Alternative,
    LayoutError,
    LayoutPlan,
    LayoutTables,
    derive_layout_tables,
)


@dataclass(frozen=True)
class Materialization:
    """One `spat.materialize_layout` of a value into another layout.

    `value` is the producer plan's id, or an external value id (then `producer` is None);
    `consumers` are the (plan, operand index) uses that read the materialized value;
    `returned` says the function result needs it.
    """

    value: int
    producer: int | None
    from_layout: str
    to_layout: str
    consumers: tuple[tuple[int, int], ...]
    returned: bool
    cost: int


@dataclass
class LayoutSelection:
    """The chosen alternative per plan, the materializations, and what it cost."""

    selector: str
    status: str
    choice: dict[int, Alternative]
    materializations: list[Materialization]
    cost: int
    fired: dict[str, int]

    @property
    def counts(self) -> dict[str, int]:
        """Plans per result layout, number of materializations and total cost."""
        counts = Counter(dict.fromkeys((DENSE, ROW_STRIP), 0))
        counts.update(alt.result for alt in self.choice.values())
        return {**counts, "materializations": len(self.materializations), "cost": self.cost}


def _value_layout(tables: LayoutTables, choice: dict[int, Alternative], value: int) -> str:
    return choice[value].result if value in choice else tables.fixed_layouts[value]


def evaluate(tables: LayoutTables, choice: dict[int, Alternative]
             ) -> tuple[int, list[Materialization]]:
    """Total cost and materializations of an assignment; LayoutError if one is illegal."""
    needs: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for c, values in tables.operand_values.items():
        for i, v in enumerate(values):
            needs.setdefault(v, {}).setdefault(choice[c].operands[i], []).append((c, i))
    for v, layouts in tables.return_layouts.items():
        for layout in layouts:
            needs.setdefault(v, {}).setdefault(layout, [])
    cost = sum(alt.cost for alt in choice.values())
    mats: list[Materialization] = []
    for v in sorted(needs):
        src = _value_layout(tables, choice, v)
        for dst in sorted(needs[v]):
            if dst == src:
                continue
            step = tables.materialize_cost.get((v, src, dst))
            if step is None:
                raise LayoutError(f"value {v} is {src} but must be {dst}: no materialization")
            mats.append(Materialization(v, v if v in tables.plans else None, src, dst,
                                        tuple(needs[v][dst]),
                                        dst in tables.return_layouts.get(v, ()), step))
            cost += step
    return cost, mats


def _first_alternative(tables: LayoutTables, plan: int) -> Alternative:
    for alt in tables.alternatives[plan]:
        if alt.index == 0:
            return alt
    raise LayoutError(f"plan {plan} has no alternative 0")


def _finish(name: str, status: str, tables: LayoutTables, choice: dict[int, Alternative]
            ) -> LayoutSelection:
    cost, mats = evaluate(tables, choice)
    return LayoutSelection(name, status, dict(sorted(choice.items())), mats, cost,
                           dict(tables.fired))


def select_disabled(tables: LayoutTables) -> LayoutSelection:
    """Alternative 0 for every plan."""
    choice = {p: _first_alternative(tables, p) for p in tables.plans}
    return _finish("disabled", "disabled", tables, choice)


def select_exact(tables: LayoutTables, time_limit: float = 60.0, workers: int = 1
                 ) -> LayoutSelection:
    """The optimal assignment by CP-SAT (status FEASIBLE if the time limit cut the proof)."""
    model = cp_model.CpModel()
    x = {(p, alt.index): model.new_bool_var(f"alt[{p},{alt.index}]")
         for p, alts in tables.alternatives.items() for alt in alts}
    for p, alts in tables.alternatives.items():
        model.add_exactly_one(x[p, alt.index] for alt in alts)
    terms: list[tuple[cp_model.IntVar, int]] = [
        (x[p, alt.index], alt.cost) for p, alts in tables.alternatives.items() for alt in alts]

    requirers: dict[int, dict[str, list[cp_model.IntVar]]] = {}
    for c, values in tables.operand_values.items():
        for i, v in enumerate(values):
            for alt in tables.alternatives[c]:
                requirers.setdefault(v, {}).setdefault(alt.operands[i], []).append(x[c, alt.index])
    for v, layouts in tables.return_layouts.items():
        for layout in layouts:
            requirers.setdefault(v, {}).setdefault(layout, [])

    true = model.new_bool_var("true")
    model.add_bool_or([true])
    for v, by_layout in sorted(requirers.items()):
        # produced[layout]: the literals under which v is produced in that layout.
        produced: dict[str, list[cp_model.IntVar]] = {}
        if v in tables.alternatives:
            for alt in tables.alternatives[v]:
                produced.setdefault(alt.result, []).append(x[v, alt.index])
        else:
            produced[tables.fixed_layouts[v]] = [true]
        for dst, lits in sorted(by_layout.items()):
            returned = dst in tables.return_layouts.get(v, ())
            need = true if returned else model.new_bool_var(f"need[{v},{dst}]")
            for lit in lits:
                model.add_implication(lit, need)
            exact_need = False
            for src, made in sorted(produced.items()):
                if src == dst:
                    continue
                step = tables.materialize_cost.get((v, src, dst))
                if step is None:
                    for lit in made:
                        model.add_bool_or([lit.Not(), need.Not()])
                    continue
                mat = model.new_bool_var(f"mat[{v},{src}->{dst}]")
                for lit in made:
                    model.add_bool_or([lit.Not(), need.Not(), mat])
                if step < 0:  # a gain may only be taken where the mismatch really exists
                    model.add_implication(mat, need)
                    model.add_bool_or(made).only_enforce_if(mat)
                    exact_need = True
                terms.append((mat, step))
            if exact_need and not returned:
                model.add_bool_or(lits).only_enforce_if(need)
    model.minimize(cp_model.LinearExpr.weighted_sum([v for v, _ in terms], [c for _, c in terms]))
    for (_, index), var in x.items():
        model.add_hint(var, index == 0)

    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False  # Ctrl-C stops the program (raptor.cli)
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = workers
    # Measured: core-based search finds and proves these pseudo-Boolean optima fastest, and
    # symmetry detection dominated presolve on 10,000-plan chains (24 s → 3 s).
    solver.parameters.optimize_with_core = True
    solver.parameters.symmetry_level = 0
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise LayoutError(f"no legal layout assignment (CP-SAT {solver.status_name(status)})")
    choice = {p: next(alt for alt in alts if solver.boolean_value(x[p, alt.index]))
              for p, alts in tables.alternatives.items()}
    return _finish("exact", solver.status_name(status), tables, choice)


class _LocalSearch:
    """Incremental cost bookkeeping for the iterative selector."""

    def __init__(self, tables: LayoutTables) -> None:
        self.tables = tables
        self.choice = {p: _first_alternative(tables, p) for p in tables.plans}
        self.demand: dict[int, Counter[str]] = {v: Counter()
                                                for v in (*tables.plans, *tables.externals)}
        for v, layouts in tables.return_layouts.items():
            self.demand[v].update(layouts)
        for p in tables.plans:
            self._demand(p, +1)

    def _demand(self, plan: int, sign: int) -> None:
        for v, layout in zip(self.tables.operand_values[plan], self.choice[plan].operands,
                             strict=True):
            self.demand[v][layout] += sign

    def _value_cost(self, v: int) -> float:
        src = _value_layout(self.tables, self.choice, v)
        return sum((self.tables.materialize_cost.get((v, src, dst), math.inf)
                    for dst, n in self.demand[v].items() if n > 0 and dst != src), 0.0)

    def local_cost(self, plan: int) -> float:
        """Cost terms that depend on `plan`'s alternative."""
        values = {plan, *self.tables.operand_values[plan]}
        return self.choice[plan].cost + sum(self._value_cost(v) for v in values)

    def assign(self, plan: int, alt: Alternative) -> None:
        self._demand(plan, -1)
        self.choice[plan] = alt
        self._demand(plan, +1)

    def improve(self, plan: int) -> bool:
        """Move `plan` to a strictly cheaper alternative if there is one."""
        current = self.choice[plan]
        best, best_cost = current, self.local_cost(plan)
        for alt in self.tables.alternatives[plan]:
            if alt == current:
                continue
            self.assign(plan, alt)
            cost = self.local_cost(plan)
            if cost < best_cost:
                best, best_cost = alt, cost
        self.assign(plan, best)
        return best != current


def select_iterative(tables: LayoutTables) -> LayoutSelection:
    """The local search of docs/spec/004; LayoutError if it does not converge."""
    search = _LocalSearch(tables)
    order = list(tables.plans)
    limit = 2 * len(order) + 1
    for round_ in range(limit):
        sweep = order if round_ % 2 == 0 else order[::-1]
        changed = [search.improve(p) for p in sweep]
        if not any(changed):
            return _finish("iterative", f"converged in {round_ + 1} rounds", tables, search.choice)
    raise LayoutError(f"layout planning did not converge in {limit} rounds")


SELECTORS: dict[str, Callable[[LayoutTables], LayoutSelection]] = {
    "exact": select_exact,
    "iterative": select_iterative,
    "disabled": select_disabled,
}


def plan_layouts(plans: Sequence[LayoutPlan], selector: str = "exact",
                 rules_dir: str | os.PathLike[str] | None = None) -> LayoutSelection:
    """Derive the layout tables for `plans` with the rule files and select with `selector`."""
    if selector not in SELECTORS:
        raise LayoutError(f"unknown layout selector {selector!r} (known: {', '.join(SELECTORS)})")
    return SELECTORS[selector](derive_layout_tables(plans, rules_dir))
