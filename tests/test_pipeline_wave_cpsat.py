"""The CP-SAT wave model (`cpsat_model.solve_wave`) against `wave_dp`, with and without the
granularity term: on random small problems CP-SAT proves on its own (no DP bound) the DP's
optimum; wave_dp's solution is a complete, feasible hint; CP-SAT's solution meets its own
value under the model."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solver.test_pipeline_cpsat import instances

from raptor.solver.graph import ComputeGraph
from raptor.solver.pipeline import CpSatPipelineOptions, PipelineCapacityError, build_problem
from raptor.solver.pipeline.cpsat_model import solve_wave
from raptor.solver.pipeline.dp import WaveResult, wave_dp, wave_tables
from raptor.solver.pipeline.problem import PipelineProblem
from raptor.target import Target


def model_value(pr: PipelineProblem, wave: WaveResult, replication: bool, granular: bool
                ) -> int:
    """The longest range time of `wave`'s ranges and cores, each range's crossbars checked
    against its cores (the wave model, read from its tables)."""
    tables, G = wave_tables(pr, replication, granular), pr.num_groups
    assert sum(wave.cores) <= pr.num_cores
    worst = 0
    for j, i, k in zip(wave.cuts, [*wave.cuts[1:], G], wave.cores, strict=True):
        assert sum(int(tables.crossbars[k - 1, g]) for g in range(j, i)) <= \
            pr.target.crossbars_per_core * k
        worst = max(worst, sum(int(tables.time[k - 1, g]) for g in range(j, i)))
    return worst


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.booleans(), st.booleans())
def test_cpsat_proves_the_wave_dps_optimum(inst: tuple[ComputeGraph, Target],
                                           replication: bool, granular: bool) -> None:
    g, t = inst
    try:
        pr = build_problem(g, t, max_groups=12)
        dp = wave_dp(pr, replication, granular)
    except PipelineCapacityError:
        return
    assert model_value(pr, dp, replication, granular) <= dp.period_ns
    if granular:  # the term only adds to a group's time
        assert dp.period_ns >= wave_dp(pr, replication).period_ns
    # the hint alone, every variable fixed to it: complete and feasible
    fixed = solve_wave(pr, replication, dp, CpSatPipelineOptions(
        time_limit=10, num_workers=1, dp_bound=False, fix_hint=True), granular)
    assert fixed.status == "OPTIMAL", fixed.status
    assert fixed.wave is not None and fixed.wave.cuts == dp.cuts
    # on its own (no DP bound) CP-SAT proves the DP's optimum
    out = solve_wave(pr, replication, dp, CpSatPipelineOptions(
        time_limit=10, num_workers=1, seed=0, dp_bound=False), granular)
    assert out.status == "OPTIMAL", out.status
    assert out.wave is not None
    assert out.wave.period_ns == out.bound_ns == dp.period_ns
    assert model_value(pr, out.wave, replication, granular) == dp.period_ns
