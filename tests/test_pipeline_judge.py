"""The judge of pipeline mode (docs/pipeline.md §3, "The judge"): every row returns its
fastest simulated candidate, CP-SAT's row is never slower than the heuristic's, no row is
slower than the latency schedule looped, and the period lower bound stays below every
simulated period."""

from __future__ import annotations

from pathlib import Path

import pytest

from raptor.solve import SolveOptions, report, solve
from raptor.target import load_target

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["lenet", "resnet_block"])
def test_rows_return_their_fastest_simulated_candidate(name: str) -> None:
    solved = solve(EXAMPLES / f"{name}.onnx", load_target("default"),
                   SolveOptions(mode="pipeline", stream=6, workers=1, time_limit=5))
    rep = report(solved)
    rows = rep["schedules"]
    for row in rows.values():
        assert row["numerics"]["ok"]
        sim = row["simulated_period_ns"]
        cands = row["candidates"]
        assert [c["candidate"] for c in cands][-1] == "latency"
        assert sum(c["returned"] for c in cands) == 1
        returned = next(c for c in cands if c["returned"])
        assert returned["simulated_period_ns"] == sim
        for c in cands:  # a candidate not simulated could not beat the returned one
            assert (c["simulated_period_ns"] or c["estimated_period_ns"]) >= sim
        assert sim <= row["latency_mode_ns"]  # never slower than the latency schedule looped
        assert rep["period_lower_bound_ns"] <= sim
        assert row["efficiency"] == round(rep["period_lower_bound_ns"] / sim, 4)
    assert rows["cpsat"]["simulated_period_ns"] <= rows["pipeline"]["simulated_period_ns"]
