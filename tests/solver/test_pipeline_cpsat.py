"""CP-SAT pipeline model against the exact DP and the heuristic: on random graphs CP-SAT
proves on its own (no DP bound) and then equals the DP; CP-SAT never exceeds the heuristic,
in the model and after packing; every example model the same, each result validated."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raptor.driver import compile_model
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.generate import random_layered_dag
from raptor.solver.graph import ComputeGraph
from raptor.solver.pipeline import (
    CpSatPipelineOptions,
    PipelineCapacityError,
    PipelineProblem,
    PipelineResult,
    build_problem,
    cpsat_pipeline,
    dp_pipeline,
    heuristic_pipeline,
    validate_pipeline,
)
from raptor.target import Target, load_target

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.onnx"))


@st.composite
def instances(draw: st.DrawFn) -> tuple[ComputeGraph, Target]:
    g = random_layered_dag(
        draw(st.integers(4, 36)), draw(st.integers(0, 10**6)), width=draw(st.integers(2, 6)),
        max_lanes=draw(st.integers(1, 5)), tiles_per_batch=(0, draw(st.integers(0, 3))),
        cost_range=(100, draw(st.integers(200, 5000))), bytes_range=(8, 1024),
        symmetric=draw(st.booleans()))
    t = Target(mesh_rows=draw(st.integers(1, 2)), mesh_cols=draw(st.integers(2, 4)),
               clock_ghz=draw(st.sampled_from([1.0, 1.5])),
               crossbars_per_core=draw(st.sampled_from([3, 4, 8])),
               shared_access_bytes=draw(st.sampled_from([8, 32])),
               shared_read_cycles=draw(st.sampled_from([1, 5, 40])),
               shared_write_cycles=draw(st.sampled_from([1, 5, 50])))
    return g, t


def check_three(pr: PipelineProblem, replication: bool, opts: CpSatPipelineOptions
                ) -> PipelineResult:
    g, t = pr.graph, pr.target
    heur = heuristic_pipeline(pr, replication)
    dp = dp_pipeline(pr, replication)
    cp = cpsat_pipeline(pr, replication, opts, initial=heur)
    for res in (heur, dp, cp):
        assert validate_pipeline(g, t, res, pr) == [], res.solver
        assert res.model_period_ns >= dp.objective_ns  # the DP is the model's optimum
        assert res.period_ns >= res.model_period_ns or res.period_ns >= dp.objective_ns
    assert cp.objective_ns is not None and cp.bound_ns is not None
    assert cp.objective_ns <= heur.model_period_ns
    assert cp.period_ns <= heur.period_ns
    assert cp.bound_ns <= dp.objective_ns <= cp.objective_ns
    if cp.status == "OPTIMAL":
        assert cp.objective_ns == dp.objective_ns
    return cp


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.booleans())
def test_cpsat_proves_alone_and_equals_the_dp(inst: tuple[ComputeGraph, Target],
                                             replication: bool) -> None:
    g, t = inst
    try:
        pr = build_problem(g, t, max_groups=12)
        heuristic_pipeline(pr, replication)
    except PipelineCapacityError:
        return
    opts = CpSatPipelineOptions(time_limit=20, num_workers=2, seed=1, dp_bound=False)
    assert check_three(pr, replication, opts).status == "OPTIMAL"


@pytest.mark.parametrize("model", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_dp_cpsat_heuristic(model: Path) -> None:
    target = load_target("default")
    build = build_compute_graph(compile_model(model, target).module.main(), target)
    pr = build_problem(build.graph, target, build=build)
    # CP-SAT on its own (no DP bound) proves every example
    opts = CpSatPipelineOptions(time_limit=60, num_workers=2, seed=0, dp_bound=False)
    optimum = {}
    for replication in (False, True):
        cp = check_three(pr, replication, opts)
        assert cp.status == "OPTIMAL"
        optimum[replication] = cp.objective_ns
    assert optimum[True] <= optimum[False]  # replication never hurts the model's optimum


def test_the_heuristic_hint_is_complete_and_feasible() -> None:
    """With every variable fixed to its hinted value CP-SAT still finds a solution: the hint
    names every variable and satisfies every constraint (it would be INFEASIBLE otherwise)."""
    from raptor.solver.pipeline.cpsat_model import solve_cpsat
    from raptor.solver.pipeline.model import evaluate_partition

    target = load_target("default")
    cases = []
    for name in ("lenet", "torch_cnn_dynamo", "yolo_neck"):
        build = build_compute_graph(
            compile_model(EXAMPLES[0].parent / f"{name}.onnx", target).module.main(), target)
        cases.append(build_problem(build.graph, target, build=build))
    for seed in range(6):
        g = random_layered_dag(30, seed, width=4, max_lanes=4, tiles_per_batch=(0, 2))
        cases.append(build_problem(g, Target(mesh_rows=2, mesh_cols=3), max_groups=10))
    fixed = CpSatPipelineOptions(time_limit=10, num_workers=1, dp_bound=False, fix_hint=True)
    for pr in cases:
        for replication in (False, True):
            hint = heuristic_pipeline(pr, replication).partition
            out = solve_cpsat(pr, replication, hint, fixed)
            assert out.status == "OPTIMAL", out.status
            assert out.objective_ns == evaluate_partition(pr, hint).period_ns


def test_cpsat_fallbacks_return_the_hint() -> None:
    from dataclasses import replace

    g = random_layered_dag(30, 1, width=4, max_lanes=4, tiles_per_batch=(0, 2))
    t = Target(mesh_rows=2, mesh_cols=3)
    pr = build_problem(g, t, max_groups=10)
    heur = heuristic_pipeline(pr)
    # no solution within the limit: the hint's realization, with the status
    late = cpsat_pipeline(pr, True, CpSatPipelineOptions(time_limit=1e-9, num_workers=1,
                                                         dp_bound=False), initial=heur)
    assert late.status == "UNKNOWN" and late.partition == heur.partition
    assert late.period_ns == heur.period_ns and validate_pipeline(g, t, late, pr) == []
    assert any("hint returned" in n for n in late.notes)
    # CP-SAT's partition realizing worse than the hint after packing keeps the hint's
    flattering = replace(heur, period_ns=1)
    kept = cpsat_pipeline(pr, True, CpSatPipelineOptions(time_limit=10, num_workers=1),
                          initial=flattering)
    assert kept.partition == heur.partition
    assert any("the hint's realization is kept" in n for n in kept.notes)
