"""CP-SAT pipeline models (docs/pipeline.md §3). :func:`solve_cpsat`: the same period model
as the DP (:mod:`.model`), stated directly; :class:`_Model` adds its variables and
constraints in the order §3 lists them. Stages are numbered in chain order and cores are
only counted, never named, so neither stage labels nor cores carry symmetry (NOTES:
explicit core-symmetry breaking only slowed CP-SAT down). The hint is complete (every
variable) from a feasible partition, normally the heuristic's. It proposes the CP-SAT
row's staged (shared-memory) candidate. :func:`solve_wave`: the wave model of a layered
stream (`dp.wave_dp`), whose optimum starts the row's layered candidates.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from raptor.solver.pipeline.dp import WaveResult, wave_tables
from raptor.solver.pipeline.model import Partition, evaluate_partition
from raptor.solver.pipeline.problem import PipelineProblem
from raptor.solver.watch import SearchReport, search


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
    """Minimize the period of ``problem``'s partitions, starting from the feasible ``hint``;
    ``dp_value`` (the exact DP's optimum) bounds the period below when ``options.dp_bound``.
    The cuts only when the search found a solution."""
    model = _Model(problem, replication, hint, options, dp_value)
    solver = _solver(options)
    code = search(solver, model.m, options.on_progress)
    status = solver.status_name(code)
    size = len(model.m.proto.variables), len(model.m.proto.constraints)
    if code == cp_model.INFEASIBLE:
        status = (f"INFEASIBLE (no partition meets period ≤ {model.ub} with "
                  f"{problem.num_cores} cores x {problem.target.crossbars_per_core} "
                  f"crossbars; the hint's own value is {model.ub}, so this is a model bug)")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpSatOutcome(status, None, None, None, *size)
    cuts = (0, *(g for g in range(1, len(model.cut)) if solver.boolean_value(model.cut[g])))
    return CpSatOutcome(status, cuts, int(solver.objective_value),
                        int(solver.best_objective_bound), *size)


def _solver(options: CpSatPipelineOptions) -> cp_model.CpSolver:
    """A CP-SAT solver with `options`' limits, workers and seed."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = options.time_limit
    prm.num_workers = options.num_workers
    prm.random_seed = options.seed
    if options.deterministic_time is not None:
        prm.max_deterministic_time = options.deterministic_time
    prm.fix_variables_to_their_hinted_value = options.fix_hint
    return solver


class _Model:
    """The CP-SAT model (module docstring) with its complete hint. Variables are created
    first, then the constraints, each in a fixed order."""

    def __init__(self, problem: PipelineProblem, replication: bool, hint: Partition,
                 options: CpSatPipelineOptions, dp_value: int | None) -> None:
        G, P = problem.num_groups, problem.num_cores
        hint_eval = evaluate_partition(problem, hint)
        if not hint_eval.feasible:
            raise ValueError(f"CP-SAT hint is not a feasible partition: {hint_eval.reason}")
        self.problem, self.hint, self.S = problem, hint, min(G, P)  # S: possible stages
        self.ub = hint_eval.period_ns
        lb = problem.lower_bound(replication)
        if dp_value is not None and options.dp_bound:
            lb = max(lb, dp_value)
        self.lb = min(lb, self.ub)
        self.rep_options = [replication_options(problem, g, replication) for g in range(G)]
        # the hint's factor per group, rounded down to one of its options
        self.hint_rep = [max(r for r in opts if r <= hint.replication[g])
                         for g, opts in enumerate(self.rep_options)]
        self.hint_stage = [bisect.bisect_right(hint.cuts, g) - 1 for g in range(G)]
        self.hint_start = [hint.cuts[s] for s in self.hint_stage]  # first group of its stage
        self.m = cp_model.CpModel()
        self.variables()
        self.stages()
        self.core_counts()
        self.replication()
        self.paths()
        self.shared_memory()
        self.m.minimize(self.period)
        self.add_hints()

    def variables(self) -> None:
        m, problem = self.m, self.problem
        G, P, S = problem.num_groups, problem.num_cores, self.S
        self.period = m.new_int_var(self.lb, self.ub, "period")
        self.cut = [m.new_constant(1)] + [m.new_bool_var(f"cut_{g}") for g in range(1, G)]
        self.stage = [m.new_constant(0)] + [m.new_int_var(0, min(g, S - 1), f"stage_{g}")
                                            for g in range(1, G)]
        self.member = [[m.new_bool_var(f"in_{g}_{s}") for s in range(min(g, S - 1) + 1)]
                       for g in range(G)]
        self.used = [m.new_constant(1)] + [m.new_bool_var(f"used_{s}") for s in range(1, S)]
        self.cores = [m.new_int_var(0, P, f"cores_{s}") for s in range(S)]
        self.ncores = [[m.new_bool_var(f"ncores_{s}_{k}") for k in range(P + 1)] for s in range(S)]
        # replication: one-hot factor literals where a group has options, and its factor
        self.rep = {g: [m.new_bool_var(f"rep_{g}_{r}") for r in opts]
                    for g, opts in enumerate(self.rep_options) if len(opts) > 1}
        self.rep_of: list[cp_model.LinearExprT] = [
            sum(r * lit for r, lit in zip(opts, self.rep[g], strict=True)) if g in self.rep else 1
            for g, opts in enumerate(self.rep_options)]
        # crossbars of a replicated group on its stage's cores
        grp = problem.groups
        self.xbars = {(g, s): m.new_int_var(0, grp[g].crossbars * grp[g].max_replication,
                                            f"crossbars_{g}_{s}")
                      for s in range(S) for g in range(s, G) if g in self.rep}
        self.start = [m.new_constant(0)] + [m.new_int_var(0, g, f"start_{g}") for g in range(1, G)]
        # the dependency path of each group from its stage's start, where it can bind
        self.path_vals = {g: vals for g in range(G)
                          if max(vals := problem.path[:g + 1, g + 1].tolist()) > self.lb}
        self.path = {g: m.new_int_var(min(v), max(v), f"path_{g}")
                     for g, v in self.path_vals.items()}
        self.apart = {(a, b): m.new_bool_var(f"apart_{a}_{b}")
                      for a, b in np.argwhere(np.triu(problem.pair_memory, 1) > 0).tolist()}

    def x(self, g: int, s: int) -> cp_model.IntVar | int:
        """Group g is in stage s (0 where it cannot be)."""
        return self.member[g][s] if s < len(self.member[g]) else 0

    def stages(self) -> None:
        """Stage per group from the cuts, and its one-hot membership."""
        m, cut, stage = self.m, self.cut, self.stage
        for g in range(1, len(stage)):
            m.add(stage[g] == stage[g - 1] + cut[g])
        for g, lits in enumerate(self.member):
            if g == 0:
                m.add(lits[0] == 1)
            else:
                m.add_map_domain(stage[g], lits, 0)

    def core_counts(self) -> None:
        """A used stage has ≥ 1 core, Σ cores ≤ P, and k cores carry the stage's work."""
        m, problem = self.m, self.problem
        G, P, S = problem.num_groups, problem.num_cores, self.S
        used, cores, ncores, period = self.used, self.cores, self.ncores, self.period
        last = self.stage[G - 1]
        for s in range(1, S):
            m.add(last >= s).only_enforce_if(used[s])
            m.add(last <= s - 1).only_enforce_if(used[s].Not())
        for s in range(S):
            m.add_map_domain(cores[s], ncores[s], 0)
            m.add(cores[s] >= 1).only_enforce_if(used[s])
            m.add(cores[s] == 0).only_enforce_if(used[s].Not())
        m.add(sum(cores) <= P)
        for s in range(S):
            w_s = sum(problem.groups[g].work * self.x(g, s) for g in range(s, G))
            for k in range(1, P + 1):
                m.add(k * period >= w_s).only_enforce_if(ncores[s][k])

    def replication(self) -> None:
        """Each replicated group's bound, and the crossbars of every stage's cores."""
        m, problem = self.m, self.problem
        for g, lits in self.rep.items():
            opts = self.rep_options[g]
            m.add_exactly_one(lits)
            m.add(self.period >= sum(int(problem.bounds[g, r - 1]) * lit
                                     for r, lit in zip(opts, lits, strict=True)))
        G, cap = problem.num_groups, problem.target.crossbars_per_core
        member, cores, rep_of = self.member, self.cores, self.rep_of
        for s in range(self.S):
            terms: list[cp_model.LinearExprT] = []
            for g in range(s, G):
                z = self.xbars.get((g, s))
                if z is None:
                    terms.append(problem.groups[g].crossbars * self.x(g, s))
                    continue
                m.add(z == problem.groups[g].crossbars * rep_of[g]).only_enforce_if(member[g][s])
                m.add(z == 0).only_enforce_if(member[g][s].Not())
                m.add(cores[s] >= rep_of[g]).only_enforce_if(member[g][s])
                terms.append(z)
            if terms:
                m.add(sum(terms) <= cap * cores[s])

    def paths(self) -> None:
        """The first group of each group's stage, and the dependency path from it."""
        m, cut, start = self.m, self.cut, self.start
        for g in range(1, len(start)):
            m.add(start[g] == g).only_enforce_if(cut[g])
            m.add(start[g] == start[g - 1]).only_enforce_if(cut[g].Not())
        for g, pv in self.path.items():
            m.add_element(start[g], self.path_vals[g], pv)
            m.add(self.period >= pv)

    def shared_memory(self) -> None:
        """``apart_{a,b}`` ⇔ a cut lies in (a, b]; the period covers the memory service."""
        m, problem = self.m, self.problem
        for (a, b), e in self.apart.items():
            between = self.cut[a + 1:b + 1]
            for c in between:
                m.add_implication(c, e)
            m.add(e <= sum(between))
        demand = problem.pair_memory
        m.add(self.period >= problem.baseline_ns + sum(int(demand[a, b]) * e
                                                       for (a, b), e in self.apart.items()))

    def add_hints(self) -> None:
        """Every variable's value in the hint's partition."""
        m, problem = self.m, self.problem
        hint, hstage, hstart = self.hint, self.hint_stage, self.hint_start
        hcut = set(hint.cuts)
        m.add_hint(self.period, self.ub)
        for g in range(1, problem.num_groups):
            m.add_hint(self.cut[g], int(g in hcut))
            m.add_hint(self.stage[g], hstage[g])
            m.add_hint(self.start[g], hstart[g])
        for g, lits in enumerate(self.member):
            for s, lit in enumerate(lits):
                m.add_hint(lit, int(hstage[g] == s))
        for s in range(self.S):
            k = hint.cores[s] if s < len(hint.cores) else 0
            m.add_hint(self.cores[s], k)
            for kk, lit in enumerate(self.ncores[s]):
                m.add_hint(lit, int(kk == k))
            if s >= 1:
                m.add_hint(self.used[s], int(s < len(hint.cores)))
        for g, lits in self.rep.items():
            for r, lit in zip(self.rep_options[g], lits, strict=True):
                m.add_hint(lit, int(r == self.hint_rep[g]))
        for (g, s), z in self.xbars.items():
            m.add_hint(z, problem.groups[g].crossbars * self.hint_rep[g] if hstage[g] == s else 0)
        for g, pv in self.path.items():
            m.add_hint(pv, int(problem.path[hstart[g], g + 1]))
        for (a, b), e in self.apart.items():
            m.add_hint(e, int(hstage[a] != hstage[b]))


@dataclass(frozen=True)
class WaveOutcome:
    status: str
    wave: WaveResult | None
    """CP-SAT's best solution (None: none found)."""
    bound_ns: int | None
    variables: int
    constraints: int


def solve_wave(problem: PipelineProblem, replication: bool, hint: WaveResult,
               options: CpSatPipelineOptions, granular: bool = False) -> WaveOutcome:
    """Minimize the wave model's period (`dp.wave_dp`: ranges of consecutive groups on
    disjoint core counts k, a range's time Σ_g max(ceil(work_g / k), bound_g(r_g(k))), its
    crossbars Σ crossbars_g · r_g(k) within k cores, the period the longest range time) with
    CP-SAT, from the complete hint ``hint`` (normally `wave_dp`'s optimum, whose value
    bounds the period below when ``options.dp_bound``; its value bounds it above).
    `granular`: the tables' granularity term (`dp.WaveTables`).

    Data → model → solve → extract, as the OR-Tools samples do. Per group g the one-hot
    ``cores_{g,k}`` (its range has k cores; only the k its crossbars fit and its time stays
    within the hint's period), equal between g - 1 and g unless ``cut_g``; the range's time
    and crossbars so far accumulate along the chain (``time_g``, ``xbars_g``, restarted at a
    cut), ``period ≥ time_g``, ``xbars_g ≤ cap · k_g``; Σ over range starts of k ≤ P."""
    G, P, cap = problem.num_groups, problem.num_cores, problem.target.crossbars_per_core
    tables = wave_tables(problem, replication, granular)
    ub = hint.period_ns
    lb = max(min(hint.period_ns, problem.lower_bound(replication)), 0)
    if options.dp_bound:
        lb = ub
    m = cp_model.CpModel()
    period = m.new_int_var(lb, ub, "period")
    cut = [m.new_constant(1)] + [m.new_bool_var(f"cut_{g}") for g in range(1, G)]
    k_of: list[cp_model.IntVar] = []
    lits: list[dict[int, cp_model.IntVar]] = []
    for g in range(G):
        ks = [k for k in range(1, P + 1) if tables.crossbars[k - 1, g] <= cap * k
              and tables.time[k - 1, g] <= ub]
        k_of.append(m.new_int_var_from_domain(cp_model.Domain.from_values(ks), f"k_{g}"))
        lits.append({k: m.new_bool_var(f"cores_{g}_{k}") for k in ks})
    time = [m.new_int_var(0, ub, f"time_{g}") for g in range(G)]
    xbars = [m.new_int_var(0, cap * P, f"xbars_{g}") for g in range(G)]
    start_k = [m.new_int_var(0, P, f"start_cores_{g}") for g in range(G)]
    for g in range(G):
        m.add_exactly_one(lits[g].values())
        m.add(k_of[g] == sum(k * lit for k, lit in lits[g].items()))
        own_t = sum(int(tables.time[k - 1, g]) * lit for k, lit in lits[g].items())
        own_x = sum(int(tables.crossbars[k - 1, g]) * lit for k, lit in lits[g].items())
        if g == 0:
            m.add(time[g] == own_t)
            m.add(xbars[g] == own_x)
        else:
            m.add(k_of[g] == k_of[g - 1]).only_enforce_if(cut[g].Not())
            m.add(time[g] == time[g - 1] + own_t).only_enforce_if(cut[g].Not())
            m.add(xbars[g] == xbars[g - 1] + own_x).only_enforce_if(cut[g].Not())
            m.add(time[g] == own_t).only_enforce_if(cut[g])
            m.add(xbars[g] == own_x).only_enforce_if(cut[g])
        m.add(xbars[g] <= cap * k_of[g])
        m.add(period >= time[g])
        m.add(start_k[g] == k_of[g]).only_enforce_if(cut[g])
        m.add(start_k[g] == 0).only_enforce_if(cut[g].Not())
    m.add(sum(start_k) <= P)
    m.minimize(period)
    # the hint: every variable's value in `hint`
    m.add_hint(period, ub)
    ends = [*hint.cuts[1:], G]
    for j, i, k in zip(hint.cuts, ends, hint.cores, strict=True):
        t = x = 0
        for g in range(j, i):
            t += int(tables.time[k - 1, g])
            x += int(tables.crossbars[k - 1, g])
            if g:
                m.add_hint(cut[g], int(g == j))
            m.add_hint(k_of[g], k)
            for kk, lit in lits[g].items():
                m.add_hint(lit, int(kk == k))
            m.add_hint(time[g], t)
            m.add_hint(xbars[g], x)
            m.add_hint(start_k[g], k if g == j else 0)

    solver = _solver(options)
    code = search(solver, m, options.on_progress)
    status = solver.status_name(code)
    size = len(m.proto.variables), len(m.proto.constraints)
    if code == cp_model.MODEL_INVALID:
        raise ValueError(f"invalid CP-SAT wave model: {m.validate()}")
    if code == cp_model.INFEASIBLE:
        status = (f"INFEASIBLE (no cut set meets period ≤ {ub} on {P} cores x {cap} "
                  f"crossbars, which the hint's ranges {list(hint.cuts)} on "
                  f"{list(hint.cores)} cores do: a model bug or a hint over the crossbars)")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return WaveOutcome(status, None, None, *size)
    cuts = tuple(g for g in range(G) if solver.boolean_value(cut[g]))
    cores = tuple(int(solver.value(k_of[g])) for g in cuts)
    copies = tuple(int(tables.copies[solver.value(k_of[g]) - 1, g]) for g in range(G))
    wave = WaveResult(int(solver.objective_value), cuts, cores, copies)
    return WaveOutcome(status, wave, int(solver.best_objective_bound), *size)
