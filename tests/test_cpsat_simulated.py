"""CP-SAT against PEFT by *simulated* latency on random small CNNs with communication (the
8×8 mesh, rendezvous sends, link contention, the shared-memory queue): CP-SAT's schedule is
never slower than PEFT's in the simulator without the simulator having to overrule it, and
OPTIMAL only where the simulation equals its model's objective."""

from __future__ import annotations

import onnx
from hypothesis import given, settings

from raptor.sim import SimOptions
from raptor.solve import SolveOptions
from raptor.target import Target
from tests.test_random_networks import networks, solve_proto


@settings(max_examples=4, deadline=None, derandomize=True)
@given(networks())
def test_cpsat_simulates_no_slower_than_peft(proto: onnx.ModelProto) -> None:
    solved = solve_proto(proto, Target(), SolveOptions(solver="both", time_limit=2, workers=2,
                                                       sim=SimOptions(trace=False)))
    peft, cp = solved.runs
    assert peft.ok and cp.ok
    assert peft.sim is not None and cp.sim is not None
    assert cp.estimate_ns <= peft.estimate_ns
    assert cp.sim.report.latency_ns <= peft.sim.report.latency_ns
    assert "its schedule simulated at" not in cp.result.status  # the estimate judged right
    assert cp.estimate_ns >= solved.bounds.makespan_ns
    if cp.result.status.startswith("OPTIMAL"):
        assert cp.sim.report.latency_ns == cp.result.objective_ns
