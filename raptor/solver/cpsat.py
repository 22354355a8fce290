"""Exact latency scheduling with OR-Tools CP-SAT (placement, order, mesh communication, capacity).

Model (shaped data → model → solve → extract), following the formulation measured to work
(docs NOTES "Latency model that worked"):

* one start per task, windows [top level, UB − bottom level] with UB = the PEFT makespan;
* a Boolean ``x[t,p]`` per candidate core, exactly one per task; optional intervals sharing the
  task's start; one NoOverlap per core;
* per edge u → v a ``same`` Boolean tied to the placements by clauses (NOTES: ~10× faster
  than comparing core indices), and the delay
  ``num·(s_v − e_u) ≥ den·(flit_cycles·(1 − same) + hop_cycles·(dr + dc))`` where ``dr``/``dc``
  bound |row_u − row_v| and |col_u − col_v| of the linear row/column expressions of the
  placements; with clock = num/den GHz this is exactly ``s_v ≥ e_u + transfer_ns`` (ceil
  rounding included) in O(candidates) per edge instead of O(candidates²);
* tile-presence literals ``y[w,p] ≥ x[t,p]`` and Σ_w y[w,p] ≤ crossbars_per_core, only on
  cores whose candidate tiles could exceed the capacity;
* objective: makespan; the PEFT schedule is given as a complete hint.

Lane symmetry. Tasks of one batch with equal cost, tiles, candidate cores and identical
predecessor and successor sets (same neighbours, same bytes) are interchangeable: swapping two
of them maps every schedule to one with the same makespan, whatever the mesh distances,
because the swap renames tasks, not cores. So ordering their starts (s_a ≤ s_b for a < b)
keeps an optimum. Breaking core symmetry instead (value precedence on core indices) would be
wrong here — cores differ by mesh position — and the NOTES measured it slower anyway.

Large graphs. When tasks × cores exceeds ``max_full_pairs``, each task only gets candidate
cores: its PEFT core, the PEFT cores of its neighbours and of its tiles, and the ``nearest``
closest cores to its PEFT core. The model name is then ``restricted-k`` and its bound only
holds for that restricted problem.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from raptor.solver.evaluate import lower_bounds, retime, validate_schedule
from raptor.solver.graph import ComputeGraph
from raptor.solver.mesh import nearest_cores
from raptor.solver.peft import check_capacity, peft_schedule
from raptor.solver.schedule import MergeScheduleResult
from raptor.target import Target

_STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
    cp_model.UNKNOWN: "UNKNOWN",
}


@dataclass(frozen=True)
class CpSatOptions:
    time_limit: float = 10.0
    num_workers: int = 2
    seed: int = 0
    max_full_pairs: int = 4096
    max_model_pairs: int = 40_000
    """Above this many (task, candidate core) pairs the model is not built at all: building
    it in Python takes longer than useful time limits (15k tasks: ~60 s), so the heuristic
    schedule is returned with the reason."""
    nearest: int = 4
    lane_symmetry: bool = True


def candidate_cores(graph: ComputeGraph, target: Target, initial: MergeScheduleResult,
                    options: CpSatOptions) -> tuple[list[list[int]], str]:
    """Candidate cores per task and the model name ("full" or "restricted-k")."""
    P = target.num_cores
    n = graph.num_tasks
    if n * P <= options.max_full_pairs:
        return [list(range(P)) for _ in range(n)], "full"
    tile_cores: dict[int, set[int]] = {}
    for t in range(n):
        for w in graph.tasks[t].weights:
            tile_cores.setdefault(w, set()).add(initial.core_of[t])
    nearest = {p: nearest_cores(target, p, options.nearest + 1) for p in set(initial.core_of)}
    cands: list[list[int]] = []
    for t in range(n):
        home = initial.core_of[t]
        s = set(nearest[home])
        s.update(initial.core_of[u] for u, _ in graph.preds[t])
        s.update(initial.core_of[v] for v, _ in graph.succs[t])
        for w in graph.tasks[t].weights:
            s.update(tile_cores[w])
        cands.append(sorted(s))
    return cands, f"restricted-{options.nearest}"


def symmetric_lane_classes(graph: ComputeGraph, cands: list[list[int]]) -> list[list[int]]:
    """Groups (size ≥ 2, ascending ids) of interchangeable lanes, see the module docstring."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for t, task in enumerate(graph.tasks):
        if task.batch < 0:
            continue
        key = (
            task.batch, task.cost_ns, task.weights, tuple(cands[t]),
            tuple(sorted(graph.preds[t])), tuple(sorted(graph.succs[t])),
        )
        groups.setdefault(key, []).append(t)
    return [g for g in groups.values() if len(g) > 1]


