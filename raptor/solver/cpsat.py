"""Latency scheduling with OR-Tools CP-SAT: placement, order, mesh communication, the shared
memory and crossbar capacity, judged like every schedule by the communication model.

Data (candidate cores, durations, per-edge delays, start windows, the hint —
the PEFT plan — and interchangeable lanes) -> variables -> constraints -> objective -> solve
-> extract:

* **Variables**: one start per task in [head, UB − tail] (UB: the hint's plan); a Boolean
  ``x[t,p]`` per candidate core, exactly one per task; an optional interval per (t, p)
  sharing the start; per edge a ``same`` Boolean (clauses, NOTES: ~10× faster than
  comparing core indices) and row/column distances ``dr``/``dc``.
* **Constraints** (the terms of :mod:`raptor.solver.comm`): one task at a time per core; a
  task that crops a value produced on its own core copies it once more (its interval grows
  with ``same``); precedence with the free-link transfer of the edge's largest fragment,
  ``num·(s_v − e_u) ≥ den·(fixed·(1 − same) + per_hop·(dr + dc))`` (clock num/den GHz; the
  message's free latency under the target's protocol, :func:`raptor.noc.message_cycles`,
  is exactly ``fixed + per_hop·hops`` cycles); the graph outputs' shared-memory stores one at
  a time; the per-core link capacity (:meth:`_Model.injection`); crossbar capacity where the
  candidate tiles could overflow. Per-link cut-through contention is not modelled: it needs
  an interval per (fragment, source, destination, link) — about 290,000 for the 15-task
  MLP's full model on 64 cores. :func:`raptor.solver.comm.replay` judges every solution
  with it instead, and one that replays slower than its hint is not returned.
* **Solve**: the complete hint is first checked against the model (its values fixed, a
  short search: NOTES measured 0.2 s on a 604-task CNN) so that a rejected hint is
  reported, not silently lost. Presolve probing is off (on that CNN it took 29 s before
  any search and the solver returned UNKNOWN although the hint was feasible). By default
  the limit is in CP-SAT's *deterministic* time (``DET_PER_SECOND``), so the same command
  gives the same schedule whatever the load and worker count; a wall-clock limit of
  ``wall_factor`` × the limit stops it on a very slow machine, and the status says so.
* **Extract**: placement and per-core order, ASAP retimed (never later, and canonical for
  materialization); the result always holds at least the hint.

Lane symmetry. Tasks of one batch with equal cost, tiles, candidate cores and identical
predecessor and successor sets (same neighbours, same bytes) are interchangeable: swapping two
of them maps every schedule to one with the same makespan, whatever the mesh distances,
because the swap renames tasks, not cores. So ordering their starts (s_a ≤ s_b for a < b)
keeps an optimum. Breaking core symmetry instead (value precedence on core indices) would be
wrong here — cores differ by mesh position — and the NOTES measured it slower anyway.

Status. The model's optimum bounds the problem (free links only relax it), so OPTIMAL means
that the communication model replays the optimal plan at exactly the model's objective;
otherwise the status is FEASIBLE and says both figures.

Beyond the whole model. Unless it proved such an optimum within ``full_share`` of the limit
(or the graph has more than ``max_full_pairs`` task-core pairs: the model is not built),
the large-neighbourhood search (:mod:`raptor.solver.lns`) re-optimizes windows of the best
schedule with CP-SAT, calibrated on its replay, and keeps what the replay judges better
(faster, or as fast with earlier ends), until the limit (model ``full+lns`` or ``lns``; the
bound reported is then the larger of the whole model's and the problem's lower bound).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from raptor.noc import hold_cycles, message_cycles, shared_network
from raptor.solver.evaluate import lower_bounds, retime, validate_schedule
from raptor.solver.graph import ComputeGraph
from raptor.solver.lns import lns_schedule, tie_same
from raptor.solver.peft import check_capacity, peft_schedule
from raptor.solver.schedule import MergeScheduleResult, core_order
from raptor.solver.watch import SearchReport, search, session
from raptor.target import Target

DET_PER_SECOND = 0.05
"""Units of CP-SAT's deterministic time per second of ``CpSatOptions.time_limit``. CP-SAT
aims at one unit per second, but on these scheduling models its counter advanced 0.05-0.35
units per CPU second (OR-Tools 9.15, this machine; the least on the full 64-core models of
the smallest graphs, whose search is mostly the LP), so a unit per second would make
``--time-limit 10`` a search of minutes."""

INTERLEAVE_BATCH = 2


@dataclass(frozen=True)
class CpSatOptions:
    time_limit: float = 10.0
    """Search limit in seconds. A deterministic search spends ``DET_PER_SECOND`` units of
    CP-SAT's deterministic time per second of it, which takes roughly that long on an idle
    2-core machine (see DET_PER_SECOND)."""
    num_workers: int = 2
    seed: int = 0
    max_full_pairs: int = 4096
    """Up to this many tasks × cores the model of the whole problem is solved first (with
    ``full_share`` of the limit); larger graphs go to the large-neighbourhood search
    (:mod:`raptor.solver.lns`) alone."""
    full_share: float = 0.5
    """Share of the limit for the whole-problem model when the search goes on afterwards."""
    lane_symmetry: bool = True
    deterministic: bool = True
    """Interleaved search with a deterministic time limit: identical reruns, whatever the
    load and the number of workers."""
    wall_factor: float = 10.0
    """Wall-clock safety limit of a deterministic search, as a multiple of ``time_limit``
    (reached only on a heavily loaded machine; the status then says so)."""
    injection: bool = True
    """Model the per-core injection capacity (off: the plain free-link model)."""
    hint_check_limit: float = 5.0
    """Seconds for checking the hint against the model before the search."""
    on_progress: SearchReport | None = field(default=None, compare=False)
    """Told each incumbent and proven bound during the search (the live progress line)."""


def symmetric_lane_classes(graph: ComputeGraph, cands: list[list[int]]) -> list[list[int]]:
    """Groups (size ≥ 2, ascending ids) of interchangeable lanes, see the module docstring."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for t, task in enumerate(graph.tasks):
        if task.batch < 0 or t in graph.local_reads:
            continue
        key = (task.batch, task.cost_ns, task.shared_ns, task.weights, tuple(cands[t]),
               tuple(sorted(graph.preds[t])), tuple(sorted(graph.succs[t])))
        groups.setdefault(key, []).append(t)
    return [g for g in groups.values() if len(g) > 1]


