"""CP-SAT pipeline model: the same period model as the DP (:mod:`.model`), stated directly.

Data → model → solve → extract. Variables and constraints (G groups, P cores, S = min(G, P)
possible stages):

* ``cut_g`` (g ≥ 1): a stage starts at group g; ``stage_g = stage_{g-1} + cut_g`` is the
  stage per group, monotone along the chain by construction, and ``in_{g,s}`` ⇔ stage_g = s.
  Stages are numbered in chain order and cores are only counted, never named, so neither
  stage labels nor cores carry symmetry (NOTES: explicit core-symmetry breaking only slowed
  CP-SAT down).
* ``cores_s`` ∈ [0, P] with a one-hot ``ncores_{s,k}``; a used stage (``stage_{G-1} ≥ s``)
  has ≥ 1 core, Σ cores ≤ P.
* per-core-count period bounds: ``ncores_{s,k} ⇒ k · period ≥ work_s``;
* replication (optional): one-hot ``rep_{g,r}`` over the factors where the group's bound
  drops; ``period ≥ bound_g(r)``; the stage's crossbars Σ_g crossbars_g · r_g ≤
  crossbars_per_core · cores_s, and ``in_{g,s} ⇒ cores_s ≥ r_g``;
* dependency path: ``start_g`` (first group of g's stage) and ``period ≥ path[start_g, g+1]``
  by an element constraint;
* shared memory: ``apart_{a,b}`` ⇔ some cut lies in (a, b] (linear: ≥ each cut, ≤ their
  sum) for every group pair with demand; ``period ≥ baseline + Σ demand · apart``;
* bounds: period ≥ the model's lower bound and, optionally, ≥ the exact DP's optimum (so
  CP-SAT proves as soon as it reaches it; ``dp_bound=False`` makes CP-SAT prove on its own,
  which the tests use to check DP = CP-SAT); period ≤ the hint's value.

The hint is complete (every variable) from a feasible partition, normally the heuristic's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from raptor.solver.pipeline.model import Partition, evaluate_partition
from raptor.solver.pipeline.problem import PipelineProblem
from raptor.solver.watch import SearchReport, watch

_STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
    cp_model.UNKNOWN: "UNKNOWN",
}


@dataclass(frozen=True)
class CpSatPipelineOptions:
    time_limit: float = 10.0
    num_workers: int = 2
    seed: int = 0
    deterministic_time: float | None = None
    dp_bound: bool = True
    fix_hint: bool = False
    """Fix every variable to the hint (checks that the hint is complete and feasible)."""
    on_progress: SearchReport | None = field(default=None, compare=False)
    """Told each incumbent and proven bound during the search (the live progress line)."""


@dataclass(frozen=True)
class CpSatOutcome:
    status: str
    cuts: tuple[int, ...] | None
    objective_ns: int | None
    bound_ns: int | None
    seconds: float
    variables: int
    constraints: int


def replication_options(problem: PipelineProblem, g: int, replication: bool) -> list[int]:
    """Factors worth considering for group g: 1, and every r whose bound is below r-1's."""
    group = problem.groups[g]
    if not replication or not group.units or group.max_replication <= 1:
        return [1]
    b = problem.bounds[g]
    return [1] + [r for r in range(2, group.max_replication + 1) if b[r - 1] < b[r - 2]]