def cpsat_schedule(graph: ComputeGraph, target: Target, options: CpSatOptions | None = None,
                   initial: MergeScheduleResult | None = None) -> MergeScheduleResult:
    """Minimize single-inference latency; returns the PEFT schedule if no solution is found."""
    opts = options or CpSatOptions()
    t0 = time.perf_counter()
    graph.freeze()
    check_capacity(graph, target)
    if initial is None:
        initial = peft_schedule(graph, target)
    n, P = graph.num_tasks, target.num_cores
    cands, model_name = candidate_cores(graph, target, initial, opts)
    pairs = sum(len(c) for c in cands)
    if pairs > opts.max_model_pairs:
        return MergeScheduleResult.build(
            graph, target, initial.core_of, initial.start_ns, solver="cpsat",
            status=f"NOT RUN (the {model_name} model has {pairs} task-core pairs, more than "
                   f"max_model_pairs={opts.max_model_pairs}; PEFT schedule returned)",
            bound_ns=initial.bound_ns, solve_seconds=time.perf_counter() - t0,
            model=model_name)
    classes = symmetric_lane_classes(graph, cands) if opts.lane_symmetry else []

    # Hint: the initial schedule, with interchangeable lanes relabelled into start order.
    hint_core = list(initial.core_of)
    hint_start = list(initial.start_ns)
    for members in classes:
        slots = sorted((initial.start_ns[t], initial.core_of[t]) for t in members)
        for t, (s, p) in zip(members, slots, strict=True):
            hint_start[t], hint_core[t] = s, p

    costs = graph.costs()
    head = graph.top_levels()
    tail = graph.bottom_levels()
    ub = initial.makespan_ns
    lb = lower_bounds(graph, target).makespan_ns
    clock = target.clock_fraction
    rows, cols = target.mesh_rows, target.mesh_cols

    m = cp_model.CpModel()
    start = [m.new_int_var(head[t], max(head[t], ub - tail[t]), f"start_{t}") for t in range(n)]
    x: list[dict[int, cp_model.IntVar]] = []
    per_core: list[list[cp_model.IntervalVar]] = [[] for _ in range(P)]
    for t in range(n):
        lits = {p: m.new_bool_var(f"x_{t}_{p}") for p in cands[t]}
        m.add_exactly_one(lits.values())
        for p, lit in lits.items():
            per_core[p].append(
                m.new_optional_fixed_size_interval_var(start[t], costs[t], lit, f"iv_{t}_{p}")
            )
        x.append(lits)
    for ivs in per_core:
        if len(ivs) > 1:
            m.add_no_overlap(ivs)

    hints: list[tuple[cp_model.IntVar, int]] = []
    for e in graph.edges:
        u, v = e.src, e.dst
        xu, xv = x[u], x[v]
        shared = set(xu) & set(xv)
        same = m.new_bool_var(f"same_{u}_{v}")
        if not shared:
            m.add(same == 0)
        for p, lit in xu.items():
            if p in xv:
                m.add_bool_or([same.Not(), lit.Not(), xv[p]])
                m.add_bool_or([lit.Not(), xv[p].Not(), same])
            else:
                m.add_bool_or([same.Not(), lit.Not()])
        for p, lit in xv.items():
            if p not in xu:
                m.add_bool_or([same.Not(), lit.Not()])
        row_u = sum((p // cols) * lit for p, lit in xu.items())
        row_v = sum((p // cols) * lit for p, lit in xv.items())
        col_u = sum((p % cols) * lit for p, lit in xu.items())
        col_v = sum((p % cols) * lit for p, lit in xv.items())
        dr = m.new_int_var(0, rows - 1, f"dr_{u}_{v}")
        dc = m.new_int_var(0, cols - 1, f"dc_{u}_{v}")
        m.add(dr >= row_u - row_v)
        m.add(dr >= row_v - row_u)
        m.add(dc >= col_u - col_v)
        m.add(dc >= col_v - col_u)
        flit = -(-e.bytes // target.flit_bytes) * target.flit_cycles
        m.add(
            clock.numerator * (start[v] - start[u] - costs[u])
            >= clock.denominator * (flit * (1 - same) + target.hop_cycles * (dr + dc))
        )
        pu, pv = hint_core[u], hint_core[v]
        hints += [
            (same, int(pu == pv)),
            (dr, abs(pu // cols - pv // cols)),
            (dc, abs(pu % cols - pv % cols)),
        ]

    cap = target.crossbars_per_core
    for p in range(P):
        users: dict[int, list[int]] = {}
        for t in range(n):
            if p in x[t]:
                for w in graph.tasks[t].weights:
                    users.setdefault(w, []).append(t)
        if len(users) <= cap:
            continue
        present = []
        for w, ts in sorted(users.items()):
            y = m.new_bool_var(f"tile_{w}_{p}")
            for t in ts:
                m.add_implication(x[t][p], y)
            present.append(y)
            hints.append((y, int(any(hint_core[t] == p for t in ts))))
        m.add(sum(present) <= cap)

    for members in classes:
        for a, b in itertools.pairwise(members):
            m.add(start[a] <= start[b])

    makespan = m.new_int_var(lb, ub, "makespan")
    for t in range(n):
        if not graph.succs[t]:
            m.add(makespan >= start[t] + costs[t])
    m.minimize(makespan)

    for t in range(n):
        m.add_hint(start[t], hint_start[t])
        for p, lit in x[t].items():
            m.add_hint(lit, int(p == hint_core[t]))
    for var, val in hints:
        m.add_hint(var, val)
    m.add_hint(makespan, ub)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = opts.time_limit
    solver.parameters.num_workers = opts.num_workers
    solver.parameters.random_seed = opts.seed
    code = solver.solve(m)
    status = _STATUS.get(code, str(code))
    elapsed = time.perf_counter() - t0
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        fallback = MergeScheduleResult.build(
            graph, target, initial.core_of, initial.start_ns, solver="cpsat",
            status=f"{status} (no CP-SAT solution within {opts.time_limit:g} s; "
                   f"PEFT schedule returned)",
            bound_ns=initial.bound_ns, solve_seconds=elapsed, model=model_name,
        )
        return fallback
    core_of = [next(p for p, lit in x[t].items() if solver.boolean_value(lit)) for t in range(n)]
    raw_start = [solver.value(start[t]) for t in range(n)]
    topo_pos = {t: i for i, t in enumerate(graph.topo_order)}
    order: list[list[int]] = [[] for _ in range(P)]
    for t in sorted(range(n), key=lambda t: (raw_start[t], raw_start[t] + costs[t], topo_pos[t])):
        order[core_of[t]].append(t)
    # ASAP retiming of the solver's order: never later, and canonical for materialization.
    starts = retime(graph, target, core_of, order)
    notes = []
    if model_name != "full":
        notes.append(f"bound holds for the {model_name} candidate-core model only")
    result = MergeScheduleResult.build(
        graph, target, core_of, starts, solver="cpsat", status=status,
        bound_ns=int(solver.best_objective_bound), objective_ns=int(solver.objective_value),
        solve_seconds=elapsed, model=model_name, notes=notes,
    )
    errors = validate_schedule(graph, target, result)
    if errors:
        raise RuntimeError(f"CP-SAT schedule failed validation: {errors[0]}")
    return result