class _Model:
    """The CP-SAT model (module docstring) with its hint: the initial plan, interchangeable
    lanes relabelled into start order."""

    def __init__(self, graph: ComputeGraph, target: Target, initial: MergeScheduleResult,
                 cands: list[list[int]], model_name: str, opts: CpSatOptions) -> None:
        self.graph, self.target, self.cands, self.model_name = graph, target, cands, model_name
        self.with_injection = opts.injection
        self.classes = symmetric_lane_classes(graph, cands) if opts.lane_symmetry else []
        self.hint_core = list(initial.core_of)
        self.hint_start = list(initial.start_ns)
        for members in self.classes:
            slots = sorted((initial.start_ns[t], initial.core_of[t]) for t in members)
            for t, (s, p) in zip(members, slots, strict=True):
                self.hint_start[t], self.hint_core[t] = s, p
        # a message's free latency is linear in its hops under either protocol
        # (`raptor.noc.message_cycles`): a fixed part plus a part per hop, per edge
        self.edge_cycles = {e: (message_cycles(target, 0, b, target.protocol),
                                message_cycles(target, 1, b, target.protocol)
                                - message_cycles(target, 0, b, target.protocol))
                            for e, b in graph.largest_message().items()}
        self.head, self.tail = graph.top_levels(), graph.bottom_levels()
        self.ub = max(initial.makespan_ns, max((s + d for s, d in zip(
            self.hint_start, graph.max_durations(), strict=True)), default=0))
        self.lb = lower_bounds(graph, target, link_cut=False).makespan_ns
        self.m = cp_model.CpModel()
        self.hints: list[tuple[cp_model.IntVar, int]] = []
        self.variables()
        self.constraints()
        self.objective()
        self.add_hints()

    # -- variables ----------------------------------------------------------------------------
    def variables(self) -> None:
        m = self.m
        g, n = self.graph, self.graph.num_tasks
        head, tail = self.head, self.tail
        self.start = [m.new_int_var(head[t], max(head[t], self.ub - tail[t]), f"start_{t}")
                      for t in range(n)]
        self.x: list[dict[int, cp_model.IntVar]] = [
            {p: m.new_bool_var(f"x_{t}_{p}") for p in self.cands[t]} for t in range(n)]
        self.same: dict[tuple[int, int], cp_model.IntVar] = {}
        self.dist: dict[tuple[int, int], tuple[cp_model.IntVar, cp_model.IntVar]] = {}
        rows, cols = self.target.mesh_rows, self.target.mesh_cols
        for e in g.edges:
            u, v = e.src, e.dst
            self.same[(u, v)] = m.new_bool_var(f"same_{u}_{v}")
            self.dist[(u, v)] = (m.new_int_var(0, rows - 1, f"dr_{u}_{v}"),
                                 m.new_int_var(0, cols - 1, f"dc_{u}_{v}"))
        # a task that crops values produced on its own core runs longer there
        self.end: list[cp_model.LinearExpr] = []
        self.size: list[cp_model.LinearExpr] = []
        for t in range(n):
            extra = g.local_reads.get(t, [])
            cost = g.tasks[t].cost_ns
            if not extra:
                self.size.append(cp_model.LinearExpr.constant(cost))
                self.end.append(self.start[t] + cost)
                continue
            size = m.new_int_var(cost, cost + sum(ns for _, ns in extra), f"size_{t}")
            m.add(size == cost + sum(ns * self.same[(g.fragments[f].producer, t)]
                                     for f, ns in extra))
            end = m.new_int_var(self.head[t] + cost, self.ub, f"end_{t}")
            m.add(end == self.start[t] + size)
            self.size.append(size)
            self.end.append(end)
        self.makespan = m.new_int_var(self.lb, self.ub, "makespan")
        self.readers: list[list[int]] = [[] for _ in g.fragments]
        for v, frags in enumerate(g.reads):
            for f in frags:
                self.readers[f].append(v)

    # -- constraints --------------------------------------------------------------------------
    def constraints(self) -> None:
        self.placement()
        self.precedence()
        self.shared_memory()
        if self.with_injection:
            self.injection()
        self.capacity()
        for members in self.classes:
            for a, b in itertools.pairwise(members):
                self.m.add(self.start[a] <= self.start[b])

    def placement(self) -> None:
        """Exactly one core per task; one task at a time per core."""
        m, g = self.m, self.graph
        per_core: list[list[cp_model.IntervalVar]] = [[] for _ in range(self.target.num_cores)]
        for t in range(g.num_tasks):
            m.add_exactly_one(self.x[t].values())
            extra = g.local_reads.get(t, [])
            for p, lit in self.x[t].items():
                if extra:
                    iv = m.new_optional_interval_var(self.start[t], self.size[t], self.end[t],
                                                     lit, f"iv_{t}_{p}")
                else:
                    iv = m.new_optional_fixed_size_interval_var(
                        self.start[t], g.tasks[t].cost_ns, lit, f"iv_{t}_{p}")
                per_core[p].append(iv)
        for ivs in per_core:
            if len(ivs) > 1:
                m.add_no_overlap(ivs)

    def precedence(self) -> None:
        """``same`` tied to the placements; the free-link transfer of the edge's largest
        fragment between different cores (module docstring)."""
        m = self.m
        cols = self.target.mesh_cols
        clock = self.target.clock_fraction
        for e in self.graph.edges:
            u, v = e.src, e.dst
            xu, xv, same = self.x[u], self.x[v], self.same[(u, v)]
            if not set(xu) & set(xv):
                m.add(same == 0)
            tie_same(m, same, xu, xv)
            dr, dc = self.dist[(u, v)]
            for dist, axis in ((dr, lambda p: p // cols), (dc, lambda p: p % cols)):
                at_u = sum(axis(p) * lit for p, lit in xu.items())
                at_v = sum(axis(p) * lit for p, lit in xv.items())
                m.add(dist >= at_u - at_v)
                m.add(dist >= at_v - at_u)
            fixed, per_hop = self.edge_cycles[(u, v)]
            m.add(clock.numerator * (self.start[v] - self.end[u])
                  >= clock.denominator * (fixed * (1 - same) + per_hop * (dr + dc)))

    def shared_memory(self) -> None:
        """The stores of graph outputs, one at a time chip-wide, at the end of their task."""
        g, m = self.graph, self.m
        stores = [m.new_interval_var(self.end[t] - task.shared_ns, task.shared_ns, self.end[t],
                                     f"store_{t}")
                  for t, task in enumerate(g.tasks) if task.shared_ns]
        if len(stores) > 1:
            m.add_no_overlap(stores)

    def injection(self) -> None:
        """Aggregated link capacity, per core: every message leaving a core crosses one of
        its outgoing links (pimsim-nn: holds its one switch), so their hold times
        (:func:`raptor.noc.hold_cycles`, over one hop at least) add up to at most (outgoing
        links × makespan). A fragment read on another core leaves its producer's core at least
        once (``remote``); counting it once is exact for one remote core and a relaxation
        for more, so the model's bound stays a bound."""
        m, g = self.m, self.graph
        load: dict[int, list[cp_model.LinearExprT]] = {}
        for f, frag in enumerate(g.fragments):
            u = frag.producer
            readers = [v for v in self.readers[f] if (u, v) in self.same]
            ser = self.target.ns(hold_cycles(self.target, 1, frag.bytes, self.target.protocol))
            if not readers or not ser:
                continue
            remote = m.new_bool_var(f"remote_{f}")
            for v in readers:
                m.add_implication(self.same[(u, v)].Not(), remote)
            leaves = any(self.hint_core[v] != self.hint_core[u] for v in readers)
            self.hints.append((remote, int(leaves)))
            for p, lit in self.x[u].items():
                out = m.new_bool_var(f"out_{f}_{p}")
                m.add_bool_or([lit.Not(), remote.Not(), out])
                self.hints.append((out, int(leaves and self.hint_core[u] == p)))
                load.setdefault(p, []).append(ser * out)
        rows, cols = self.target.mesh_rows, self.target.mesh_cols
        switched = shared_network(self.target).switched  # pimsim-nn: one switch per core
        for p, terms in load.items():
            r, c = divmod(p, cols)
            links = 1 if switched else (r > 0) + (r < rows - 1) + (c > 0) + (c < cols - 1)
            m.add(sum(terms) <= links * self.makespan)

    def capacity(self) -> None:
        """Tile-presence literals where a core's candidate tiles could exceed its crossbars."""
        m, g = self.m, self.graph
        cap = self.target.crossbars_per_core
        for p in range(self.target.num_cores):
            users: dict[int, list[int]] = {}
            for t in range(g.num_tasks):
                if p in self.x[t]:
                    for w in g.tasks[t].weights:
                        users.setdefault(w, []).append(t)
            if len(users) <= cap:
                continue
            present = []
            for w, ts in sorted(users.items()):
                y = m.new_bool_var(f"tile_{w}_{p}")
                for t in ts:
                    m.add_implication(self.x[t][p], y)
                present.append(y)
                self.hints.append((y, int(any(self.hint_core[t] == p for t in ts))))
            m.add(sum(present) <= cap)

    # -- objective and hint ------------------------------------------------------------------
    def objective(self) -> None:
        g = self.graph
        for t in range(g.num_tasks):
            if not g.succs[t]:
                self.m.add(self.makespan >= self.end[t])
        self.m.minimize(self.makespan)

    def add_hints(self) -> None:
        m = self.m
        cols = self.target.mesh_cols
        for t in range(self.graph.num_tasks):
            m.add_hint(self.start[t], self.hint_start[t])
            for p, lit in self.x[t].items():
                m.add_hint(lit, int(p == self.hint_core[t]))
        for (u, v), same in self.same.items():
            pu, pv = self.hint_core[u], self.hint_core[v]
            dr, dc = self.dist[(u, v)]
            self.hints += [(same, int(pu == pv)), (dr, abs(pu // cols - pv // cols)),
                           (dc, abs(pu % cols - pv % cols))]
        dur = self.graph.durations(self.hint_core)
        for t, size in enumerate(self.size):
            end = self.end[t]
            if isinstance(size, cp_model.IntVar) and isinstance(end, cp_model.IntVar):
                self.hints += [(size, dur[t]), (end, self.hint_start[t] + dur[t])]
        for var, val in self.hints:
            m.add_hint(var, val)
        m.add_hint(self.makespan, max(self.lb, max(
            (s + x for s, x in zip(self.hint_start, dur, strict=True)), default=0)))

    # -- solve ---------------------------------------------------------------------------------
    def solver(self, opts: CpSatOptions, limit: float) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        prm = solver.parameters
        prm.catch_sigint_signal = False  # Ctrl-C is the program's (raptor.solver.watch)
        prm.num_workers = opts.num_workers
        prm.random_seed = opts.seed
        prm.cp_model_probing_level = 0
        if opts.deterministic:
            prm.interleave_search = True
            # two tasks between synchronisations, whatever the worker count (so that it does
            # not change the result): with CP-SAT's default batch the search overshot its
            # deterministic limit fourfold on the examples
            prm.interleave_batch_size = INTERLEAVE_BATCH
            prm.max_deterministic_time = limit * DET_PER_SECOND
            prm.max_time_in_seconds = limit * opts.wall_factor
        else:
            prm.max_time_in_seconds = limit
        return solver

    def check_hint(self, opts: CpSatOptions) -> tuple[bool | None, str]:
        """Solve with every hinted value fixed: is the hint a solution of this model?
        (True / False, or None when the check ran out of time.)"""
        solver = self.solver(opts, opts.hint_check_limit)
        solver.parameters.fix_variables_to_their_hinted_value = True
        solver.parameters.stop_after_first_solution = True
        code = solver.solve(self.m)
        # wall seconds stay out of the text: identical reruns give identical reports
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return True, "hint verified"
        if code == cp_model.INFEASIBLE:
            return False, "the hint violates the model"
        return None, f"the hint could not be checked within {opts.hint_check_limit:g} s"


def _fallback(initial: MergeScheduleResult, status: str, seconds: float, model: str,
              notes: list[str], bound: int | None = None, objective: int | None = None
              ) -> MergeScheduleResult:
    """The initial schedule, with what CP-SAT found (its bound, its best objective; a bound
    of -1: none, the search did not run)."""
    return dataclasses.replace(
        initial, solver="cpsat", status=status,
        bound_ns=None if bound == -1 else initial.bound_ns if bound is None else bound,
        objective_ns=objective, solve_seconds=seconds, model=model, notes=list(notes))


def _limit_words(opts: CpSatOptions, limit: float) -> str:
    """The limit of a search given `limit` of the `opts.time_limit` seconds asked for, and
    how a deterministic one follows from them."""
    share = f", {limit / opts.time_limit:.0%} of it" if limit != opts.time_limit else ""
    if opts.deterministic:
        return (f"{limit * DET_PER_SECOND:g} units of deterministic time (time limit "
                f"{opts.time_limit:g} s x {DET_PER_SECOND:g} units per second{share})")
    return f"{limit:g} s (time limit {opts.time_limit:g} s{share})"


def cpsat_schedule(graph: ComputeGraph, target: Target, options: CpSatOptions | None = None,
                   initial: MergeScheduleResult | None = None) -> MergeScheduleResult:
    """Minimize single-inference latency as the communication model judges it; returns at
    least the initial (PEFT) schedule. Small graphs: the whole problem's model first; then,
    unless that proved an optimum the communication model confirms, the large-neighbourhood
    search from the best schedule so far for the rest of the limit. A Ctrl-C anywhere in it
    (`raptor.solver.watch.stop_search`) ends it with the best schedule so far."""
    with session():
        return _cpsat_schedule(graph, target, options or CpSatOptions(), initial)


def _cpsat_schedule(graph: ComputeGraph, target: Target, opts: CpSatOptions,
                    initial: MergeScheduleResult | None) -> MergeScheduleResult:
    t0 = time.perf_counter()
    graph.freeze()
    check_capacity(graph, target)
    if initial is None:
        initial = peft_schedule(graph, target)
    budget = opts.time_limit * DET_PER_SECOND
    problem_lb = lower_bounds(graph, target).makespan_ns
    if graph.num_tasks * target.num_cores > opts.max_full_pairs:
        return _search(graph, target, opts, initial, initial, budget, t0, "lns",
                       [f"the whole-problem model ({graph.num_tasks} tasks x "
                        f"{target.num_cores} cores) exceeds max_full_pairs="
                        f"{opts.max_full_pairs}: windows only"], problem_lb)
    full, spent = _solve_full(graph, target, opts, initial, t0,
                              opts.time_limit * opts.full_share)
    if full.status.startswith("OPTIMAL"):
        return full
    best = full if full.estimate_ns < initial.estimate_ns else initial
    found = _search(graph, target, opts, initial, best, budget - spent, t0, "full+lns",
                    [*full.notes, f"whole-problem model: {full.status}"],
                    max(problem_lb, full.bound_ns or 0))
    if found.core_of == best.core_of and found.start_ns == best.start_ns:
        # the windows kept nothing: the whole model's result and status stand
        return dataclasses.replace(full, solve_seconds=found.solve_seconds,
                                   notes=[*full.notes, found.status])
    return found


def _search(graph: ComputeGraph, target: Target, opts: CpSatOptions,
            initial: MergeScheduleResult, start: MergeScheduleResult, units: float, t0: float,
            model: str, notes: list[str], bound: int) -> MergeScheduleResult:
    """The large-neighbourhood search from ``start`` within ``units``; FEASIBLE with the
    problem's bound (no window search proves anything of the whole)."""
    if not opts.deterministic:  # the wall clock is the limit
        units = float("inf")
    left = opts.time_limit * (opts.wall_factor if opts.deterministic else 1.0)
    wall = max(left - (time.perf_counter() - t0), 0.0)
    if opts.on_progress is not None:
        opts.on_progress(start.estimate_ns, bound)
    best, stats = lns_schedule(graph, target, start, max(units, 0.0), opts.seed, wall,
                               opts.on_progress, bound)
    elapsed = time.perf_counter() - t0
    stopped = opts.deterministic and 0 < stats.units < units and \
        elapsed >= opts.time_limit * opts.wall_factor * 0.99
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.kinds.items()) if v)
    if stats.plateau:
        kinds += f"; {stats.plateau} as fast, with earlier task ends"
    what = (f"FEASIBLE after a large-neighbourhood search that solved "
            f"{stats.windows} windows with CP-SAT ({stats.units:.2f} units of deterministic "
            f"time) and kept {stats.kept} that the communication model judged better"
            + (f" ({kinds})" if kinds else "")
            + ("; stopped by the wall-clock limit, so a rerun may differ" if stopped else ""))
    if best is initial:
        what += "; the PEFT schedule is returned"
    if best.estimate_ns <= bound:
        what = "OPTIMAL" + what[len("FEASIBLE"):] + f" (it replays at the bound, {bound:,} ns)"
    return dataclasses.replace(
        best, solver="cpsat", status=what, bound_ns=bound,
        objective_ns=best.estimate_ns if best is not initial else None,
        solve_seconds=elapsed, model=model, notes=notes)


def _solve_full(graph: ComputeGraph, target: Target, opts: CpSatOptions,
                initial: MergeScheduleResult, t0: float, limit: float
                ) -> tuple[MergeScheduleResult, float]:
    """The whole problem's model (module docstring) within ``limit`` seconds. OPTIMAL only
    when the communication model replays the optimum at the model's objective (the model
    has free links: its optimum bounds the problem, the replay may be slower). Also returns
    the deterministic time it took."""
    cands = [list(range(target.num_cores)) for _ in range(graph.num_tasks)]
    model = _Model(graph, target, initial, cands, "full", opts)
    notes: list[str] = []
    invalid = model.m.validate()
    if invalid:  # CP-SAT's own reason, not a search that ends in 0.00 units
        return _fallback(initial, f"MODEL_INVALID: {invalid}; the PEFT schedule is returned",
                         time.perf_counter() - t0, "full", notes, -1), 0.0
    hint_ok, hint_note = model.check_hint(opts)
    notes.append(hint_note)
    if hint_ok is False:  # a hint that breaks the model only misleads the search
        model.m.clear_hints()
    solver = model.solver(opts, limit)
    t1 = time.perf_counter()
    code = search(solver, model.m, opts.on_progress)
    searched = time.perf_counter() - t1
    elapsed = time.perf_counter() - t0
    word = solver.status_name(code)
    det = solver.response_proto.deterministic_time
    stopped = opts.deterministic and searched >= limit * opts.wall_factor * 0.99
    # the deterministic figure only: wall seconds are in solve_seconds
    when = (f"after {det:.2f} of its {_limit_words(opts, limit)}"
            if opts.deterministic else f"after {searched:.1f} s of search, limit "
            f"{_limit_words(opts, limit)}") + \
        ("; stopped by the wall-clock limit, so a rerun may differ" if stopped else "")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        # The check above is a CP-SAT solve that accepted the hint: a verified hint is a
        # solution of the model even when the search (presolve first) ends before it
        # registers one of its own.
        head = "FEASIBLE (the verified hint)" if hint_ok else word
        out = _fallback(initial,
                        f"{head}: the search registered no solution of its own {when}; "
                        f"{hint_note}; the PEFT schedule is returned", elapsed, "full", notes,
                        int(solver.best_objective_bound), initial.makespan_ns if hint_ok else None)
    else:
        out = _extract(model, solver, f"{word} {when}", elapsed, notes)
        if word == "OPTIMAL" and out.estimate_ns != out.objective_ns:
            out.status = (f"FEASIBLE {when}: the model's optimum {out.objective_ns:,} ns has "
                          f"free links and replays at {out.estimate_ns:,} ns under the "
                          "communication model")
        if out.estimate_ns > initial.estimate_ns:
            out = _fallback(initial,
                            f"{word} {when}; its best plan ({out.makespan_ns:,} ns) replays at "
                            f"{out.estimate_ns:,} ns under the communication model, the PEFT "
                            f"schedule at {initial.estimate_ns:,} ns, which is returned",
                            elapsed, "full", notes, out.bound_ns, out.objective_ns)
    return out, det


def _extract(model: _Model, solver: cp_model.CpSolver, status: str, elapsed: float,
             notes: list[str]) -> MergeScheduleResult:
    g, target = model.graph, model.target
    n = g.num_tasks
    core_of = [next(p for p, lit in model.x[t].items() if solver.boolean_value(lit))
               for t in range(n)]
    raw = [solver.value(model.start[t]) for t in range(n)]
    # ASAP retiming of the solver's order: never later, and canonical for materialization.
    # A store that the retiming moves onto another keeps the solver's (feasible) times.
    starts = retime(g, target, core_of, core_order(g, target, core_of, raw))
    dur = g.durations(core_of)
    stores = sorted((s + dur[t] - g.tasks[t].shared_ns, s + dur[t])
                    for t, s in enumerate(starts) if g.tasks[t].shared_ns)
    if any(b[0] < a[1] for a, b in itertools.pairwise(stores)):
        starts = raw
    result = MergeScheduleResult.build(
        g, target, core_of, starts, solver="cpsat", status=status,
        bound_ns=int(solver.best_objective_bound), objective_ns=int(solver.objective_value),
        solve_seconds=elapsed, model=model.model_name, notes=notes)
    errors = validate_schedule(g, target, result)
    if errors:
        raise RuntimeError(f"CP-SAT schedule failed validation: {errors[0]}")
    return result
