"""Pipeline mode: problem tables against direct computation, the exact DP against brute force
over every cut set, capacity errors, replication, the result type and its validator."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from raptor.driver import compile_model
from raptor.solver.costs import shared_read_ns, shared_write_ns
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.generate import random_layered_dag
from raptor.solver.graph import ComputeGraph
from raptor.solver.pipeline import (
    PipelineCapacityError,
    PipelineProblem,
    PipelineResult,
    build_problem,
    cone_stream,
    dp_pipeline,
    heuristic_pipeline,
    spread_stream,
    validate_pipeline,
)
from raptor.solver.pipeline.dp import exact_dp, wave_dp
from raptor.solver.pipeline.model import allocate, evaluate_partition, stage_kmin, stage_time
from raptor.solver.pipeline.problem import unit_bound
from raptor.solver.pipeline.solve import longest_window
from raptor.solver.schedule import MergeScheduleResult
from raptor.target import Target, load_target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def random_instance(seed: int, max_groups: int = 10) -> tuple[ComputeGraph, Target]:
    rng = random.Random(seed)
    g = random_layered_dag(rng.randint(6, 30), seed, width=rng.randint(2, 5), max_lanes=4,
                           tiles_per_batch=(0, 3), cost_range=(100, 3000),
                           bytes_range=(8, 512))
    t = Target(mesh_rows=rng.choice([1, 2]), mesh_cols=rng.choice([2, 3, 4]),
               crossbars_per_core=8, shared_access_bytes=rng.choice([8, 32]),
               shared_read_cycles=rng.choice([1, 5, 40]),
               shared_write_cycles=rng.choice([1, 5, 50]))
    return g, t


def problems(count: int, max_groups: int = 10) -> list[PipelineProblem]:
    out = []
    for seed in range(count):
        g, t = random_instance(seed)
        out.append(build_problem(g, t, max_groups=max_groups))
    return out


def brute_force(problem: PipelineProblem, replication: bool) -> int:
    """Least model period over every cut set: for each, the least T whose stages fit P cores
    (``stage_kmin``) with the cut's shared-memory service ≤ T."""
    G, P = problem.num_groups, problem.num_cores
    best = None
    for mask in range(1 << (G - 1)):
        cuts = (0, *(g for g in range(1, G) if mask >> (g - 1) & 1))
        ranges = list(zip(cuts, [*cuts[1:], G], strict=True))

        def fits(T: int, ranges: list[tuple[int, int]] = ranges) -> bool:
            return sum(stage_kmin(problem, j, i, T, replication)[0] for j, i in ranges) <= P

        lo = max(problem.memory(cuts), 1)
        hi = problem.total_work + lo
        if not fits(hi):
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
        best = lo if best is None else min(best, lo)
    assert best is not None
    return best


def test_path_and_memory_tables_match_direct_computation() -> None:
    for pr in problems(12):
        g, G = pr.graph, pr.num_groups
        for j in range(G):
            for i in range(j + 1, G + 1):
                inside = {t for grp in pr.groups[j:i] for t in grp.tasks}
                chain = {}
                for t in g.topo_order:
                    if t in inside:
                        chain[t] = g.tasks[t].cost_ns + max(
                            (chain[u] for u, _ in g.preds[t] if u in inside), default=0)
                assert pr.path[j, i] == max(chain.values())
        rng = random.Random(G)
        for _ in range(20):
            cuts = (0, *sorted(rng.sample(range(1, G), rng.randint(0, G - 1))))
            stage = np.searchsorted(np.array(cuts), np.array(pr.group_of), side="right") - 1
            want = pr.baseline_ns
            for p in pr.publications:
                later = [nb for v, nb in p.consumers if stage[v] > stage[p.producer]]
                if later:
                    want += shared_write_ns(pr.target, p.bytes)
                    want += sum(shared_read_ns(pr.target, nb) for nb in later)
            assert pr.memory(cuts) == want
            demand = pr.pair_memory
            pairs = sum(int(demand[a, b]) for a in range(G) for b in range(a + 1, G)
                        if stage[pr.groups[b].tasks[0]] > stage[pr.groups[a].tasks[0]])
            assert pr.baseline_ns + pairs == want


