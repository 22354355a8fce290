"""The spec's pipeline heuristic: every selection guard and every fallback fires, the
constructive packer's recovery attempts, the placement ranking's 1 % rule."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from raptor.solver.generate import random_layered_dag
from raptor.solver.graph import ComputeGraph
from raptor.solver.pipeline import (
    Partition,
    PipelineCapacityError,
    build_problem,
    heuristic_pipeline,
    validate_pipeline,
)
from raptor.solver.pipeline.heuristic import Candidate, Figures, guard_failures, select
from raptor.solver.pipeline.pack import PackFailure, StagePacking, pack_stage
from raptor.solver.pipeline.realize import Placement, better, realize
from raptor.target import Target


def instance(seed: int) -> tuple[ComputeGraph, Target]:
    rng = random.Random(seed)
    g = random_layered_dag(rng.randint(6, 40), seed, width=rng.randint(2, 6), max_lanes=4,
                           tiles_per_batch=(0, 3), cost_range=(100, 3000),
                           bytes_range=(8, 512))
    t = Target(mesh_rows=rng.choice([1, 2]), mesh_cols=rng.choice([2, 3, 4]),
               crossbars_per_core=rng.choice([3, 4, 8]),
               shared_access_bytes=rng.choice([8, 32]),
               shared_read_cycles=rng.choice([1, 5, 40]),
               shared_write_cycles=rng.choice([1, 5, 50]))
    return g, t


# -- guards (figures: period = max(span, memory); span = max(load, path)) ----------------------

FALLBACK = Figures(period=100, memory=10, max_span=100, max_load=100)


@pytest.mark.parametrize(("fallback", "cand", "sharing", "fires"), [
    (FALLBACK, FALLBACK, False, ["bottleneck"]),
    # shorter period, but memory + span grows (20 + 90 > 10 + 100... 30 + 90 = 120 > 110)
    (FALLBACK, Figures(90, 30, 90, 60), False, ["memory+span"]),
    # memory + per-core work grows: the fallback's span is a dependency path over light cores
    (Figures(100, 10, 100, 50), Figures(80, 25, 80, 80), False, ["memory+work"]),
    # a sharing-aware alternative may not lengthen the maximum stage span...
    (Figures(100, 100, 60, 60), Figures(90, 20, 90, 40), True, ["sharing-span"]),
    # ... which any other candidate may
    (Figures(100, 100, 60, 60), Figures(90, 20, 90, 40), False, []),
])
def test_each_guard_fires_alone(fallback: Figures, cand: Figures, sharing: bool,
                                fires: list[str]) -> None:
    assert guard_failures(cand, fallback, sharing) == fires


def test_selection_keeps_the_fallback_unless_a_candidate_passes_every_guard() -> None:
    cands = [Candidate("a", Figures(90, 30, 90, 60), False),
             Candidate("b", None, False, "no room"),
             Candidate("c", FALLBACK, False)]
    k, notes = select(FALLBACK, cands)
    assert k == -1 and notes[-1] == "selected: phase-1 winner (fallback)"
    assert any("b: failed capacity verification (no room)" in n for n in notes)
    assert any("a: period 90 kept out by guard(s) memory+span" in n for n in notes)
    cands.append(Candidate("d", Figures(95, 5, 95, 95), False))
    cands.append(Candidate("e", Figures(92, 8, 92, 92), False))
    k, notes = select(FALLBACK, cands)
    assert k == 4 and notes[-1] == "selected: e"


def test_selection_without_a_fallback() -> None:
    cands = [Candidate("a", Figures(90, 30, 90, 60), False),
             Candidate("b", Figures(120, 5, 120, 120), True)]
    k, notes = select(None, cands)
    assert k == 0 and "chosen without guards" in notes[0]
    assert select(None, [Candidate("x", None, False, "full")])[0] == -2


def test_guards_and_fallbacks_fire_on_real_runs() -> None:
    """Random layered graphs on which the heuristic meets each situation (found by search;
    together they cover every guard, both selection outcomes and every recovery)."""
    seen: set[str] = set()
    events = {
        "bottleneck": "guard(s) bottleneck", "memory+span": "memory+span",
        "memory+work": "memory+work", "sharing-span": "sharing-span",
        "alternative selected": "selected: alternative",
        "fallback kept": "selected: phase-1 winner (fallback)",
        "phase-1 winner failed": "phase-1 winner failed capacity verification",
        "candidate failed capacity": ": failed capacity verification (",
        "packer best-fit attempt": "packed by the best-fit attempt",
    }
    for seed, replication in [(0, False), (4, True), (6, True), (7, True), (16, False),
                              (142, False)]:
        g, t = instance(seed)
        pr = build_problem(g, t, max_groups=12)
        res = heuristic_pipeline(pr, replication)
        assert validate_pipeline(g, t, res, pr) == []
        text = " | ".join(res.notes)
        seen |= {name for name, pat in events.items() if pat in text}
    assert seen == set(events)


def test_no_partition_passes_capacity_verification() -> None:
    g, t = instance(45)
    pr = build_problem(g, t, max_groups=12)
    with pytest.raises(PipelineCapacityError, match="bounded search, not a proof"):
        heuristic_pipeline(pr, replication=False)


# -- the constructive packer -----------------------------------------------------------------


def units_problem(cap: int, cores: int, spec: list[tuple[int, int]]) -> tuple:
    """One task per (tiles, cost) unit, each with its own tiles, in one group."""
    g = ComputeGraph()
    tile = 0
    for k, (size, cost) in enumerate(spec):
        g.add_task(f"u{k}", cost, range(tile, tile + size), batch=k)
        tile += size
    t = Target(mesh_rows=1, mesh_cols=cores, crossbars_per_core=cap)
    pr = build_problem(g.freeze(), t, max_groups=1)
    return pr, cores


@pytest.mark.parametrize(("cap", "cores", "spec", "attempt"), [
    (3, 3, [(3, 70), (2, 30), (1, 20), (1, 70)], "first"),
    # load-balanced opening strands the 3-tile unit; best fit packs the 2-tile units together
    (3, 3, [(2, 30), (3, 10), (1, 20), (3, 40)], "best-fit"),
    (3, 4, [(3, 40), (2, 80), (2, 30), (1, 80), (1, 90), (1, 50), (2, 40)], "reverse"),
    (5, 3, [(2, 70), (1, 10), (3, 90), (4, 10), (2, 10), (3, 80)], "deviation 2"),
])
def test_packer_recovery_attempts(cap: int, cores: int, spec: list[tuple[int, int]],
                                  attempt: str) -> None:
    pr, k = units_problem(cap, cores, spec)
    res = pack_stage(pr, 0, pr.num_groups, k, [1] * pr.num_groups)
    assert isinstance(res, StagePacking) and res.attempt == attempt
    for tiles in res.tiles:
        assert len(tiles) <= cap
    for t, c in res.core_of.items():
        assert pr.graph.tasks[t].weights <= res.tiles[c]


def test_packer_failure_is_a_bounded_diagnostic() -> None:
    pr, k = units_problem(4, 4, [(3, 30), (2, 10), (3, 90), (4, 20), (3, 90), (1, 70)])
    res = pack_stage(pr, 0, pr.num_groups, k, [1] * pr.num_groups)
    assert isinstance(res, PackFailure)
    assert "onto 4 cores x 4 crossbars" in res.message and "not a proof" in res.message


def test_realize_drops_replication_then_restarts_from_lower_bounds() -> None:
    g = ComputeGraph()
    for lane in range(2):
        g.add_task(f"a{lane}", 100, [0, 1], batch=0, lane=lane)
        g.add_task(f"b{lane}", 100, [2, 3], batch=1, lane=lane)
    t = Target(mesh_rows=1, mesh_cols=2, crossbars_per_core=2)
    pr = build_problem(g.freeze(), t)
    # two copies of either group's tiles fill both cores, in every packing order: the
    # copies are dropped and each group gets one core
    pl = realize(pr, Partition((0,), (2,), (2, 2)), replication=True)
    assert isinstance(pl, Placement)
    assert any("replication dropped" in n for n in pl.recovery)
    g2 = ComputeGraph()
    g2.add_task("x", 100, [0, 1], batch=0)
    g2.add_task("y", 100, [2, 3], batch=1)
    g2.add_task("z", 100, [4], batch=2)
    g2.add_edge(0, 2, 8)
    g2.add_edge(1, 2, 8)
    t2 = Target(mesh_rows=1, mesh_cols=4, crossbars_per_core=3)
    pr2 = build_problem(g2.freeze(), t2)
    cut = pr2.group_of[2]
    # one core cannot hold x's and y's tiles; the crossbar lower bounds give that stage two
    pl2 = realize(pr2, Partition((0, cut), (1, 3), (1,) * pr2.num_groups), replication=False)
    assert isinstance(pl2, Placement)
    assert any("budgets restarted from lower bounds" in n for n in pl2.recovery)
    assert pl2.partition.cores[0] >= 2


# -- placement ranking -------------------------------------------------------------------------


def test_placement_ranking_within_one_percent_of_demand() -> None:
    g, t = instance(4)
    pr = build_problem(g, t, max_groups=12)
    part = heuristic_pipeline(pr).partition
    base = realize(pr, part, True)
    assert isinstance(base, Placement)
    slower = replace(base, stage_load=[x + 50 for x in base.stage_load],
                     stage_path=list(base.stage_path))
    # demand 0.5 % higher but a shorter stage span: the span breaks the tie
    a = replace(base, demand=int(base.demand * 1.005))
    assert better(a, slower) and not better(slower, a)
    # demand 2 % lower wins even with a longer span
    b = replace(slower, demand=int(base.demand * 0.98))
    assert better(b, base) and not better(base, b)
    # equal demand and span: stage completion decides
    c = replace(base, stage_completion=[x + 1 for x in base.stage_completion])
    assert better(base, c) and not better(c, base)
