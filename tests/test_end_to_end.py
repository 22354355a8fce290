"""Every example model through the whole pipeline with both schedulers: the scheduled IR
verifies, the simulation completes, its outputs equal the ONNX reference, its latency is at
least the critical-path bound, and the simulator's and the scheduler's cost models agree
exactly once contention, queueing and rendezvous waits are switched off."""

from __future__ import annotations

from pathlib import Path

import pytest

from raptor.driver import ir_inputs
from raptor.ir.parser import parse_module
from raptor.sim import SimOptions, simulate
from raptor.solve import Solved, SolveOptions, solve
from raptor.target import load_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MODELS = ["mlp", "lenet", "resnet_block", "mobilenet_block", "yolo_neck"]


@pytest.fixture(scope="module", params=MODELS)
def solved(request: pytest.FixtureRequest) -> Solved:
    opts = SolveOptions(solver="both", time_limit=2.0, workers=1, seed=0)
    return solve(EXAMPLES / f"{request.param}.onnx", load_target("default"), opts)


def test_both_schedules_validate_and_compute_the_reference(solved: Solved) -> None:
    assert [r.name for r in solved.runs] == ["peft", "cpsat"]
    for run in solved.runs:
        assert run.violations == [] and run.scheduled_errors == []
        assert run.sim is not None, run.sim_error
        assert run.numerics and all(ok for _, _, ok in run.numerics.values()), run.numerics
        assert run.sim.report.latency_ns >= solved.bounds.critical_path_ns
        assert run.estimate_ns >= solved.bounds.makespan_ns
    peft, cp = solved.runs
    assert peft.result.status == "HEURISTIC"
    # a short limit with one worker may end before CP-SAT reports any solution: it then
    # says so and returns the heuristic schedule
    assert cp.result.status in ("OPTIMAL", "FEASIBLE") or "PEFT schedule returned" in \
        cp.result.status
    assert cp.estimate_ns <= peft.estimate_ns
    assert cp.result.bound_ns is not None and cp.result.bound_ns <= cp.estimate_ns


def test_ideal_simulation_equals_the_estimate(solved: Solved) -> None:
    target = solved.target
    feeds = ir_inputs(solved.compiled.graph, solved.inputs)
    for run in solved.runs:
        ideal = simulate(run.scheduled, target, dict(feeds), SimOptions.ideal(trace=False))
        assert ideal.report.latency_ns == run.estimate_ns, run.name
        assert run.sim is not None and run.sim.report.latency_ns >= ideal.report.latency_ns


def test_scheduled_ir_round_trips(solved: Solved) -> None:
    text = solved.runs[0].scheduled.print()
    assert parse_module(text, "scheduled.spat").print() == text