def solve_cpsat(problem: PipelineProblem, replication: bool, hint: Partition,
                options: CpSatPipelineOptions, dp_value: int | None = None) -> CpSatOutcome:
    t0 = time.perf_counter()
    G, P = problem.num_groups, problem.num_cores
    cap = problem.target.crossbars_per_core
    S = min(G, P)
    hint_eval = evaluate_partition(problem, hint)
    if not hint_eval.feasible:
        raise ValueError(f"CP-SAT hint is not a feasible partition: {hint_eval.reason}")
    ub = hint_eval.period_ns
    lb = problem.lower_bound(replication)
    if dp_value is not None and options.dp_bound:
        lb = max(lb, dp_value)
    lb = min(lb, ub)
    path = problem.path
    work = [g.work for g in problem.groups]

    m = cp_model.CpModel()
    period = m.new_int_var(lb, ub, "period")
    cut = [m.new_constant(1)] + [m.new_bool_var(f"cut_{g}") for g in range(1, G)]
    stage = [m.new_constant(0)]
    for g in range(1, G):
        st = m.new_int_var(0, min(g, S - 1), f"stage_{g}")
        m.add(st == stage[g - 1] + cut[g])
        stage.append(st)
    member: list[list[cp_model.IntVar]] = []
    for g in range(G):
        top = min(g, S - 1)
        lits = [m.new_bool_var(f"in_{g}_{s}") for s in range(top + 1)]
        if g == 0:
            m.add(lits[0] == 1)
        else:
            m.add_map_domain(stage[g], lits, 0)
        member.append(lits)

    def x(g: int, s: int) -> cp_model.IntVar | int:
        return member[g][s] if s < len(member[g]) else 0

    used = [m.new_constant(1)] + [m.new_bool_var(f"used_{s}") for s in range(1, S)]
    for s in range(1, S):
        m.add(stage[G - 1] >= s).only_enforce_if(used[s])
        m.add(stage[G - 1] <= s - 1).only_enforce_if(used[s].Not())
    cores = [m.new_int_var(0, P, f"cores_{s}") for s in range(S)]
    ncores = []
    for s in range(S):
        lits = [m.new_bool_var(f"ncores_{s}_{k}") for k in range(P + 1)]
        m.add_map_domain(cores[s], lits, 0)
        ncores.append(lits)
        m.add(cores[s] >= 1).only_enforce_if(used[s])
        m.add(cores[s] == 0).only_enforce_if(used[s].Not())
    m.add(sum(cores) <= P)
    for s in range(S):
        w_s = sum(work[g] * x(g, s) for g in range(s, G))
        for k in range(1, P + 1):
            m.add(k * period >= w_s).only_enforce_if(ncores[s][k])

    # replication and crossbars
    rep_of: list[cp_model.LinearExprT] = []
    hint_lits: list[tuple[cp_model.IntVar, int]] = []
    for g in range(G):
        opts = replication_options(problem, g, replication)
        if len(opts) == 1:
            rep_of.append(1)
            continue
        lits = [m.new_bool_var(f"rep_{g}_{r}") for r in opts]
        m.add_exactly_one(lits)
        m.add(period >= sum(int(problem.bounds[g, r - 1]) * lit
                            for r, lit in zip(opts, lits, strict=True)))
        rep_of.append(sum(r * lit for r, lit in zip(opts, lits, strict=True)))
        hr = max(r for r in opts if r <= hint.replication[g])
        hint_lits += [(lit, int(r == hr)) for r, lit in zip(opts, lits, strict=True)]
    zvars: dict[tuple[int, int], cp_model.IntVar] = {}
    for s in range(S):
        terms: list[cp_model.LinearExprT] = []
        for g in range(s, G):
            if isinstance(rep_of[g], int):
                terms.append(problem.groups[g].crossbars * x(g, s))
                continue
            z = m.new_int_var(0, problem.groups[g].crossbars * problem.groups[g].max_replication,
                              f"crossbars_{g}_{s}")
            m.add(z == problem.groups[g].crossbars * rep_of[g]).only_enforce_if(member[g][s])
            m.add(z == 0).only_enforce_if(member[g][s].Not())
            m.add(cores[s] >= rep_of[g]).only_enforce_if(member[g][s])
            zvars[(g, s)] = z
            terms.append(z)
        if terms:
            m.add(sum(terms) <= cap * cores[s])

    # dependency path inside each stage
    start = [m.new_constant(0)]
    for g in range(1, G):
        first = m.new_int_var(0, g, f"start_{g}")
        m.add(first == g).only_enforce_if(cut[g])
        m.add(first == start[g - 1]).only_enforce_if(cut[g].Not())
        start.append(first)
    pvars: dict[int, cp_model.IntVar] = {}
    for g in range(G):
        vals = [int(path[j, g + 1]) for j in range(g + 1)]
        if max(vals) <= lb:
            continue
        pv = m.new_int_var(min(vals), max(vals), f"path_{g}")
        m.add_element(start[g], vals, pv)
        m.add(period >= pv)
        pvars[g] = pv

    # shared memory
    apart: dict[tuple[int, int], cp_model.IntVar] = {}
    demand = problem.pair_memory
    for a in range(G):
        for b in range(a + 1, G):
            if demand[a, b] <= 0:
                continue
            e = m.new_bool_var(f"apart_{a}_{b}")
            between = cut[a + 1:b + 1]
            for c in between:
                m.add_implication(c, e)
            m.add(e <= sum(between))
            apart[(a, b)] = e
    m.add(period >= problem.baseline_ns + sum(int(demand[a, b]) * e
                                              for (a, b), e in apart.items()))
    m.minimize(period)

    # complete hint
    hcut = set(hint.cuts)
    hstage, s_cur, hstart = [], -1, []
    for g in range(G):
        if g in hcut:
            s_cur += 1
            a_cur = g
        hstage.append(s_cur)
        hstart.append(a_cur)
    m.add_hint(period, ub)
    for g in range(1, G):
        m.add_hint(cut[g], int(g in hcut))
        m.add_hint(stage[g], hstage[g])
        m.add_hint(start[g], hstart[g])
    for g in range(G):
        for s, lit in enumerate(member[g]):
            m.add_hint(lit, int(hstage[g] == s))
    for s in range(S):
        k = hint.cores[s] if s < len(hint.cores) else 0
        m.add_hint(cores[s], k)
        for kk, lit in enumerate(ncores[s]):
            m.add_hint(lit, int(kk == k))
        if s >= 1:
            m.add_hint(used[s], int(s < len(hint.cores)))
    for lit, val in hint_lits:
        m.add_hint(lit, val)
    for (g, s), z in zvars.items():
        opts = replication_options(problem, g, replication)
        hr = max(r for r in opts if r <= hint.replication[g])
        m.add_hint(z, problem.groups[g].crossbars * hr if hstage[g] == s else 0)
    for g, pv in pvars.items():
        m.add_hint(pv, int(path[hstart[g], g + 1]))
    for (a, b), e in apart.items():
        m.add_hint(e, int(hstage[a] != hstage[b]))

    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = options.time_limit
    prm.num_workers = options.num_workers
    prm.random_seed = options.seed
    if options.deterministic_time is not None:
        prm.max_deterministic_time = options.deterministic_time
    prm.fix_variables_to_their_hinted_value = options.fix_hint
    code = solver.solve(m, watch(solver, options.on_progress))
    status = _STATUS.get(code, str(code))
    proto = m.proto
    n_vars, n_cons = len(proto.variables), len(proto.constraints)
    elapsed = time.perf_counter() - t0
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if code == cp_model.INFEASIBLE:
            status = (f"INFEASIBLE (no partition meets period ≤ {ub} with {P} cores x {cap} "
                      f"crossbars; the hint's own value is {ub}, so this is a model bug)")
        return CpSatOutcome(status, None, None, None, elapsed, n_vars, n_cons)
    cuts = tuple([0] + [g for g in range(1, G) if solver.boolean_value(cut[g])])
    return CpSatOutcome(status, cuts, int(solver.objective_value),
                        int(solver.best_objective_bound), elapsed, n_vars, n_cons)
