"""The layered stream (docs/pipeline.md §3, "The judge"): one stage whose cores are split by
layer ranges, messages between ranges sent at the end of their producer's iteration. On a
real CNN (benchmarks/cnns.py's MobileNet) the judge picks it by SIMULATED period, the
estimate predicts it, every inference is numerically right and CP-SAT's row simulates no
slower than the heuristic's."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path
from typing import NoReturn

import onnx
import pytest
from test_pipeline_judge import check_judge
from test_random_networks import network

from benchmarks.cnns import mobilenet, preact_resnet8
from raptor.driver import Compiled, compile_model
from raptor.passes.stream import RING, StreamInfo
from raptor.sim import SimOptions, Simulator
from raptor.solve import SolveOptions, _run_stream, report, solve
from raptor.solver.comm import replay
from raptor.solver.from_ir import GraphBuild, build_compute_graph
from raptor.solver.pipeline import (
    PipelineProblem,
    PipelineResult,
    build_problem,
    layered_stream,
    validate_pipeline,
)
from raptor.solver.pipeline import solve as pipeline_solve
from raptor.solver.pipeline.model import Partition, allocate
from raptor.solver.pipeline.solve import (
    ESTIMATED,
    LAYERED_CLOSE,
    _layered_estimate,
    cut_neighbours,
    defer_sends,
    equal_work_cuts,
    longest_window,
    ordered_sends,
    rank_by_posts,
    search_cuts,
)
from raptor.solver.pipeline.solve import _layered as realize_cuts
from raptor.solver.pipeline.stream import StreamDeadlock, stream_estimate
from raptor.target import load_target

TARGET = load_target("default")


@cache
def _mobilenet() -> Path:
    path = Path(tempfile.mkdtemp()) / "mobilenet.onnx"
    onnx.save(mobilenet(), path)
    return path


@cache
def _layered(model: Path) -> tuple[Compiled, GraphBuild, PipelineProblem, PipelineResult]:
    """The model compiled, its problem and its layered stream (read only)."""
    comp = compile_model(model, TARGET)
    build = build_compute_graph(comp.module.main(), TARGET)
    problem = build_problem(build.graph, TARGET, build=build)
    found = layered_stream(problem)
    assert found and found[0].core_range is not None
    return comp, build, problem, found[0]


def test_messages_between_ranges_leave_at_the_end_of_their_producers_iteration() -> None:
    _, build, problem, res = _layered(_mobilenet())
    assert res.core_range is not None
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
        # CP-SAT's row: its own layered candidate from its wave-model cut set (`wave`, the
        # DP's here, so the same placement as `layered`), which ranks first on a tie
        lay = cands["wave" if "wave" in cands else "layered"]
        assert lay["returned"], row["candidates"]
        assert lay["simulated_period_ns"] is not None
        assert abs(lay["estimated_period_ns"] - lay["simulated_period_ns"]) <= \
            0.05 * lay["simulated_period_ns"]
        # faster than every other simulated candidate, the latency schedule looped included
        for name, c in cands.items():
            if name not in ("layered", "wave") and c["simulated_period_ns"] is not None:
                assert c["simulated_period_ns"] > lay["simulated_period_ns"], (name, c)


def test_rank_by_posts_orders_each_steps_sends_by_when_their_receives_are_posted() -> None:
    _, build, _, res = _layered(_mobilenet())
    assert res.core_range is not None
    g, sch = build.graph, res.schedule
    rep = defer_sends(replay(g, TARGET, sch.core_of, sch.core_tasks, sch.start_ns), g,
                      sch.core_of, sch.core_tasks, res.core_range)
    est = stream_estimate(g, TARGET, sch.core_of, sch.start_ns, res.stage_of_task,
                          StreamInfo(), 8, RING, 1, rep)
    assert set(est.posted) == set(rep.sends)
    ranked = rank_by_posts(rep, est.posted)
    assert {k: at for k, (at, _) in ranked.sends.items()} == \
        {k: at for k, (at, _) in rep.sends.items()}  # every send stays at its step
    steps: dict[int, list[tuple[int, int]]] = {}
    for k, (at, _) in sorted(ranked.sends.items(), key=lambda x: x[1][1]):
        steps.setdefault(at, []).append(k)
    moved = 0
    for keys in steps.values():
        assert [est.posted[k] for k in keys] == sorted(est.posted[k] for k in keys)
        moved += [rep.sends[k][1] for k in keys] != sorted(rep.sends[k][1] for k in keys)
    assert moved > 0  # some step's sends were not already in that order
    order = {k: rank for k, (_, rank) in ranked.sends.items()}
    assert ordered_sends(rep, order).sends == ranked.sends


def test_a_broadcasting_group_alone_in_its_range_and_sends_by_posts_pay_on_preact_resnet8(
        ) -> None:
    """PreAct-ResNet-8's layout assemblies (one task each, sending a crop to each of up to
    256 conv lanes) stall the ranges that hold their receivers: the layered stream that
    tries them last or alone in a range, its sends ordered by posts, simulates within 5 %
    of its estimate. By the median interval (the period until the tenth session) it ran at
    172,523 ns, 89 % of the bound, against 253,277 for the best cut set without those
    moves; by the mean over the stream's second half it runs at 219,135 ns, 70 %."""
    model = Path(tempfile.mkdtemp()) / "preact_resnet8.onnx"
    onnx.save(preact_resnet8(), model)
    comp, build, problem, res = _layered(model)
    assert res.send_order is not None
    opts = SolveOptions(mode="pipeline", stream=8, allow_memory_overflow=True)
    run = _run_stream("layered", res, problem, build, comp, TARGET, opts)
    assert run.stream_estimate is not None
    sim = Simulator(run.scheduled, TARGET).timing(SimOptions(trace=False)).period_ns(1)
    assert abs(sim - run.stream_estimate.period_ns) <= 0.05 * sim
    if problem.period_bound(True) < 0.8 * sim:
        pytest.xfail(f"{sim:,} ns by the mean interval, under 80 % of the bound (issue #22)")


