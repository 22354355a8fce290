"""Materialization's communication order and merged gathers."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import onnx

from examples.build_examples import NetBuilder
from raptor.driver import compile_model, ir_inputs
from raptor.ir.ops import (
    ChannelReceiveOp,
    ChannelSendOp,
    CoreOp,
    ExtractSliceOp,
    ScheduledComputeBatchOp,
)
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import SimOptions, simulate
from raptor.solve import SolveOptions, solve
from raptor.solver.evaluate import retime
from raptor.solver.from_ir import build_compute_graph
from raptor.target import Target

from .conftest import EXAMPLES


def test_receives_are_posted_first_and_sends_follow_their_producer(target: Target) -> None:
    """Every receive is posted when its core starts, so no rendezvous send waits for its
    partner; the simulation with rendezvous sends matches the buffered one (lenet: on
    resnet_block, whose lanes now take runs of rows, the two differ by 24 ns, on yolo_neck
    and mobilenet_block rendezvous is the faster: not waits, but messages crossing links
    in another order)."""
    solved = solve(EXAMPLES / "lenet.onnx", target,
                   SolveOptions(solver="peft", sim=SimOptions(trace=False)))
    run = solved.runs[0]
    cores = [op for op in run.scheduled.main().body.ops if isinstance(op, CoreOp)]
    assert any(isinstance(o, ChannelSendOp) for c in cores for o in c.body.ops)
    for core in cores:
        kinds = [isinstance(o, ChannelReceiveOp) for o in core.body.ops]
        assert kinds == sorted(kinds, reverse=True)  # all receives, then the rest
    feeds = ir_inputs(solved.compiled.graph, solved.inputs)
    buffered = simulate(run.scheduled, target, dict(feeds), SimOptions(mode="buffered",
                                                                      trace=False))
    assert run.sim is not None and run.sim.report.latency_ns == buffered.report.latency_ns


def _pooled_net() -> onnx.ModelProto:
    """1x1 conv to 64 channels -> ReLU6 -> global average pool, all dense: the pool runs in
    two lanes of 32 channels, each reading a crop of the dense value."""
    b = NetBuilder(seed=12)
    zero = b.const("zero", np.array(0.0, np.float32))
    six = b.const("six", np.array(6.0, np.float32))
    h = b.node("Clip", [b.conv("x", 4, 64, 1), zero, six])
    return b.model("pooled", {"x": [1, 4, 6, 6]}, b.node("GlobalAveragePool", [h], out="y"))


def test_merged_lanes_copy_a_local_value_once(target: Target) -> None:
    """On one core the pool lanes run back to back and merge; their crops of the local value
    become one slice (one copy, where crop-then-insert would take two per lane), so the
    merged program is never slower than the unmerged estimate. (One pixel per MVM: the
    lowering this scenario was found on.)"""
    target = dataclasses.replace(target, conv_window_max=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pooled.onnx"
        onnx.save(_pooled_net(), path)
        comp = compile_model(path, target)
    build = build_compute_graph(comp.module.main(), target)
    g = build.graph
    order = list(range(g.num_tasks))
    start = retime(g, target, [0] * g.num_tasks, [order])
    dur = g.durations([0] * g.num_tasks)
    view = ScheduleView([0] * g.num_tasks, start, [s + d for s, d in zip(start, dur,
                                                                        strict=True)])
    merged = materialize(comp.module, build.projection, build.outputs, view)
    plain = materialize(comp.module, build.projection, build.outputs, view, merge=False)
    body = next(op for op in merged.main().body.ops if isinstance(op, CoreOp)).body.ops
    batches = [i for i, op in enumerate(body) if isinstance(op, ScheduledComputeBatchOp)]
    assert batches and any(isinstance(body[i - 1], ExtractSliceOp) for i in batches)
    x = {"x": np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)}
    feeds = ir_inputs(comp.graph, x)
    a = simulate(plain, target, dict(feeds), SimOptions.ideal(trace=False))
    b = simulate(merged, target, dict(feeds), SimOptions.ideal(trace=False))
    assert a.report.latency_ns == max(s + d for s, d in zip(start, dur, strict=True))
    assert b.report.latency_ns <= a.report.latency_ns
    np.testing.assert_allclose(b.outputs[0], a.outputs[0], rtol=1e-6)


def test_the_graph_knows_where_each_lane_of_a_convolution_starts(target: Target) -> None:
    """`ComputeGraph.position`: a 3x3 convolution over 32 x 32 pixels read by another runs in
    row lanes; each lane's (row, column) is where its output starts, one lane per place,
    every row of the output covered (PEFT places lanes by it under pimsim-nn's protocol)."""
    b = NetBuilder(seed=3)
    h = b.node("Relu", [b.conv("x", 16, 16, 3)])
    model = b.model("two", {"x": [1, 16, 32, 32]}, b.node("Relu", [b.conv(h, 16, 16, 3)], out="y"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "two.onnx"
        onnx.save(model, path)
        comp = compile_model(path, target)
    g = build_compute_graph(comp.module.main(), target).graph
    first = min(w for t in g.tasks for w in t.weights)
    lanes = [t.id for t in g.tasks if first in t.weights]
    at = [g.position[t] for t in lanes]
    assert len(set(at)) == len(lanes)
    assert {r for r, _ in at} == set(range(32))
    columns = sorted({c for _, c in at})
    assert columns[0] == 0 and len(at) == 32 * len(columns)
