"""Materialization of an instance that reads nothing of an input its body still names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from examples.build_examples import NetBuilder
from raptor.driver import compile_model, ir_inputs
from raptor.ir.ops import CoreOp, ScheduledComputeBatchOp
from raptor.ir.verifier import verify_module
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import SimOptions, simulate
from raptor.solver.evaluate import retime
from raptor.solver.from_ir import build_compute_graph
from raptor.target import Target


def _padding_only_conv() -> onnx.ModelProto:
    """A 2x1 kernel, dilation 3 and 2 rows of padding on a 1-row image: each of the two
    output rows reads padding only (taps at rows -2 and 1, then -1 and 2), so each lane
    slices zero rows of the input. Found by the random-network harness."""
    b = NetBuilder(7)
    w = b.const("w", b.rng.uniform(-.5, .5, (4, 3, 2, 1)).astype(np.float32))
    y = b.node("Conv", ["x", w, b.const("b", np.arange(4, dtype=np.float32))],
               kernel_shape=[2, 1], dilations=[3, 1], pads=[2, 0, 2, 0], out="y")
    return b.model("padding_only", {"x": [1, 3, 1, 6]}, y)


def test_an_empty_read_still_defines_the_sliced_input(tmp_path: Path, target: Target) -> None:
    """The gather skipped an input whose box is empty, yet the lane body's zero-row slice
    still named it: `invalid schedule: [SSA-1] tensor.extract_slice uses %in but it is not
    defined`. The input is now a zero-element `tensor.empty`, alone and in merged lanes."""
    path = tmp_path / "padding_only.onnx"
    onnx.save(_padding_only_conv(), path)
    comp = compile_model(path, target)
    build = build_compute_graph(comp.module.main(), target)
    g = build.graph
    start = retime(g, target, [0] * g.num_tasks, [list(range(g.num_tasks))])
    end = [s + d for s, d in zip(start, g.durations([0] * g.num_tasks), strict=True)]
    x = np.random.default_rng(0).standard_normal((1, 3, 1, 6)).astype(np.float32)
    feeds = ir_inputs(comp.graph, {"x": x})
    want = np.broadcast_to(np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1), (1, 4, 2, 6))
    for merge in (False, True):
        module = materialize(comp.module, build.projection, build.outputs,
                             ScheduleView([0] * g.num_tasks, start, end), merge=merge)
        assert verify_module(module) == []
        body = next(op for op in module.main().body.ops if isinstance(op, CoreOp)).body.ops
        assert any(isinstance(op, ScheduledComputeBatchOp) for op in body) == merge
        got = simulate(module, target, {k: v for k, v in feeds.items()},
                       SimOptions.ideal(trace=False))
        np.testing.assert_array_equal(got.outputs[0], want)