def test_the_cut_search_improves_on_its_start_and_never_returns_worse() -> None:
    """`search_cuts` from MobileNet's two equal-work ranges: within its budget it finds a
    faster cut set by the stream estimate, the estimate it returns is the cut set's own,
    and with no budget it returns its start."""
    _, _, problem, _ = _layered(_mobilenet())
    cuts = equal_work_cuts(problem, 2)
    part = allocate(problem.on_chip, cuts, True)
    assert part is not None
    res = realize_cuts(problem, part, True)
    assert res is not None
    start = (_layered_estimate(problem, res, 8), cuts, res)
    assert search_cuts(problem, start, True, 8, 0) == ([start], 0)
    trail, spent = search_cuts(problem, start, True, 8, 12)
    est, found, best = trail[-1]
    assert 0 < spent <= 12 and trail[0] == start
    assert [x[0] for x in trail] == sorted({x[0] for x in trail}, reverse=True)  # each step better
    assert est < start[0] and found != cuts and best.core_range is not None
    part = allocate(problem.on_chip, found, True)
    assert part is not None
    again = realize_cuts(problem, part, True)
    assert again is not None and _layered_estimate(problem, again, 8) == est
    assert all(n[0] == 0 and list(n) == sorted(set(n)) and n[-1] < problem.num_groups
               for n in cut_neighbours(problem, found))


