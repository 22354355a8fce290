"""The layered stream (docs/pipeline.md §3, "The judge"): one stage whose cores are split by
layer ranges, messages between ranges sent at the end of their producer's iteration. On a
real CNN (benchmarks/cnns.py's MobileNet) the judge picks it by SIMULATED period, the
estimate predicts it, every inference is numerically right and CP-SAT's row simulates no
slower than the heuristic's."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import onnx
from test_pipeline_judge import check_judge

from benchmarks.cnns import mobilenet
from raptor.driver import compile_model
from raptor.sim import SimOptions
from raptor.solve import SolveOptions, report, solve
from raptor.solver.comm import replay
from raptor.solver.from_ir import build_compute_graph
from raptor.solver.pipeline import build_problem, layered_stream, validate_pipeline
from raptor.solver.pipeline.solve import defer_sends
from raptor.target import load_target

TARGET = load_target("default")


@cache
def _mobilenet() -> Path:
    path = Path(tempfile.mkdtemp()) / "mobilenet.onnx"
    onnx.save(mobilenet(), path)
    return path


def test_messages_between_ranges_leave_at_the_end_of_their_producers_iteration() -> None:
    comp = compile_model(_mobilenet(), TARGET)
    build = build_compute_graph(comp.module.main(), TARGET)
    problem = build_problem(build.graph, TARGET, build=build)
    res = layered_stream(problem)
    assert res is not None and res.core_range is not None
    assert validate_pipeline(build.graph, TARGET, res, problem) == []
    ranges, sch, g = res.core_range, res.schedule, build.graph
    assert len(set(ranges) - {-1}) > 1
    cut = [problem.group_of[t] for t in range(g.num_tasks)]
    for c, ts in enumerate(sch.core_tasks):  # a core's tasks lie in its range's groups
        lo = min((cut[t] for t in ts), default=0)
        others = [cut[t] for k, us in enumerate(sch.core_tasks) if ranges[k] < ranges[c]
                  for t in us]
        assert all(x <= lo for x in others)
    rep = replay(g, TARGET, sch.core_of, sch.core_tasks, sch.start_ns)
    flow = defer_sends(rep, g, sch.core_of, sch.core_tasks, ranges)
    crossing = 0
    for (f, q), (after, _) in flow.sends.items():
        p = sch.core_of[g.fragments[f].producer]
        if ranges[p] != ranges[q]:
            crossing += 1
            assert after == sch.core_tasks[p][-1]
        else:
            assert (after, _) == rep.sends[(f, q)]
    assert crossing > 0


def test_a_real_cnn_returns_the_layered_stream_by_simulated_period() -> None:
    opts = SolveOptions(mode="pipeline", stream=8, workers=1, time_limit=5,
                        sim=SimOptions(trace=False))
    solved = solve(_mobilenet(), TARGET, opts)
    rep = report(solved)
    check_judge(rep)  # fastest simulated candidate per row; CP-SAT's no slower (simulated)
    for row in rep["schedules"].values():
        cands = {c["candidate"]: c for c in row["candidates"]}
        lay = cands["layered"]
        assert lay["returned"], row["candidates"]
        assert lay["simulated_period_ns"] is not None
        assert abs(lay["estimated_period_ns"] - lay["simulated_period_ns"]) <= \
            0.05 * lay["simulated_period_ns"]
        # faster than every other simulated candidate, the latency schedule looped included
        for name, c in cands.items():
            if name != "layered" and c["simulated_period_ns"] is not None:
                assert c["simulated_period_ns"] > lay["simulated_period_ns"], (name, c)
