"""The judge of pipeline mode (docs/pipeline.md §3, "The judge"), by SIMULATED period on
examples and random networks: every row returns its fastest simulated candidate, CP-SAT's
(optimal) row is never slower than the heuristic's, no row is slower than the latency
schedule looped, and the period lower bound stays below every simulated period."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_random_networks import networks, solve_proto

from raptor.sim import SimOptions
from raptor.solve import ESTIMATE_LOSES, SolveOptions, report, solve
from raptor.solver.pipeline.stream import steady_period
from raptor.target import Target, load_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OPTIONS = {"mode": "pipeline", "stream": 8, "workers": 1, "time_limit": 5}


def check_judge(rep: dict[str, Any]) -> None:
    rows = rep["schedules"]
    for row in rows.values():
        assert row["numerics"]["ok"], row["numerics"]
        sim = row["simulated_period_ns"]
        cands = row["candidates"]
        assert next(c for c in cands if c["candidate"] == "latency")["simulated_period_ns"]
        assert sum(c["returned"] for c in cands) == 1
        assert next(c for c in cands if c["returned"])["simulated_period_ns"] == sim
        for c in cands:  # a candidate not simulated could not beat the returned one
            if c["simulated_period_ns"] is None:
                assert c["floor_ns"] >= sim or c["estimated_period_ns"] > ESTIMATE_LOSES * sim
            else:  # nor would one the estimate left out (by over ESTIMATE_LOSES times)
                assert c["estimated_period_ns"] <= ESTIMATE_LOSES * c["simulated_period_ns"]
        assert sim <= row["latency_mode_ns"]  # never slower than the latency schedule looped
        assert rep["period_lower_bound_ns"] <= sim  # the bound holds for the long-run period
        assert row["efficiency"] == round(rep["period_lower_bound_ns"] / sim, 4)
    assert rows["cpsat"]["simulated_period_ns"] <= rows["pipeline"]["simulated_period_ns"]


@pytest.mark.parametrize("name", ["lenet", "resnet_block", "mlp"])
def test_rows_return_their_fastest_simulated_candidate(name: str) -> None:
    solved = solve(EXAMPLES / f"{name}.onnx", load_target("default"), SolveOptions(**OPTIONS))
    rep = report(solved)
    check_judge(rep)
    # the best row reaches 80 % of the period bound on these (issue #22); the ResNet block's
    # heuristic row is at 78 % by the mean interval, its CP-SAT row (its own partition) at 81 %
    assert max(row["efficiency"] for row in rep["schedules"].values()) >= 0.8, rep["schedules"]
    for row in rep["schedules"].values():
        if name != "resnet_block":  # its windows candidate simulates 10 % under the estimate
            for c in row["candidates"]:  # the estimate predicts every simulated candidate
                if c["simulated_period_ns"] is not None:
                    assert abs(c["estimated_period_ns"] - c["simulated_period_ns"]) <= \
                        0.05 * c["simulated_period_ns"], c


@pytest.mark.parametrize(("name", "units"), [
    ("lenet", 4), ("resnet_block", 4), ("torch_cnn_dynamo", 1), ("torch_cnn_dynamo", 4),
    ("mlp", 4),
])
def test_the_simulated_period_is_never_under_the_bound(name: str, units: int) -> None:
    """The period is the long-run one (`steady_period`): the ResNet block's stream at four
    MVM units completed every 20,824 ns over the second half of 8 inferences, under its
    bound of 25,600 ns, while a long stream's completions come every 25,600 ns; the MLP's
    spread at four units completed every 2,354 ns over 8 while its core 0 works 2,366 ns
    per inference, and torch_cnn's skewed body every 16,020 ns over 64 while its busiest
    core works 16,028 (the busiest core's work is the period's floor). (At one unit,
    lenet, resnet_block and mlp are checked by `check_judge` above.)"""
    target = dataclasses.replace(load_target("default"), mvm_units=units)
    solved = solve(EXAMPLES / f"{name}.onnx", target,
                   SolveOptions(**{**OPTIONS, "solver": "pipeline"}))
    rep = report(solved)
    for row in rep["schedules"].values():
        assert row["simulated_period_ns"] >= rep["period_lower_bound_ns"], row["candidates"]


@settings(max_examples=6, deadline=None, derandomize=True)
@given(networks(), st.sampled_from([1, 4]))
def test_random_networks_optimal_never_simulates_slower(proto: onnx.ModelProto,
                                                        units: int) -> None:
    """`check_judge` (the period lower bound under every simulated period included) at one
    and four MVM units."""
    solved = solve_proto(proto, Target(mvm_units=units),
                         SolveOptions(**OPTIONS, sim=SimOptions(trace=False)))
    check_judge(report(solved))


def test_the_period_is_never_under_the_busiest_cores_work() -> None:
    """`steady_period`'s floor: completions every 10 ns while a core works 12 ns per
    inference are the slack after that core running out, not the long run."""
    starts, ends = [0, 10, 20, 30, 40, 50], [15, 25, 35, 45, 55, 65]
    assert steady_period(starts, ends, 1) == 10
    assert steady_period(starts, ends, 1, busiest_ns=12) == 12
    assert steady_period(starts[:1], ends[:1], 1, busiest_ns=12) is None


def test_a_candidate_no_row_can_return_loses_its_trace() -> None:
    """`_drop_beaten_traces`: a simulated candidate keeps its trace while some row could
    still return it (`_judge`: fastest simulated, the earlier on a tie)."""
    from types import SimpleNamespace

    from raptor.sim import Trace
    from raptor.solve import _drop_beaten_traces

    def cand(sim: int | None) -> Any:
        trace = Trace(recorded=[(0, 0, 1, "x", "busy", "")])
        return SimpleNamespace(simulated_ns=sim, run=SimpleNamespace(
            sim=SimpleNamespace(trace=trace) if sim is not None else None))

    own, lat, tie, est, cp = cand(10), cand(10), cand(10), cand(None), cand(12)
    _drop_beaten_traces([[own, lat, tie, est], [cp, own, lat, tie, est]])
    kept = {name: c.run.sim.trace.spans != [] for name, c in
            [("own", own), ("lat", lat), ("tie", tie), ("cp", cp)]}
    # lat and tie lose to own on the tie in both rows; cp is slower than own in its row
    assert kept == {"own": True, "lat": False, "tie": False, "cp": False}
    fast = cand(9)  # the fastest, but only in the second row: own may still win the first
    first = cand(10)
    _drop_beaten_traces([[first, est], [fast, first]])
    assert first.run.sim.trace.spans and fast.run.sim.trace.spans


@pytest.mark.parametrize("simulate", [True, False])
def test_the_program_a_row_returns_is_verified(monkeypatch: pytest.MonkeyPatch,
                                               simulate: bool) -> None:
    """The judge verifies the candidates it simulates or returns (`_Candidate.verify`,
    deferred from the materialization): a program the verifier rejects is not simulated
    and its row is not ok, with or without the simulation."""
    import raptor.solve as solve_module

    monkeypatch.setattr(solve_module, "verify_module", lambda module: ["rejected"])
    solved = solve(EXAMPLES / "mlp.onnx", load_target("default"), SolveOptions(
        mode="pipeline", solver="pipeline", stream=2, workers=1, time_limit=1,
        simulate=simulate))
    (run,) = solved.runs
    assert run.scheduled_errors == ["rejected"] and run.sim is None and not run.ok
