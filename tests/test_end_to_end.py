"""Every example model through the whole pipeline with both schedulers: the scheduled IR
verifies, the simulation completes, its outputs equal the ONNX reference, its latency is at
least the critical-path bound, and the simulator's and the scheduler's cost models agree
exactly once contention, queueing and rendezvous waits are switched off."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from raptor.driver import ir_inputs
from raptor.ir.ops import ChannelSendOp
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
        b = solved.bounds  # without the memory queue, only the other bounds hold
        assert run.ideal_estimate_ns >= max(b.critical_path_ns, b.work_per_core_ns, b.fan_in_ns)
    peft, cp = solved.runs
    assert peft.result.status == "HEURISTIC"
    # the verified complete hint is CP-SAT's first solution, so it always reports one
    assert cp.result.status.split()[0] in ("OPTIMAL", "FEASIBLE"), cp.result.status
    assert cp.estimate_ns <= peft.estimate_ns
    assert cp.result.bound_ns is not None and cp.result.bound_ns <= cp.estimate_ns


def test_ideal_simulation_equals_the_estimate(solved: Solved) -> None:
    """One scheduled compute per instance: the ideal simulation reproduces the contention-free
    estimate to the nanosecond, and the default simulation the communication-aware estimate;
    the shipped (merged) program is never slower than either."""
    from raptor.passes.materialize import ScheduleView, materialize

    target = solved.target
    feeds = ir_inputs(solved.compiled.graph, solved.inputs)
    for run in solved.runs:
        res = run.result
        plain = materialize(solved.compiled.module, solved.build.projection,
                            solved.build.outputs, ScheduleView(res.core_of, res.start_ns,
                                                               res.end_ns), merge=False)
        ideal = simulate(plain, target, dict(feeds), SimOptions.ideal(trace=False))
        assert ideal.report.latency_ns == run.ideal_estimate_ns, run.name
        contended = simulate(plain, target, dict(feeds), SimOptions(trace=False))
        assert abs(contended.report.latency_ns - run.estimate_ns) <= 0.02 * run.estimate_ns
        shipped = simulate(run.scheduled, target, dict(feeds), SimOptions.ideal(trace=False))
        assert shipped.report.latency_ns <= run.ideal_estimate_ns
        assert run.ideal_ns == shipped.report.latency_ns  # solve's timing-only run agrees
        assert run.sim is not None and run.sim.report.latency_ns >= shipped.report.latency_ns
        assert run.sim.report.latency_ns <= 1.1 * run.estimate_ns


def test_scheduled_ir_round_trips(solved: Solved) -> None:
    text = solved.runs[0].scheduled.print()
    assert parse_module(text, "scheduled.spat").print() == text


@pytest.mark.parametrize("name", ["lenet", "resnet_block", "yolo_neck"])
def test_consecutive_lanes_merge_into_scheduled_batches(name: str) -> None:
    """Everything on one core, in program order: back-to-back lanes of a graph batch run as
    one spat.scheduled_compute_batch that gathers their inputs once; the program verifies,
    computes the reference, and its ideal time never exceeds the unmerged estimate."""
    from raptor.driver import compile_model
    from raptor.frontend.oracle import compare, run_reference
    from raptor.ir.ops import LaneResultOp, ScheduledComputeBatchOp
    from raptor.ir.verifier import verify_module
    from raptor.passes.materialize import ScheduleView, materialize
    from raptor.solver.evaluate import retime
    from raptor.solver.from_ir import build_compute_graph

    target = load_target("default")
    path = EXAMPLES / f"{name}.onnx"
    comp = compile_model(path, target)
    build = build_compute_graph(comp.module.main(), target)
    g = build.graph
    order = list(range(g.num_tasks))  # instance ids follow program order: topological
    start = retime(g, target, [0] * g.num_tasks, [order])
    dur = g.durations([0] * g.num_tasks)  # with its local reads' extra, as retime's
    end = [start[t] + dur[t] for t in order]
    view = ScheduleView([0] * g.num_tasks, start, end)
    merged = materialize(comp.module, build.projection, build.outputs, view)
    plain = materialize(comp.module, build.projection, build.outputs, view, merge=False)
    assert verify_module(merged) == []
    batches = [op for op in merged.walk() if isinstance(op, ScheduledComputeBatchOp)]
    assert batches and any(isinstance(op, LaneResultOp) for op in merged.walk())
    assert not any(isinstance(op, ScheduledComputeBatchOp) for op in plain.walk())
    assert parse_module(merged.print()).print() == merged.print()
    with np.load(EXAMPLES / f"{name}.npz") as f:
        inputs = {k: np.asarray(f[k]) for k in f.files}
    feeds = ir_inputs(comp.graph, inputs)
    ideal_plain = simulate(plain, target, dict(feeds), SimOptions.ideal(trace=False))
    ideal_merged = simulate(merged, target, dict(feeds), SimOptions.ideal(trace=False))
    assert ideal_plain.report.latency_ns == max(end)
    assert ideal_merged.report.latency_ns <= max(end)
    got = {v.name: o for v, o in zip(comp.graph.outputs, ideal_merged.outputs, strict=True)}
    checks = compare(got, run_reference(path, inputs), 1e-4, 1e-5)
    assert all(ok for _, _, ok in checks.values()), checks


def test_dense_values_travel_as_regions() -> None:
    """A consumer lane of a dense (reassembled) value receives only the rows it reads: the
    producer sends a region of its value, never the whole tensor to every lane."""
    from raptor.ir.ops import ChannelSendOp

    solved = solve(EXAMPLES / "mobilenet_block.onnx", load_target("default"),
                   SolveOptions(solver="peft", simulate=False))
    run = solved.runs[0]
    sends = [op for op in run.scheduled.walk() if isinstance(op, ChannelSendOp)]
    regions = [op for op in sends if op.message is not None]
    assert regions, "dense consumers should receive regions"
    for op in regions:
        assert op.message is not None and op.message.numel < op.value.type.numel  # type: ignore[union-attr]


def _untimed(obj: object) -> object:
    """A report without its wall-clock figures (fields and the seconds quoted in texts)."""
    import re

    timing = {"seconds", "solve_seconds", "wall_time_s", "compile_time_s"}
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if k not in timing}
    if isinstance(obj, list):
        return [_untimed(v) for v in obj]
    if isinstance(obj, str):
        return re.sub(r"\d+(\.\d+)? s\b", "<t> s", obj)
    return obj


def test_identical_reruns() -> None:
    """The same solve twice gives the same report apart from timing: PEFT is deterministic,
    CP-SAT searches interleaved under a deterministic limit (also with another worker
    count), materialization and the simulator are deterministic."""
    from raptor.solve import report

    target = load_target("default")
    reps = [report(solve(EXAMPLES / "resnet_block.onnx", target,
                         SolveOptions(solver="both", time_limit=2.0, workers=w, seed=0,
                                      sim=SimOptions(trace=False))))
            for w in (2, 2, 1)]
    assert _untimed(reps[0]) == _untimed(reps[1]) == _untimed(reps[2])


def test_routes_chosen_by_the_replay_are_the_simulators() -> None:
    """Under ``routing = "xy-yx"`` the program records the routes the replay chose (the
    sends' ``yx``), the simulation follows them to the estimate's nanosecond, and the same
    program with every route XY runs otherwise."""
    target = dataclasses.replace(load_target("default"), routing="xy-yx")
    solved = solve(EXAMPLES / "resnet_block.onnx", target, SolveOptions(solver="peft"))
    (run,) = solved.runs
    assert run.sim is not None and run.flow is not None and run.numerics
    sends = [op for op in run.scheduled.walk() if isinstance(op, ChannelSendOp)]
    assert 0 < sum(op.yx for op in sends) == len(run.flow.yx) < len(sends)
    assert run.sim.report.latency_ns == run.estimate_ns
    text = run.scheduled.print()
    assert " yx : " in text and parse_module(text, "scheduled.spat").print() == text
    for op in sends:
        op.yx = False
    feeds = ir_inputs(solved.compiled.graph, solved.inputs)
    xy = simulate(run.scheduled, target, feeds, SimOptions(trace=False))
    assert xy.report.latency_ns != run.estimate_ns
