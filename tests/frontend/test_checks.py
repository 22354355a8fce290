"""Malformed models are refused before any work with one line naming the node, op or
attribute and what was expected (onnx.checker's full check, then Raptor's own checks); the
reference check turns runtime failures into a note."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import raptor.frontend.oracle as oracle
from raptor.cli import main
from raptor.frontend import FrontendError, import_onnx


def conv_model(weight: tuple[int, ...] = (4, 3, 3, 3), **attrs: object) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", **attrs)
    graph = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
        [numpy_helper.from_array(np.ones(weight, np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def gemm_model(**attrs: object) -> onnx.ModelProto:
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="g", **attrs)
    graph = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
        [numpy_helper.from_array(np.ones((3, 3), np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def one_node(op: str, weights: dict[str, np.ndarray], x: list[int], y: list[int | str],
             **attrs: object) -> onnx.ModelProto:
    """``op(x, *weights)`` with the weights as initializers."""
    node = helper.make_node(op, ["x", *weights], ["y"], name="n", **attrs)
    graph = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def relu_model(dims: list[int | str | None]) -> onnx.ModelProto:
    """A Relu over an input with the given dims (None: an unnamed dynamic dimension)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    for d in dims:
        dim = x.type.tensor_type.shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        elif d is not None:
            dim.dim_value = d
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "m", [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _edit(model: onnx.ModelProto, change: Callable[[onnx.ModelProto], None]) -> onnx.ModelProto:
    change(model)
    return model


def _drop_weight(m: onnx.ModelProto) -> None:
    del m.graph.node[0].input[1]


def _opset(m: onnx.ModelProto) -> None:
    m.opset_import[0].version = 1000


def _empty(m: onnx.ModelProto) -> None:
    del m.graph.node[:]
    del m.graph.output[:]


def _twice(m: onnx.ModelProto) -> None:
    m.graph.output.append(m.graph.output[0])


def _no_outputs(m: onnx.ModelProto) -> None:
    del m.graph.output[:]


def _int_output(m: onnx.ModelProto) -> None:
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT8


CHECKER = "<ModelProto>: invalid ONNX model (onnx.checker): "
MALFORMED = {
    "stride 0": (conv_model(strides=[0, 1]), CHECKER + "[ShapeInferenceError] Inference "
                 "error(s): (op_type:Conv, node name: c): [ShapeInferenceError] Attribute strides "
                 "must only contain positive values"),
    "negative pads": (conv_model(pads=[-1, 0, 0, 0]), CHECKER + "[ShapeInferenceError] "
                      "Inference error(s): (op_type:Conv, node name: c): [ShapeInferenceError] "
                      "Attribute pads must not contain negative values"),
    "kernel_shape vs weight": (conv_model(kernel_shape=[2, 2]), "Conv node 'c': kernel_shape "
                               "[2, 2] disagrees with the weight [4, 3, 3, 3]"),
    "huge stride": (conv_model(strides=[1 << 40, 1]), "Conv node 'c': attribute strides = "
                    "[1099511627776, 1] is out of range (each value must be in 1..65536)"),
    "missing weight": (_edit(conv_model(), _drop_weight), CHECKER + "Node(c) with "
                       "schema(::Conv:11) has input size 1 not in range [min=2, max=3]."),
    "opset 1000": (_edit(conv_model(), _opset), "<ModelProto>: opset 1000 of the default domain "
                   f"is outside the supported range 7-{onnx.defs.onnx_opset_version()}"),
    "empty graph": (_edit(conv_model(), _empty), "<ModelProto>: the graph is empty (no nodes); "
                    "nothing to compile"),
    "output twice": (_edit(conv_model(), _twice), "<ModelProto>: graph output 'y' is listed "
                     "twice"),
    "no outputs": (_edit(conv_model(), _no_outputs), "<ModelProto>: the graph declares no "
                   "outputs; nothing to compute"),
    "int8 output": (_edit(conv_model(), _int_output), CHECKER + "[ShapeInferenceError] "
                    "Inference error(s): (op_type:Conv, node name: c): [TypeInferenceError] "
                    "Inferred elem type differs from existing elem type: (1) vs (3)"),
    "clip bound not a scalar": (
        one_node("Clip", {"lo": np.zeros(2, np.float32)}, [1, 2], [1, 2]),
        "Clip node 'n': min has shape [2]; a bound is one number"),
    "negative variance": (
        one_node("BatchNormalization", {k: np.ones(2, np.float32) for k in "sbm"}
                 | {"v": -np.ones(2, np.float32)}, [1, 2, 3, 3], [1, 2, 3, 3]),
        "BatchNormalization node 'n': var + epsilon must be positive"),
    "output_padding": (
        one_node("ConvTranspose", {"w": np.ones((2, 2, 3, 3), np.float32)}, [1, 2, 3, 3],
                 ["a", "b", "c", "d"], output_padding=[2, 0]),
        "ConvTranspose node 'n': output_padding [2, 0] must be smaller than the stride [1, 1] "
        "or the dilation [1, 1]"),
    "transB 2": (gemm_model(transB=2), "Gemm node 'g': transA 0 and transB 2 must be 0 or 1"),
    "dynamic -1": (relu_model([1, -1, 4]), "<ModelProto>: input 'x' has a dynamic dimension -1 "
                   "(dynamic) at axis 1 (shape [1, -1, 4]); set it with --input-shape x=1xD1x4 "
                   "or supply the input with --inputs"),
    "dynamic ?": (relu_model([1, None, 4]), "<ModelProto>: input 'x' has a dynamic dimension "
                  "'?' (unnamed) at axis 1 (shape [1, ?, 4]); set it with --input-shape "
                  "x=1xD1x4 or supply the input with --inputs"),
    "zero size": (relu_model([1, 0, 4]), "<ModelProto>: input 'x' would have size 0 at axis 1 "
                  "(shape [1, 0, 4]); zero-size tensors are not supported"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_model_is_one_line(case: str) -> None:
    model, message = MALFORMED[case]
    with pytest.raises(FrontendError) as error:
        import_onnx(model)
    assert str(error.value) == message


@pytest.mark.parametrize("case", ["kernel_shape vs weight", "opset 1000", "transB 2"])
def test_malformed_model_exit_2(case: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(MALFORMED[case][0], path)
    assert main(["solve", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(str(path)) and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_dynamic_batch_and_unnamed_dims_bind_from_input_shape() -> None:
    """-1 and '?' dimensions take the sizes given; named ones propagate to outputs."""
    graph = import_onnx(relu_model([-1, None, "W"]), shapes={"x": (2, 3, 5)})
    assert graph.inputs[0].shape == (2, 3, 5) and graph.outputs[0].shape == (2, 3, 5)


def test_reference_falls_back_then_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = conv_model()
    feeds = {"x": np.ones((1, 3, 8, 8), np.float32)}
    real = oracle.run_reference

    def no_ort(m: object, inputs: object, which: str | None = None) -> object:
        if which == "onnxruntime":
            raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : no kernel")
        return real(m, inputs, which)  # type: ignore[arg-type]

    monkeypatch.setattr(oracle, "run_reference", no_ort)
    outputs, used, note = oracle.reference_outputs(model, feeds)
    assert used == "onnx.reference" and note is None and outputs is not None
    np.testing.assert_allclose(outputs["y"], np.full((1, 4, 6, 6), 27.0))

    def broken(m: object, inputs: object, which: str | None = None) -> object:
        raise ValueError(f"{which} failed\nsecond line")

    monkeypatch.setattr(oracle, "run_reference", broken)
    assert oracle.reference_outputs(model, feeds) == (
        None, None, "reference unavailable: onnxruntime: onnxruntime failed; onnx.reference: "
        "onnx.reference failed")