def test_the_searchs_steps_before_its_best_are_candidates_returned_only_when_faster() -> None:
    """The cut search on a network of tests/test_random_networks.py's generator (conv,
    ReLU, max pool, concat, resize, depthwise) improves once: `layered_stream` returns its
    best (4 ranges), the step before it (3 ranges, estimated within `LAYERED_CLOSE`) and
    the best cut set it estimated and did not take, best estimate first, on distinct cut
    sets. The judge materializes them (`layered`, `layered2`, `layered3`) and returns one
    of them only if it simulates fastest. Why: the estimate before materialization
    misranked MTCNN R-net's last step, 33,555 ns simulated against the step before it at
    33,034; and R-net's search, which now takes no step, has in a cut set it did not take
    the base of its fastest skewed body (35,801 ns; of its best, 41,268). (The ResNet
    block was the example until the shared memory's arbitration,
    `raptor.noc.memory_rank`: its search now finds its best at once.)"""
    draws = iter([1, 8, 7, 696, 1, 4, 2, ["relu", "maxpool", "concat", "resize", "depthwise"]])
    model = Path(tempfile.mkdtemp()) / "random_net.onnx"
    onnx.save(network(lambda _strategy: next(draws)), model)
    _, _, problem, _ = _layered(model)
    found = layered_stream(problem)
    assert len(found) == 3
    ests = [_layered_estimate(problem, r, 8) for r in found]
    assert ests[0] < ests[1] <= LAYERED_CLOSE * ests[0]
    assert ests[0] <= ests[2] <= LAYERED_CLOSE * ests[0]
    assert any("did not take" in n for n in found[2].notes)
    assert len({r.notes[0] for r in found}) == 3  # distinct cut sets
    rep = report(solve(model, TARGET, SolveOptions(
        mode="pipeline", solver="pipeline", stream=8, sim=SimOptions(trace=False))))
    (row,) = rep["schedules"].values()
    cands = {c["candidate"]: c for c in row["candidates"]}
    assert cands["layered"]["estimated_period_ns"] and cands["layered2"]["estimated_period_ns"]
    sims = {n: c["simulated_period_ns"] for n, c in cands.items()
            if c["simulated_period_ns"] is not None}
    (returned,) = [n for n, c in cands.items() if c["returned"]]
    assert sims[returned] == min(sims.values()) == row["simulated_period_ns"]
    assert returned == "layered" or sims[returned] < sims.get("layered", sims[returned] + 1)


def test_a_cut_set_whose_deferred_sends_deadlock_is_no_candidate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A layered placement whose play deadlocks (deferred sends into a core that posts its
    receives inside its iterations) is skipped, not raised out of the solve: with every
    play deadlocking, `layered_stream` offers no candidate."""
    _, _, problem, _ = _layered(_mobilenet())

    def deadlocks(*_: object, **__: object) -> NoReturn:
        raise StreamDeadlock("the stream program's play deadlocked (a wait never met)")

    monkeypatch.setattr(pipeline_solve, "stream_estimate", deadlocks)
    assert layered_stream(problem) == []


def test_the_cut_sets_with_the_shortest_windows_by_range_are_estimated_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`layered_stream` estimates the `ESTIMATED` cut sets with the shortest longest
    windows, then those with the shortest longest windows of each range from its inputs
    (`longest_window` with the ranges: edges between ranges left out). On MobileNet the two
    fours differ. Why: a layered stream's deferred sends have a range's inputs there when
    its iteration starts; RegNetX's best cut set by estimate had the 7th whole window of
    9 and the shortest by range."""
    _, _, problem, res = _layered(_mobilenet())
    sch, P = res.schedule, problem.num_cores
    assert (longest_window(problem, sch.core_of, sch.core_tasks, [0] * P)
            == longest_window(problem, sch.core_of, sch.core_tasks))
    cuts_of: dict[int, tuple[int, ...]] = {}
    windows: dict[tuple[int, ...], tuple[int, int]] = {}
    before: dict[tuple[int, ...], tuple[int, int]] = {}  # the cut sets made before estimating
    estimated: list[tuple[int, ...]] = []
    made, estimate = pipeline_solve._layered, pipeline_solve._layered_estimate

    def realize(problem: PipelineProblem, part: Partition, replication: bool
                ) -> PipelineResult | None:
        out = made(problem, part, replication)
        if out is not None:
            s = out.schedule
            cuts_of[id(out)] = part.cuts
            windows.setdefault(part.cuts, (
                longest_window(problem, s.core_of, s.core_tasks),
                longest_window(problem, s.core_of, s.core_tasks, out.core_range)))
        return out

    def record(problem: PipelineProblem, res: PipelineResult, inferences: int) -> int | None:
        before.update(windows if not estimated else {})
        estimated.append(cuts_of[id(res)])
        return estimate(problem, res, inferences)

    monkeypatch.setattr(pipeline_solve, "_layered", realize)
    monkeypatch.setattr(pipeline_solve, "_layered_estimate", record)
    monkeypatch.setattr(pipeline_solve, "SEARCH_WORK", 0)
    assert layered_stream(problem)
    fours = [sorted(before, key=lambda c: before[c][k])[:ESTIMATED] for k in (0, 1)]
    assert set(fours[0]) != set(fours[1])
    assert estimated[:len(set(fours[0]) | set(fours[1]))] == list(
        dict.fromkeys([*fours[0], *fours[1]]))
