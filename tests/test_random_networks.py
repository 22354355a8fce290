"""Random small CNNs through the whole pipeline: the scheduled program verifies, simulates
to onnxruntime's numbers, its ideal simulation equals the schedule's contention-free estimate
(one compute per instance; never above it once lanes merge into batches), and its default
simulation stays within 10 % of the communication-aware estimate.

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

from examples.build_examples import NetBuilder
from raptor.driver import ir_inputs
from raptor.passes.materialize import ScheduleView, materialize
from raptor.sim import SimOptions, simulate
from raptor.solve import Solved, SolveOptions, solve
from raptor.target import Target


class _Net:
    """A model under construction (`NetBuilder`) and the shape of its current value `x`."""

    def __init__(self, draw: st.DrawFn, channels: int, height: int, width: int) -> None:
        self.draw = draw
        self.b = NetBuilder(draw(st.integers(0, 2**16)))
        self.x, self.c, self.h, self.w = "x", channels, height, width

    def layer(self, kind: str) -> None:
        b, x = self.b, self.x
        if kind == "conv":
            k, cout = self.draw(st.sampled_from([1, 3])), self.draw(st.integers(2, 6))
            stride = self.draw(st.sampled_from([1, 2])) if min(self.h, self.w) >= 4 else 1
            self.x = b.conv(x, self.c, cout, k, stride)
            self.c, self.h, self.w = cout, -(-self.h // stride), -(-self.w // stride)
        elif kind == "depthwise":
            self.x = b.conv(x, self.c, self.c, 3, group=self.c)
        elif kind == "relu":
            self.x = b.node("Relu", [x])
        elif kind == "silu":
            self.x = b.silu(x, gate_first=False)
        elif kind == "maxpool" and min(self.h, self.w) >= 2:
            self.x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
            self.h, self.w = self.h // 2, self.w // 2
        elif kind == "add":
            self.x = b.node("Add", [x, b.conv(x, self.c, self.c, 1)])
        elif kind == "concat":
            branch = b.node("Relu", [b.conv(x, self.c, 2, 3)])
            self.x = b.node("Concat", [x, branch], axis=1)
            self.c += 2
        elif kind == "resize" and max(self.h, self.w) <= 5:
            scales = b.const(b.fresh("scales"), np.array([1, 1, 2, 2], np.float32))
            self.x = b.node("Resize", [x, "", scales], mode="nearest")
            self.h, self.w = 2 * self.h, 2 * self.w


def network(draw: st.DrawFn) -> onnx.ModelProto:
    """A network of `networks` from its draws (a test replays known draws to rebuild one)."""
    c, h, w = draw(st.integers(1, 4)), draw(st.integers(3, 8)), draw(st.integers(3, 8))
    net = _Net(draw, c, h, w)
    net.layer("conv")  # every network holds crossbar work
    kinds = ["conv", "depthwise", "relu", "silu", "maxpool", "add", "concat", "resize"]
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=5)):
        net.layer(kind)
    return net.b.model("net", {"x": [1, c, h, w]}, net.b.node("Identity", [net.x], out="y"))


networks = st.composite(network)


def solve_proto(proto: onnx.ModelProto, target: Target, options: SolveOptions) -> Solved:
    """`solve` on a model built in memory (written to a temporary file, as the CLI reads it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "net.onnx"
        onnx.save(proto, path)
        return solve(path, target, options)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(networks())
def test_random_networks_simulate_to_the_reference(proto: onnx.ModelProto) -> None:
    solved = solve_proto(proto, Target(), SolveOptions(solver="peft", sim=SimOptions(trace=False)))
    (run,) = solved.runs
    assert run.ok, (run.violations, run.scheduled_errors, run.sim_error, run.numerics)
    assert run.numerics and run.sim is not None
    res, target = run.result, solved.target
    plain = materialize(solved.compiled.module, solved.build.projection, solved.build.outputs,
                        ScheduleView(res.core_of, res.start_ns, res.end_ns), merge=False)
    feeds = ir_inputs(solved.compiled.graph, solved.inputs)
    ideal = simulate(plain, target, dict(feeds), SimOptions.ideal(trace=False))
    assert ideal.report.latency_ns == run.ideal_estimate_ns  # one compute per instance
    assert run.ideal_ns is not None and run.ideal_ns <= run.ideal_estimate_ns  # lanes merged
    assert run.sim.report.latency_ns <= 1.1 * run.estimate_ns  # the estimate predicts it
    np.testing.assert_array_equal(ideal.outputs[0], run.sim.outputs[0])
