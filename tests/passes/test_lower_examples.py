"""Lowering and canonicalization of the example networks, checked numerically."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from raptor.driver import compile_model, ir_inputs
from raptor.frontend import import_onnx
from raptor.frontend.oracle import run_reference
from raptor.ir.interpreter import Interpreter
from raptor.ir.ops import BlueprintOp, GraphComputeBatchOp
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.lower import crossbars_needed, lower
from raptor.rewrite.canonicalize import canonicalize
from raptor.target import Target

from .conftest import EXAMPLES, MODELS, compiled, sample


@pytest.mark.parametrize("selector", ["exact", "disabled"])
@pytest.mark.parametrize("name", MODELS)
def test_example_matches_onnxruntime(name: str, selector: str, target: Target) -> None:
    comp = compiled(name, target, selector)
    assert verify_module(comp.module) == []
    inputs = sample(name)
    got = Interpreter(comp.module).run(ir_inputs(comp.graph, inputs))
    want = run_reference(EXAMPLES / f"{name}.onnx", inputs, "onnxruntime")
    for v, g in zip(comp.graph.outputs, got, strict=True):
        np.testing.assert_allclose(g, want[v.name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_canonicalization_preserves_meaning(name: str, target: Target) -> None:
    graph = import_onnx(EXAMPLES / f"{name}.onnx")
    low = lower(graph, target)
    assert verify_module(low.module, allow_assembly=True) == []
    assert verify_module(low.module), "assembly batches must not pass the graph verifier"
    feeds = ir_inputs(graph, sample(name))
    before = Interpreter(low.module).run(feeds)
    stats = canonicalize(low.module)
    assert stats.batches > 0
    assert verify_module(low.module) == []
    after = Interpreter(low.module).run(feeds)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    batches = [op for op in low.module.walk() if isinstance(op, GraphComputeBatchOp)]
    assert batches and not any(op.assembly for op in batches)


def test_mlp_crossbars(target: Target) -> None:
    """[196, 200, 200, 10] at 128x128 tiles: 2x2 + 2x2 + 2x1 = 10 crossbars. On 64 cores
    its 10 one-crossbar lanes all run at once, so each crossbar is its own group, as with
    `array_group_max = 1`; on 2 cores a row tile's column tiles form one array group (one
    weight, one MVM per input row)."""
    comp = compiled("mlp", target)
    assert comp.lowered.crossbars == comp.lowered.groups == comp.lowered.mvms == 10
    two = compile_model(EXAMPLES / "mlp.onnx", dataclasses.replace(target, mesh_rows=1,
                                                                   mesh_cols=2))
    gemms = [s for s in two.lowered.stats if s.kind == "gemm"]
    assert [s.crossbars for s in gemms] == [4, 4, 2]
    assert [s.groups for s in gemms] == [2, 2, 2] and two.lowered.mvms == 6
    assert sorted(two.lowered.tiles.values())[-1] == (128, 200)
    single = compile_model(EXAMPLES / "mlp.onnx", dataclasses.replace(target, array_group_max=1))
    assert single.lowered.crossbars == single.lowered.groups == 10
    assert single.lowered.mvms == 10
    assert all(c <= 128 for _, c in single.lowered.tiles.values())


def _depthwise(channels: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=channels, pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "dw", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, channels, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, channels, 8, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_depthwise_packs_groups_block_diagonally(target: Target) -> None:
    """9-row, 1-column groups: 14 per 128x128 crossbar, so 96 channels take 7, not 96."""
    model = _depthwise(96)
    graph = import_onnx(model)
    low = lower(graph, target)
    assert low.crossbars == 7
    canonicalize(low.module)
    x = np.random.default_rng(1).standard_normal((1, 96, 8, 8)).astype(np.float32)
    got = Interpreter(low.module).run([x])[0]
    np.testing.assert_allclose(got, run_reference(model, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_row_strip_layout_removes_dense_reassembly(target: Target) -> None:
    dense = compiled("resnet_block", target, "disabled")
    strips = compiled("resnet_block", target, "exact")
    assert strips.selection.counts["NHWCRowStrip"] > 0
    assert dense.selection.counts["NHWCRowStrip"] == 0
    kinds = [s.kind for s in dense.lowered.stats]
    assert kinds.count("dense_assembly") > [s.kind for s in strips.lowered.stats].count(
        "dense_assembly")


def test_concat_becomes_blueprint_placement(target: Target) -> None:
    """yolo_neck's channel concat of row-strip values is pure placement after the rules."""
    comp = compiled("yolo_neck", target)
    assert comp.canon.placed_concats >= 1
    multi = [op for op in comp.module.walk()
             if isinstance(op, BlueprintOp) and len(op.sources) > 1]
    assert multi, "a concat of several batches should be one Blueprint over all of them"


def test_resnet18_lowers_to_727_crossbars(target: Target) -> None:
    """ResNet-18 at 224x224 (built with onnx.helper): 727 128x128 tiles without replication
    at a pixel per MVM, the figure PIMCOMP-NN reports; it lowers and canonicalizes into
    verified graph IR. (Its speed is measured in benchmarks/bench_e2e.py, not here.)"""
    from benchmarks.models import resnet18

    graph = import_onnx(resnet18())
    assert crossbars_needed(graph, dataclasses.replace(target, conv_window_max=1)) == 727
    # array groups: a 256-wide layer's row tile fires its 2 crossbars as one MVM, a 512-wide
    # one its 4 (163,888 MVMs one crossbar at a time; PIMCOMP-NN issues 132,500, grouping
    # every layer); the two 1x1 downsampling convolutions and the classifier, whose lanes
    # all run at once on 64 cores, keep a crossbar per MVM. A pixel per MVM: 133,018 MVMs
    # in 286 groups; windows (`conv_windows`: the stem, layer 1, layer 2's first
    # convolution) 85,194 MVMs on 790 crossbars in 305 groups
    _, layouts = select_layouts(graph)
    low = lower(graph, target, layouts)
    assert low.crossbars == 790
    assert low.mvms == 85_194 and low.groups == 305
    assert sum(1 for s in low.stats if s.kind == "conv") == 20
    canonicalize(low.module)
    assert verify_module(low.module) == []


@pytest.mark.parametrize("name", ["resnet_block", "mlp"])
def test_mvm_units_put_row_tiles_in_one_lane(name: str, target: Target) -> None:
    """With 4 MVM units a lane may multiply several row tiles of its column group (their
    array groups fire at once) and add their partial sums: the same MVMs in no more lanes,
    and the same numbers."""
    one = compiled(name, target)
    four = compile_model(EXAMPLES / f"{name}.onnx", dataclasses.replace(target, mvm_units=4))
    assert four.lowered.mvms == one.lowered.mvms
    assert four.lowered.crossbars == one.lowered.crossbars
    assert four.lowered.lanes <= one.lowered.lanes
    inputs = sample(name)
    got = Interpreter(four.module).run(ir_inputs(four.graph, inputs))
    want = run_reference(EXAMPLES / f"{name}.onnx", inputs, "onnxruntime")
    for v, g in zip(four.graph.outputs, got, strict=True):
        np.testing.assert_allclose(g, want[v.name], rtol=1e-4, atol=1e-5)
