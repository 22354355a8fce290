"""Reporting a CP-SAT search while it runs: each improving solution's objective and each
improvement of the proven bound, for the live progress line of `raptor solve`. It only
observes: the search and its result are the same with or without it."""

from __future__ import annotations

from collections.abc import Callable

from ortools.sat.python import cp_model

SearchReport = Callable[[int | None, int | None], None]
"""Called with (incumbent, bound) in the objective's unit (ns); None where unchanged."""


class _Solutions(cp_model.CpSolverSolutionCallback):
    def __init__(self, report: SearchReport) -> None:
        super().__init__()
        self.report = report

    def on_solution_callback(self) -> None:
        self.report(int(self.objective_value), int(self.best_objective_bound))


def watch(solver: cp_model.CpSolver, report: SearchReport | None
          ) -> cp_model.CpSolverSolutionCallback | None:
    """The callback to pass to `solver.solve` (None without a report); also hooks the
    solver's bound callback."""
    if report is None:
        return None
    solver.best_bound_callback = lambda bound: report(None, int(bound))
    return _Solutions(report)