def test_unit_bound_is_a_lower_bound_and_exact_for_equal_lanes() -> None:
    rng = random.Random(3)
    for _ in range(200):
        costs = sorted((rng.randint(1, 9) for _ in range(rng.randint(1, 6))), reverse=True)
        for r in range(1, 4):
            best = min(max(sum(c for c, m in zip(costs, assign, strict=True) if m == k)
                           for k in range(r))
                       for assign in itertools.product(range(r), repeat=len(costs)))
            assert unit_bound(costs, r) <= best
            if len(set(costs)) == 1:
                assert unit_bound(costs, r) == best


@pytest.mark.parametrize("replication", [False, True])
def test_exact_dp_equals_brute_force(replication: bool) -> None:
    for pr in problems(16, max_groups=8):
        dp = exact_dp(pr, replication)
        assert dp.period_ns == brute_force(pr, replication)
        # core allocation of the DP's cuts reaches the same period, feasibly
        part = allocate(pr, dp.cuts, replication)
        assert part is not None
        ev = evaluate_partition(pr, part)
        assert ev.feasible and ev.period_ns == dp.period_ns


def wave_time(problem: PipelineProblem, j: int, i: int, k: int, replication: bool
              ) -> int | None:
    """Groups j..i-1 one after another, each on all k cores with its least replication
    reaching max(work / k, its best bound with up to k copies); None when their crossbars
    do not fit k cores."""
    total, xbars = 0, 0
    for g in problem.groups[j:i]:
        rs = range(1, min(k, problem.num_cores) + 1) if replication else range(1, 2)
        t = max(-(-g.work // k), min(int(problem.bounds[g.id, r - 1]) for r in rs))
        r = next(r for r in rs if problem.bounds[g.id, r - 1] <= t)
        total += t
        xbars += g.crossbars * r
    return total if xbars <= problem.target.crossbars_per_core * k else None


@pytest.mark.parametrize("replication", [False, True])
def test_wave_dp_equals_brute_force(replication: bool) -> None:
    for pr in problems(8, max_groups=5):
        G, P = pr.num_groups, pr.num_cores
        best = None
        for mask in range(1 << (G - 1)):
            cuts = (0, *(g for g in range(1, G) if mask >> (g - 1) & 1))
            ranges = list(zip(cuts, [*cuts[1:], G], strict=True))
            for cores in itertools.product(range(1, P + 1), repeat=len(ranges)):
                if sum(cores) > P:
                    continue
                times = [wave_time(pr, j, i, k, replication)
                         for (j, i), k in zip(ranges, cores, strict=True)]
                if None not in times:
                    worst = max(t for t in times if t is not None)
                    best = worst if best is None else min(best, worst)
        wave = wave_dp(pr, replication)
        assert wave.period_ns == best
        assert sum(wave.cores) <= P
        for (j, i), k in zip(zip(wave.cuts, [*wave.cuts[1:], G], strict=True), wave.cores,
                             strict=True):
            t = wave_time(pr, j, i, k, replication)
            assert t is not None and t <= wave.period_ns
            assert sum(g.crossbars * r for g, r in zip(pr.groups[j:i], wave.replication[j:i],
                                                        strict=True)) <= \
                pr.target.crossbars_per_core * k


def test_groups_keep_tile_users_together_and_follow_the_dependencies() -> None:
    for pr in problems(8):
        owner: dict[int, int] = {}
        for grp in pr.groups:
            for t in grp.tasks:
                for w in pr.graph.tasks[t].weights:
                    assert owner.setdefault(w, grp.id) == grp.id
        for e in pr.graph.edges:
            assert pr.group_of[e.src] <= pr.group_of[e.dst]


def test_capacity_errors_give_the_numbers() -> None:
    g = ComputeGraph()
    for k in range(5):
        g.add_task(f"t{k}", 100, range(2 * k, 2 * k + 2), batch=k)
    t = Target(mesh_rows=1, mesh_cols=2, crossbars_per_core=4)
    with pytest.raises(PipelineCapacityError, match=r"needs 10 crossbars .* 2 cores x 4 "
                                                    r"crossbars = 8"):
        build_problem(g.freeze(), t)
    big = ComputeGraph()
    big.add_task("wide", 100, range(5))
    with pytest.raises(PipelineCapacityError, match="needs 5 crossbar tiles at once but a "
                                                    "core has 4"):
        build_problem(big.freeze(), t)


def lane_chain(lanes: int = 8) -> ComputeGraph:
    """Two layers of ``lanes`` lanes: a heavy one on one crossbar tile, a light one."""
    g = ComputeGraph()
    a = [g.add_task(f"conv.l{k}", 1000, [0], batch=0, lane=k) for k in range(lanes)]
    b = [g.add_task(f"act.l{k}", 100, batch=1, lane=k) for k in range(lanes)]
    for u, v in zip(a, b, strict=True):
        g.add_edge(u, v, 64)
    return g.freeze()


def test_replication_spreads_a_bottleneck_tile_and_reports_its_cost() -> None:
    g = lane_chain()
    t = Target(mesh_rows=2, mesh_cols=2, crossbars_per_core=4)
    pr = build_problem(g, t)
    plain = heuristic_pipeline(pr, replication=False)
    rep = heuristic_pipeline(pr, replication=True)
    # without copies all eight 1000 ns lanes share the core holding tile 0
    assert plain.period_ns >= 8000 and plain.replicated == []
    assert rep.period_ns < plain.period_ns
    assert rep.replicated and rep.replicated[0].factor > 1
    assert rep.crossbars_used == 1 + rep.replicated[0].extra_crossbars
    for r in (plain, rep):
        assert validate_pipeline(g, t, r, pr) == []


def test_result_fields_and_validator_catch_corruption() -> None:
    g, t = random_instance(5)
    pr = build_problem(g, t, max_groups=10)
    res = dp_pipeline(pr)
    assert validate_pipeline(g, t, res, pr) == []
    assert res.status == "OPTIMAL" and res.bound_ns == res.objective_ns == res.model_period_ns
    assert res.period_ns == max([s.span_ns for s in res.stages] + [res.memory_service_ns])
    assert res.wave_period_ns >= res.period_ns or any(
        s.completion_ns < s.span_ns for s in res.stages)
    assert res.schedule.stage_of_core is not None
    back = MergeScheduleResult.from_json(res.schedule.to_json())
    assert back.stage_of_core == res.schedule.stage_of_core
    core = res.schedule.core_of
    pairs = {(core[b.producer], core[v]) for b in res.boundaries for v, _, _ in b.consumers}
    sync = len(pairs) * 2 * (shared_read_ns(t, 4) + shared_write_ns(t, 4))  # READY/FREE
    assert sum(b.store_ns + b.load_ns for b in res.boundaries) + res.baseline_memory_ns + \
        sync == res.memory_service_ns
    # a task moved onto a core of another stage
    t0 = next(t for t in range(g.num_tasks) if res.stage_of_task[t] == 0)
    if len(res.stages) > 1:
        bad = replace(res, stage_of_task=list(res.stage_of_task))
        bad.stage_of_task[t0] = 1
        assert any("not a core of its stage" in e for e in validate_pipeline(g, t, bad))
    # stages against a dependency
    e = g.edges[0]
    rev = replace(res, stage_of_task=list(res.stage_of_task))
    rev.stage_of_task[e.src] = len(res.stages)
    assert any("back to stage" in x for x in validate_pipeline(g, t, rev))
    # a misreported period and memory
    assert validate_pipeline(g, t, replace(res, period_ns=res.period_ns + 1))
    assert validate_pipeline(g, t, replace(res, memory_service_ns=res.memory_service_ns + 1),
                             pr)


def test_capacity_overflow_on_a_core_is_reported() -> None:
    g = ComputeGraph()
    for k in range(3):
        g.add_task(f"t{k}", 100, [k], batch=k)
    t = Target(mesh_rows=1, mesh_cols=2, crossbars_per_core=2)
    pr = build_problem(g.freeze(), t)
    res = heuristic_pipeline(pr)
    assert validate_pipeline(g, t, res) == []
    sched = res.schedule
    sched.core_of = [0, 0, 0]
    sched.core_tasks = [[0, 1, 2], []]
    errs = validate_pipeline(g, t, res)
    assert any("3 distinct crossbar tiles > capacity 2" in x for x in errs)


def test_stage_kmin_is_monotone_in_the_period() -> None:
    for pr in problems(6):
        G = pr.num_groups
        for T in (1000, 3000, 10_000, 100_000):
            for j in range(G):
                for i in range(j + 1, G + 1):
                    k1, _ = stage_kmin(pr, j, i, T, True)
                    k2, _ = stage_kmin(pr, j, i, 2 * T, True)
                    assert k2 <= k1


def test_cone_stream_is_one_valid_stage_keeping_producers_near() -> None:
    """The cone placement (docs/pipeline.md §3) validates on random problems and keeps
    every core within its limit; on the ResNet block its messages travel fewer byte-hops
    than the spread's (a row's column runs and their halo rows on neighbouring cores)."""
    for problem in problems(12):
        res = cone_stream(problem)
        if res is None:  # some task fits no core within twice the period bound
            continue
        assert validate_pipeline(problem.graph, problem.target, res, problem) == []
        assert len(res.stages) == 1
        loads = [sum(problem.graph.tasks[t].cost_ns for t in ts)
                 for ts in res.schedule.core_tasks]
        assert max(loads) <= 2 * problem.period_bound(True)  # the largest limit it tries
    target = load_target("default")
    build = build_compute_graph(
        compile_model(EXAMPLES / "resnet_block.onnx", target).module.main(), target)
    problem = build_problem(build.graph, target, build=build)
    cones = cone_stream(problem)
    assert cones is not None

    def byte_hops(res: PipelineResult) -> int:
        core = res.schedule.core_of
        return sum(e.bytes * int(problem.hops[core[e.src], core[e.dst]])
                   for e in build.graph.edges)

    assert byte_hops(cones) < byte_hops(spread_stream(problem)) / 2


@pytest.mark.parametrize("window", [False, True])
def test_spread_stream_is_one_valid_stage_within_its_model_time(window: bool) -> None:
    """A spread (one stage on every core, docs/pipeline.md §3) validates on random problems;
    its model time leaves the dependency path out, so it is never above the one-stage
    model time with it (raised to the packing bound, `packed_work`); by loads on the MLP
    every core stays within it (the period bound)."""
    for problem in problems(12):
        res = spread_stream(problem, window=window)
        assert validate_pipeline(problem.graph, problem.target, res, problem) == []
        assert len(res.stages) == 1
        G, P = problem.num_groups, problem.num_cores
        assert res.model_period_ns <= max(stage_time(problem, 0, G, P, True),
                                          problem.packed_work)
        sch = res.schedule
        assert longest_window(problem, sch.core_of, sch.core_tasks) > 0
    target = load_target("default")
    for name in ("lenet", "mlp"):
        build = build_compute_graph(
            compile_model(EXAMPLES / f"{name}.onnx", target).module.main(), target)
        problem = build_problem(build.graph, target, build=build)
        res = spread_stream(problem, window=window)
        loads = [sum(build.graph.tasks[t].cost_ns for t in ts) for ts in res.schedule.core_tasks]
        if name == "lenet":  # lumpy lanes: work / cores (21,011 ns) cannot be packed
            assert res.model_period_ns == problem.packed_work > problem.lower_bound(True)
            assert problem.packed_work <= max(loads)
        else:
            assert res.model_period_ns == problem.lower_bound(True)
            if not window:
                assert max(loads) <= res.model_period_ns
