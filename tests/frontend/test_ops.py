"""The core-tier operators with the tests' own inputs (weights and shape operands arrive as
graph inputs and are bound by --inputs), one ONNX reference case per operator through
`raptor interpret`; padding modes; Pad folded into a convolution; Div and Max/Min forms."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.bench_conformance import CORE_TIER, Case, cases, run_case
from raptor.driver import ir_inputs
from raptor.frontend import import_onnx, run_plan_graph
from raptor.ir.interpreter import Interpreter
from raptor.passes.layout import select_layouts
from raptor.passes.lower import lower
from raptor.rewrite.canonicalize import canonicalize
from raptor.target import load_target

from .util import check_against_ort, kinds, model, rand

TIER = [c for c in cases() if c.outside is None]
ONE_PER_OP = list({c.op: c for c in TIER}.values())


def test_every_tier_operator_has_cases() -> None:
    assert {c.op for c in TIER} == set(CORE_TIER)
    assert len(TIER) >= 200


@pytest.mark.parametrize("case", ONE_PER_OP, ids=lambda c: c.name)
def test_case_with_its_own_inputs(case: Case, tmp_path: Path) -> None:
    ok, why = run_case(case, tmp_path)
    assert ok, why


def _as_float(case_name: str) -> Case:
    """An integer padding case of onnx's reference set, its data made float32."""
    (case,) = [c for c in cases(["Pad"]) if c.name == case_name]
    proto = copy.deepcopy(case.model)
    for value in [*proto.graph.input[:1], *proto.graph.output]:
        value.type.tensor_type.elem_type = TensorProto.FLOAT
    data = next(iter(case.inputs))
    inputs = {**case.inputs, data: case.inputs[data].astype(np.float32)}
    outputs = {k: v.astype(np.float32) for k, v in case.outputs.items()}
    return Case(case.name + "_float", "Pad", proto, inputs, outputs)


@pytest.mark.parametrize("name", ["test_edge_pad", "test_reflect_pad", "test_wrap_pad"])
def test_padding_modes(name: str, tmp_path: Path) -> None:
    ok, why = run_case(_as_float(name), tmp_path)
    assert ok, why


def _through_graph_ir(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    graph = import_onnx(proto)
    _, layouts = select_layouts(graph)
    low = lower(graph, load_target("default"), layouts)
    canonicalize(low.module)
    return Interpreter(low.module).run(ir_inputs(graph, feeds))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_with_crop_matches_onnxruntime(mode: str) -> None:
    pads = helper.make_tensor("p", TensorProto.INT64, [8], [0, 0, 2, -1, 0, 0, -1, 2])
    nodes = [helper.make_node("Constant", [], ["pads"], value=pads),
             helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)]
    proto = model(nodes, {"x": [1, 2, 5, 6]}, {"y": None}, opset=18)
    feeds = {"x": rand(1, 2, 5, 6)}
    graph = check_against_ort(proto, feeds)
    assert kinds(graph) == ["pad"]
    (got,) = _through_graph_ir(proto, feeds)
    np.testing.assert_allclose(got, run_plan_graph(graph, feeds)["y"], rtol=1e-6)


def test_zero_pad_folds_into_conv() -> None:
    """ZeroPad2d / ConstantPad2d(0) before a convolution becomes the convolution's padding."""
    pads = helper.make_tensor("p", TensorProto.INT64, [8], [0, 0, 1, 2, 0, 0, 3, 0])
    nodes = [helper.make_node("Constant", [], ["pads"], value=pads),
             helper.make_node("Pad", ["x", "pads"], ["z"]),
             helper.make_node("Conv", ["z", "w"], ["y"], pads=[1, 0, 0, 1])]
    proto = model(nodes, {"x": [1, 3, 6, 6]}, {"y": None}, {"w": rand(4, 3, 3, 3, seed=1)})
    graph = check_against_ort(proto, {"x": rand(1, 3, 6, 6)})
    assert kinds(graph) == ["conv"] and graph.plans[0].attrs["pads"] == [2, 2, 3, 1]


def test_div_forms() -> None:
    """x / constant, constant / x and x / y; Max and Min with constants fold them once."""
    nodes = [helper.make_node("Div", ["x", "six"], ["a"]),
             helper.make_node("Div", ["two", "x"], ["b"]),
             helper.make_node("Div", ["a", "b"], ["c"]),
             helper.make_node("Max", ["c", "six", "two"], ["d"]),
             helper.make_node("Min", ["d", "x"], ["y"])]
    weights = {"six": np.array(6, np.float32), "two": np.array([2.0, -2.0, 3.0], np.float32)}
    proto = model(nodes, {"x": [2, 3]}, {"y": None}, weights)
    x = rand(2, 3) + 3.0
    graph = check_against_ort(proto, {"x": x})
    assert kinds(graph) == ["div", "div", "div", "max", "min"]
    assert graph.plans[3].weights["operand"].tolist() == [6.0, 6.0, 6.0]
    (got,) = _through_graph_ir(proto, {"x": x})
    np.testing.assert_allclose(got, run_plan_graph(graph, {"x": x})["y"], rtol=1e-6)
