"""Random small CNNs through the whole pipeline: the scheduled program verifies, simulates
to onnxruntime's numbers, and its ideal simulation equals the schedule's estimate (one
compute per instance; never above it once lanes merge into batches).

The examples fix a few topologies; these draw layer sequences (convolutions plain, strided
and depthwise, SiLU as the exporters write it, pooling, residual adds, concats, nearest
resizes) so the simulator's stacked numerics meet bodies and groupings nobody wrote by hand.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from raptor.driver import ir_inputs
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import SimOptions, simulate
from raptor.solve import SolveOptions, solve
from raptor.solver.evaluate import retime
from raptor.target import Target
from tests.frontend.util import model


class _Net:
    """Nodes and weights of a model under construction; `x` is the current value."""

    def __init__(self, draw: st.DrawFn, channels: int, height: int, width: int) -> None:
        self.draw = draw
        self.rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        self.nodes: list[onnx.NodeProto] = []
        self.weights: dict[str, np.ndarray] = {}
        self.x, self.c, self.h, self.w = "x", channels, height, width

    def name(self, kind: str) -> str:
        return f"{kind}{len(self.nodes)}"

    def const(self, kind: str, value: np.ndarray) -> str:
        name = self.name(kind) + f"_{len(self.weights)}"
        self.weights[name] = value.astype(np.float32)
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, src: str, cin: int, cout: int, k: int, stride: int, group: int) -> str:
        w = self.const("w", self.rng.standard_normal((cout, cin // group, k, k)) / k)
        b = self.const("b", self.rng.standard_normal(cout) * 0.1)
        pad = k // 2
        return self.node("Conv", [src, w, b], kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, group=group)

    def layer(self, kind: str) -> None:
        if kind == "conv":
            k, cout = self.draw(st.sampled_from([1, 3])), self.draw(st.integers(2, 6))
            stride = self.draw(st.sampled_from([1, 2])) if min(self.h, self.w) >= 4 else 1
            self.x = self.conv(self.x, self.c, cout, k, stride, 1)
            self.c, self.h, self.w = cout, -(-self.h // stride), -(-self.w // stride)
        elif kind == "depthwise":
            self.x = self.conv(self.x, self.c, self.c, 3, 1, self.c)
        elif kind == "relu":
            self.x = self.node("Relu", [self.x])
        elif kind == "silu":
            self.x = self.node("Mul", [self.x, self.node("Sigmoid", [self.x])])
        elif kind == "maxpool" and min(self.h, self.w) >= 2:
            self.x = self.node("MaxPool", [self.x], kernel_shape=[2, 2], strides=[2, 2])
            self.h, self.w = self.h // 2, self.w // 2
        elif kind == "add":
            self.x = self.node("Add", [self.x, self.conv(self.x, self.c, self.c, 1, 1, 1)])
        elif kind == "concat":
            branch = self.node("Relu", [self.conv(self.x, self.c, 2, 3, 1, 1)])
            self.x = self.node("Concat", [self.x, branch], axis=1)
            self.c += 2
        elif kind == "resize" and max(self.h, self.w) <= 5:
            scales = self.const("scales", np.array([1, 1, 2, 2]))
            self.x = self.node("Resize", [self.x, "", scales], mode="nearest")
            self.h, self.w = 2 * self.h, 2 * self.w


@st.composite
def networks(draw: st.DrawFn) -> onnx.ModelProto:
    c, h, w = draw(st.integers(1, 4)), draw(st.integers(3, 8)), draw(st.integers(3, 8))
    net = _Net(draw, c, h, w)
    net.layer("conv")  # every network holds crossbar work
    kinds = ["conv", "depthwise", "relu", "silu", "maxpool", "add", "concat", "resize"]
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=5)):
        net.layer(kind)
    net.nodes.append(helper.make_node("Identity", [net.x], ["y"], name="out"))
    return model(net.nodes, {"x": [1, c, h, w]}, {"y": None}, net.weights)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(networks())
def test_random_networks_simulate_to_the_reference(proto: onnx.ModelProto) -> None:
    target = Target()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "net.onnx"
        onnx.save(proto, path)
        solved = solve(path, target, SolveOptions(solver="peft", sim=SimOptions(trace=False)))
    (run,) = solved.runs
    assert run.ok, (run.violations, run.scheduled_errors, run.sim_error, run.numerics)
    assert run.numerics and run.sim is not None
    g, target = solved.build.graph, solved.target
    start = retime(g, target, run.result.core_of, run.result.core_tasks)
    end = [start[t] + g.tasks[t].cost_ns for t in range(g.num_tasks)]
    plain = materialize(solved.compiled.module, solved.build.projection, solved.build.outputs,
                        ScheduleView(run.result.core_of, start, end), merge=False)
    feeds = ir_inputs(solved.compiled.graph, solved.inputs)
    ideal = simulate(plain, target, dict(feeds), SimOptions.ideal(trace=False))
    assert ideal.report.latency_ns == run.estimate_ns  # one compute per instance
    assert run.ideal_ns is not None and run.ideal_ns <= run.estimate_ns  # lanes merged
    np.testing.assert_array_equal(ideal.outputs[0], run.sim.outputs[0])
