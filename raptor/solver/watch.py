"""A CP-SAT search as the program sees it: each improving solution's objective and each
improvement of the proven bound, for the live progress line of `raptor solve` (it only
observes: the search and its result are the same with or without it), and the one way to
end the search early, `stop_search` (the first Ctrl-C, `raptor.ui.interrupt`).

CP-SAT catches SIGINT itself by default, and afterwards leaves the process with the
default handler, so that the next Ctrl-C kills it without a word: every search here runs
with `catch_sigint_signal` off and Ctrl-C stays the program's.

CP-SAT 9.15 aborts the whole process (`Check failed: solution->size() ==
postsolve_mapping.size()`) when a search is stopped after presolve reported the hint as its
first solution but before the search proper began (measured on examples/resnet_block.onnx).
So a stop asked for before the search begins waits for its start, which CP-SAT's log says
(`Starting ... search`; the log goes to a callback, not to the terminal)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ortools.sat.python import cp_model

SearchReport = Callable[[int | None, int | None], None]
"""Called with (incumbent, bound) in the objective's unit (ns); None where unchanged."""

_lock = threading.Lock()
_running: cp_model.CpSolver | None = None
_started = False
"""The running search is past presolve: it may be stopped."""
_pending = False
"""A stop was asked for before the search started."""
_stopped = 0
"""Searches ended by `stop_search` in this process."""
_sessions = 0
"""Open searches made of many CP-SAT solves (`session`)."""
_session_stopped = False
"""`stop_search` was asked for while a session was open."""


class _Solutions(cp_model.CpSolverSolutionCallback):
    def __init__(self, report: SearchReport) -> None:
        super().__init__()
        self.report = report

    def on_solution_callback(self) -> None:
        self.report(int(self.objective_value), int(self.best_objective_bound))


def _log(line: str) -> None:
    """CP-SAT's log: the line that says the search began lets a pending stop through."""
    global _started, _pending
    if not line.startswith("Starting") or "search" not in line:
        return
    with _lock:
        _started = True
        if _pending and _running is not None:
            _pending = False
            # not from CP-SAT's own logging thread: stop from a thread of ours
            threading.Thread(target=_running.stop_search, daemon=True).start()


@contextmanager
def session() -> Iterator[None]:
    """A search made of many CP-SAT solves (the large-neighbourhood search): a stop asked for
    between two of them ends it as well; the caller polls `stop_requested`."""
    global _sessions, _session_stopped
    with _lock:
        if not _sessions:
            _session_stopped = False
        _sessions += 1
    try:
        yield
    finally:
        with _lock:
            _sessions -= 1


def stop_requested() -> bool:
    """`stop_search` was asked for during the open `session`."""
    return _session_stopped


def search(solver: cp_model.CpSolver, model: cp_model.CpModel,
           report: SearchReport | None = None,
           solutions: cp_model.CpSolverSolutionCallback | None = None
           ) -> cp_model.CpSolverStatus:
    """`solver.solve(model)`, told to `report` (or to the callback `solutions`) while it runs
    and stoppable by `stop_search`."""
    global _running, _started, _pending
    prm = solver.parameters
    prm.catch_sigint_signal = False
    prm.log_search_progress, prm.log_to_stdout = True, False
    solver.log_callback = _log
    if report is not None:
        solver.best_bound_callback = lambda bound: report(None, int(bound))
    with _lock:
        _running, _started, _pending = solver, False, False
    try:
        if solutions is None and report is not None:
            solutions = _Solutions(report)
        return solver.solve(model, solutions)
    finally:
        with _lock:
            _running = None


def stop_search() -> bool:
    """End the running search (it returns its best solution so far; asked for during
    presolve, when the search begins); False when none runs. Safe from any thread."""
    global _stopped, _pending, _session_stopped
    with _lock:
        if _sessions:
            _session_stopped = True
        if _running is None:
            if _sessions:
                _stopped += 1
            return bool(_sessions)
        if _started:
            _running.stop_search()
        else:
            _pending = True
        _stopped += 1
        return True


def searches_stopped() -> int:
    """How many searches `stop_search` ended so far: a caller compares the count before and
    after a solve to know whether its search was cut short."""
    return _stopped
