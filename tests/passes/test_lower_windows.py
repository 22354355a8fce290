"""Convolution windows (shifted-and-duplicated kernels, `conv_windows`): one MVM computes
several adjacent output pixels; the result is the convolution's, to float tolerance, and the
MVMs are what the window arithmetic (`window_options`) says."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from raptor.driver import CompileOptions, compile_model, ir_inputs
from raptor.frontend import import_onnx
from raptor.frontend.oracle import run_reference
from raptor.ir.interpreter import Interpreter
from raptor.ir.verifier import verify_module
from raptor.passes import lower as lower_mod
from raptor.passes.layout import select_layouts
from raptor.passes.lower import conv_windows, crossbars_needed, lower, window_options
from raptor.rewrite.canonicalize import canonicalize
from raptor.target import Target

from .conftest import EXAMPLES


def _conv_model(cin: int, cout: int, size: tuple[int, int], k: int, stride: int, pad: int,
                dil: int, relu: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(cin * 1000 + cout)
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    h, wd = size
    oh, ow = ((n + 2 * pad - dil * (k - 1) - 1) // stride + 1 for n in size)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"],
                              strides=[stride] * 2, pads=[pad] * 4, dilations=[dil] * 2)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, h, wd])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, oh, ow])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# (Cin, Cout, (H, W), kernel, stride, pad, dilation, pixels per MVM)
CASES = [
    (3, 16, (12, 13), 3, 1, 1, 1, 8),      # 13 columns: the second window half padding
    (3, 64, (20, 22), 7, 2, 3, 1, 8),      # the stem's kernel and stride
    (8, 16, (9, 11), 3, 2, 0, 2, 4),       # dilation 2, stride 2, no padding
    (130, 30, (6, 10), 3, 1, 1, 1, 4),     # 130 input channels: row tiles cut channels
    (16, 8, (5, 9), 1, 1, 0, 1, 8),        # 1x1
    (64, 64, (10, 10), 3, 1, 1, 1, 2),     # 6 row tiles
    (64, 128, (8, 7), 3, 1, 1, 1, 2),      # 128 output channels, 7 columns
    (16, 128, (10, 7), 5, 1, 2, 1, 4),     # 5x5, 4 crossbars of columns
    (32, 64, (9, 9), 3, 2, 1, 1, 2),       # stride 2, 5 columns in windows of 2
    (127, 32, (12, 12), 3, 2, 1, 1, 2),    # 127 channels, stride 2
]


@pytest.mark.parametrize(("cin", "cout", "size", "k", "stride", "pad", "dil", "pixels"), CASES)
def test_windows_compute_the_convolution(cin: int, cout: int, size: tuple[int, int], k: int,
                                         stride: int, pad: int, dil: int, pixels: int,
                                         target: Target, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """Lowered with windows of `pixels` (whether or not `conv_windows` would take them),
    canonicalized and interpreted: onnxruntime's numbers; the MVMs are images × rows ×
    windows × row tiles (`window_options`), fewer than at one pixel."""
    model = _conv_model(cin, cout, size, k, stride, pad, dil, relu=cin % 2 == 0)
    graph = import_onnx(model)
    monkeypatch.setattr(lower_mod, "conv_windows", lambda g, t, *_: {0: pixels})
    options = {o.pixels: o.mvms for o in window_options(graph, graph.plans[0], target)}
    _, layouts = select_layouts(graph)
    low = lower(graph, target, layouts)
    assert low.mvms == options[pixels] < options[1]
    assert low.crossbars == crossbars_needed(graph, target)
    canonicalize(low.module)
    assert verify_module(low.module) == []
    x = np.random.default_rng(1).standard_normal((1, cin, *size)).astype(np.float32)
    (got,) = Interpreter(low.module).run(ir_inputs(graph, {"x": x}))
    want = run_reference(model, {"x": x}, "onnxruntime")["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_one_pixel_per_mvm_is_the_plain_lowering(target: Target) -> None:
    """`conv_window_max = 1`: no windows, a pixel per MVM."""
    graph = import_onnx(_conv_model(3, 16, (12, 13), 3, 1, 1, 1, relu=False))
    t = dataclasses.replace(target, conv_window_max=1)
    assert conv_windows(graph, t) == {}
    assert lower(graph, t).mvms == 12 * 13


def test_windows_leave_room_for_copies(target: Target) -> None:
    """ResNet-18: the windows of fewest MVMs per copy a quarter of the chip holds (its
    64-channel 3x3 layers at 4 pixels, 18 crossbars a copy, not 8 at 60), the network
    within that quarter; on a chip whose quarter is less than its crossbars at one pixel
    (16 crossbars a core: 256 of 1,024; it needs 727), none."""
    from benchmarks.models import resnet18

    graph = import_onnx(resnet18())
    names = {graph.plans[i].name: p for i, p in conv_windows(graph, target).items()}
    assert names == {"conv2": 2, "conv11": 4, "conv19": 4, "conv28": 4, "conv36": 4,
                     "conv45": 2}
    assert crossbars_needed(graph, target) == 790 <= target.crossbar_capacity // 4
    small = dataclasses.replace(target, crossbars_per_core=16)
    assert conv_windows(graph, small) == {} and crossbars_needed(graph, small) == 727


def test_windows_keep_few_lanes_short(target: Target) -> None:
    """A layer of fewer lanes than cores is as slow as its longest lane: the ResNet block's
    16x16 layers take 4 pixels (64 lanes of 3 MVMs) rather than the fewest MVMs, 8 (32
    lanes of 4); a 6x10 layer of 130 channels none (a window's lane multiplies all its
    row tiles: 39 MVMs at 2 pixels, 5 at one)."""
    block = import_onnx(EXAMPLES / "resnet_block.onnx")
    assert set(conv_windows(block, target).values()) == {4}
    assert conv_windows(import_onnx(_conv_model(130, 30, (6, 10), 3, 1, 1, 1, False)),
                        target) == {}


def test_pipeline_windows_drop_the_lane_term(target: Target) -> None:
    """Pipeline mode (`CompileOptions.pipeline`): the ResNet block's 16x16 layers take the
    fewest MVMs, 8 pixels, where latency mode keeps their lanes short at 4: in a stream the
    other layers' work fills the cores their few lanes leave idle."""
    block = import_onnx(EXAMPLES / "resnet_block.onnx")
    assert set(conv_windows(block, target, pipeline=True).values()) == {8}
    assert crossbars_needed(block, target, pipeline=True) > crossbars_needed(block, target)
    latency = compile_model(EXAMPLES / "resnet_block.onnx", target)
    piped = compile_model(EXAMPLES / "resnet_block.onnx", target, CompileOptions(pipeline=True))
    assert piped.pipeline and not latency.pipeline
    assert {s.pixels for s in piped.lowered.stats} == {1, 8}
    assert piped.lowered.mvms < latency.lowered.mvms


def test_pipeline_ties_of_mvms_go_to_the_shorter_lane(target: Target) -> None:
    """Pipeline mode, MVMs per copy and MVMs equal: latency mode's time (the shortest lane)
    breaks the tie. MobileNet's conv34 makes 32 MVMs at 2 or 4 pixels (lanes of 2 and 1),
    its conv66 16 at 1 or 2 (lanes of 4 and 2): 4 and 2, as in latency mode."""
    from benchmarks.cnns import mobilenet

    graph = import_onnx(mobilenet())
    names = {graph.plans[i].name: p for i, p in conv_windows(graph, target, True).items()}
    assert names == {"conv2": 4, "conv18": 4, "conv34": 4, "conv50": 2, "conv66": 2}
    assert conv_windows(graph, target, True) == conv_windows(graph, target)
