"""Import behaviour: clear errors, batch binding, folding and fusion, torch export patterns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from raptor.frontend import FrontendError, PlanGraph, import_onnx, run_plan_graph

from .util import check_against_ort, kinds, model, rand

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
node = helper.make_node


def _error(source: object) -> str:
    with pytest.raises(FrontendError) as error:
        import_onnx(source)  # type: ignore[arg-type]
    message = str(error.value)
    assert "\n" not in message
    return message


def _conv_weights(cin: int, cout: int, k: int = 3, seed: int = 1) -> dict[str, np.ndarray]:
    return {"w": rand(cout, cin, k, k, seed=seed) * 0.3, "b": rand(cout, seed=seed + 1)}


def _bn_weights(c: int, prefix: str = "bn", seed: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        f"{prefix}_s": rng.uniform(0.5, 1.5, c).astype(np.float32),
        f"{prefix}_b": rng.standard_normal(c).astype(np.float32),
        f"{prefix}_m": rng.standard_normal(c).astype(np.float32),
        f"{prefix}_v": rng.uniform(0.5, 1.5, c).astype(np.float32),
    }


def _bn(x: str, y: str, prefix: str = "bn") -> onnx.NodeProto:
    names = [f"{prefix}_{k}" for k in "sbmv"]
    return node("BatchNormalization", [x, *names], [y], name=prefix)


# -- bad inputs ------------------------------------------------------------------------------


def test_non_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a model\n" * 20)
    assert "not" in _error(path) and str(path) in _error(path)


def test_truncated_file(tmp_path: Path) -> None:
    data = (EXAMPLES / "lenet.onnx").read_bytes()
    path = tmp_path / "lenet_truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    assert "truncated" in _error(path)
    assert "truncated" in _error(data[: len(data) - 7])


def test_missing_file(tmp_path: Path) -> None:
    assert "no such file" in _error(tmp_path / "absent.onnx")


def test_unsupported_operator_names_op_node_opset_and_list() -> None:
    proto = model([node("Sin", ["x"], ["y"], name="sine")], {"x": [1, 4]}, {"y": [1, 4]})
    message = _error(proto)
    for part in ("unsupported operator Sin", "'sine'", "opset 17", "supported:", "Conv"):
        assert part in message


def test_dynamic_spatial_dimension() -> None:
    proto = model([node("Relu", ["x"], ["y"])], {"x": ["N", 3, "H", "W"]}, {"y": None})
    assert _error(proto) == (
        "<ModelProto>: input 'x' has a dynamic dimension 'H' at axis 2 (shape [N, 3, H, W]); "
        "set it with --input-shape x=1x3xHxW or supply the input with --inputs"
    )


def test_symbolic_batch_is_bound_to_one() -> None:
    weights = _conv_weights(3, 4)
    proto = model(
        [node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
        {"x": ["batch", 3, 8, 8]},
        {"y": ["batch", 4, 8, 8]},
        weights,
    )
    graph = import_onnx(proto)
    assert graph.inputs[0].shape == (1, 3, 8, 8) and graph.outputs[0].shape == (1, 4, 8, 8)
    assert any("'batch'" in note and "bound to 1" in note for note in graph.notes)
    check_against_ort(proto, {"x": rand(1, 3, 8, 8)})


def test_resize_linear_says_which_attribute_and_why() -> None:
    scales = {"s": np.array([1, 1, 2, 2], np.float32)}
    proto = model(
        [node("Resize", ["x", "", "s"], ["y"], mode="linear")],
        {"x": [1, 1, 4, 4]},
        {"y": None},
        scales,
    )
    message = _error(proto)
    assert "mode='linear'" in message and "nearest" in message


def test_weight_input_without_value_names_the_option() -> None:
    proto = model(
        [node("Conv", ["x", "w"], ["y"])], {"x": [1, 2, 5, 5], "w": [3, 2, 3, 3]}, {"y": None}
    )
    assert _error(proto) == (
        "Conv node 'Conv_0': weight W ('w') is a graph input with no value; supply it with "
        "--inputs X.npz or --constants C.npz to bind it as a constant"
    )


def test_computed_weight_is_rejected() -> None:
    proto = model(
        [node("Relu", ["w"], ["r"]), node("Conv", ["x", "r"], ["y"])],
        {"x": [1, 2, 5, 5], "w": [3, 2, 3, 3]},
        {"y": None},
    )
    assert "weight W ('r') must be a constant" in _error(proto)


# -- folding and fusion ----------------------------------------------------------------------


def test_batch_norm_folds_into_single_use_conv() -> None:
    proto = model(
        [node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), _bn("c", "y")],
        {"x": [1, 3, 8, 8]},
        {"y": None},
        {**_conv_weights(3, 6), **_bn_weights(6)},
    )
    graph = check_against_ort(proto, {"x": rand(1, 3, 8, 8)})
    assert kinds(graph) == ["conv"] and graph.plans[0].outputs == ["y"]


def test_batch_norm_folds_into_gemm() -> None:
    weights = {"w": rand(8, 5, seed=2), "b": rand(5, seed=3), **_bn_weights(5)}
    proto = model(
        [node("Gemm", ["x", "w", "b"], ["g"]), _bn("g", "y")], {"x": [2, 8]}, {"y": None}, weights
    )
    graph = check_against_ort(proto, {"x": rand(2, 8)})
    assert kinds(graph) == ["gemm"]


def test_batch_norm_stays_affine_when_conv_output_is_shared() -> None:
    proto = model(
        [node("Conv", ["x", "w", "b"], ["c"]), _bn("c", "n"), node("Add", ["c", "n"], ["y"])],
        {"x": [1, 3, 8, 8]},
        {"y": None},
        {**_conv_weights(3, 4), **_bn_weights(4)},
    )
    graph = check_against_ort(proto, {"x": rand(1, 3, 8, 8)})
    assert kinds(graph) == ["conv", "affine_channel", "add"]


def test_batch_norm_on_an_input_is_affine_channel() -> None:
    proto = model([_bn("x", "y")], {"x": [1, 4, 3, 3]}, {"y": None}, _bn_weights(4))
    graph = check_against_ort(proto, {"x": rand(1, 4, 3, 3)})
    assert kinds(graph) == ["affine_channel"]


@pytest.mark.parametrize("gate_first", [False, True])
def test_silu_recognized_in_either_order(gate_first: bool) -> None:
    mul_inputs = ["s", "x"] if gate_first else ["x", "s"]
    proto = model(
        [node("Sigmoid", ["x"], ["s"]), node("Mul", mul_inputs, ["y"])],
        {"x": [1, 4, 5, 5]},
        {"y": None},
    )
    graph = check_against_ort(proto, {"x": rand(1, 4, 5, 5)})
    assert kinds(graph) == ["silu"]


def test_sigmoid_with_other_uses_is_not_fused() -> None:
    proto = model(
        [node("Sigmoid", ["x"], ["s"]), node("Mul", ["x", "s"], ["y"])],
        {"x": [1, 4]},
        {"y": None, "s": None},
    )
    graph = check_against_ort(proto, {"x": rand(1, 4)})
    assert kinds(graph) == ["sigmoid", "mul"]


def test_channel_constants_become_bias_add() -> None:
    weights = {"c": rand(1, 4, 1, 1, seed=3), "d": rand(4, 1, 1, seed=4), "e": rand(4, 5, 5)}
    proto = model(
        [
            node("Add", ["x", "c"], ["a"]),
            node("Sub", ["a", "d"], ["s"]),
            node("Mul", ["e", "s"], ["y"]),
        ],
        {"x": [1, 4, 5, 5]},
        {"y": None},
        weights,
    )
    graph = check_against_ort(proto, {"x": rand(1, 4, 5, 5)})
    assert kinds(graph) == ["bias_add", "bias_add", "mul"]
    assert graph.plans[2].attrs == {"operand_index": 0}


def test_identity_and_dropout_are_removed() -> None:
    proto = model(
        [
            node("Relu", ["x"], ["r"]),
            node("Identity", ["r"], ["i"]),
            node("Dropout", ["i"], ["y"]),
        ],
        {"x": [1, 6]},
        {"y": None},
    )
    graph = check_against_ort(proto, {"x": rand(1, 6)})
    assert kinds(graph) == ["relu"] and graph.plans[0].outputs == ["y"]


def test_output_that_is_an_input_gets_an_identity_plan() -> None:
    proto = model([node("Identity", ["x"], ["y"])], {"x": [2, 3]}, {"y": None})
    assert kinds(check_against_ort(proto, {"x": rand(2, 3)})) == ["identity"]


# -- torch export patterns -------------------------------------------------------------------


def test_torchscript_classifier_head() -> None:
    """TorchScript (opset 17): GlobalAveragePool + Flatten + Gemm, dynamic batch axis."""
    weights = {**_conv_weights(3, 8), "fw": rand(10, 8, seed=7), "fb": rand(10, seed=8)}
    proto = model(
        [
            node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
            node("Relu", ["c"], ["r"]),
            node("GlobalAveragePool", ["r"], ["g"]),
            node("Flatten", ["g"], ["f"], axis=1),
            node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
        ],
        {"x": ["batch_size", 3, 16, 16]},
        {"y": ["batch_size", 10]},
        weights,
    )
    graph = check_against_ort(proto, {"x": rand(1, 3, 16, 16)})
    assert kinds(graph) == ["conv", "relu", "global_avgpool", "flatten", "gemm"]


def test_dynamo_patterns_fold_to_static_plans() -> None:
    """Dynamo (opset 18): ReduceMean over H,W, Shape-computed Reshape, Split/Slice on channels."""
    weights = {
        **_conv_weights(3, 8),
        "axes_hw": np.array([2, 3], np.int64),
        "zero": np.array([0], np.int64),
        "minus_one": np.array([-1], np.int64),
        "halves": np.array([4, 4], np.int64),
        "start": np.array([2], np.int64),
        "end": np.array([6], np.int64),
        "axis1": np.array([1], np.int64),
        "fw": rand(4, 6, seed=9),
    }
    proto = model(
        [
            node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            node("Split", ["c", "halves"], ["c0", "c1"], axis=1),
            node("Add", ["c0", "c1"], ["s"]),
            node("Slice", ["c", "start", "end", "axis1"], ["sl"]),
            node("ReduceMean", ["s", "axes_hw"], ["m"], keepdims=0),
            node("Shape", ["m"], ["shape"]),
            node("Gather", ["shape", "zero"], ["n"], axis=0),
            node("Concat", ["n", "minus_one"], ["target"], axis=0),
            node("Reshape", ["m", "target"], ["flat"]),
            node("MatMul", ["flat", "fw"], ["y"]),
            node("ReduceMean", ["sl", "axes_hw"], ["z"], keepdims=1),
        ],
        {"x": ["s0", 3, 8, 8]},
        {"y": None, "z": None},
        weights,
        opset=18,
    )
    graph = check_against_ort(proto, {"x": rand(1, 3, 8, 8)})
    assert kinds(graph) == [
        *["conv", "split", "add", "slice", "global_avgpool", "reshape", "reshape", "matmul"],
        "global_avgpool",
    ]
    assert graph.plans[3].attrs == {
        "starts": [0, 2, 0, 0],
        "ends": [1, 6, 8, 8],
        "steps": [1, 1, 1, 1],
    }


@pytest.mark.parametrize("opset", [9, 10])
def test_legacy_upsample_and_resize_match_onnxruntime(opset: int) -> None:
    op = "Upsample" if opset == 9 else "Resize"
    proto = model(
        [node(op, ["x", "s"], ["y"], mode="nearest")],
        {"x": [1, 2, 3, 4]},
        {"y": None},
        {"s": np.array([1, 1, 2, 3], np.float32)},
        opset=opset,
    )
    graph = check_against_ort(proto, {"x": rand(1, 2, 3, 4)})
    assert graph.plans[0].attrs["sizes"] == [6, 12]


@pytest.mark.parametrize(
    ("opset", "mode", "rounding"),
    [
        (11, "asymmetric", "floor"),
        (13, "half_pixel", "round_prefer_ceil"),
        (13, "align_corners", "ceil"),
    ],
)
def test_resize_with_sizes_matches_onnxruntime(opset: int, mode: str, rounding: str) -> None:
    consts = {
        "roi": np.zeros(0, np.float32),
        "scales": np.zeros(0, np.float32),
        "sizes": np.array([1, 2, 7, 5], np.int64),
    }
    proto = model(
        [
            node(
                "Resize",
                ["x", "roi", "scales", "sizes"],
                ["y"],
                mode="nearest",
                coordinate_transformation_mode=mode,
                nearest_mode=rounding,
            )
        ],
        {"x": [1, 2, 3, 4]},
        {"y": None},
        consts,
        opset=opset,
    )
    graph = check_against_ort(proto, {"x": rand(1, 2, 3, 4)})
    assert graph.plans[0].attrs["sizes"] == [7, 5]


def test_softmax_before_opset_13_flattens_trailing_axes() -> None:
    proto = model([node("Softmax", ["x"], ["y"], axis=1)], {"x": [2, 3, 4]}, {"y": None}, opset=11)
    graph = check_against_ort(proto, {"x": rand(2, 3, 4)})
    assert kinds(graph) == ["flatten", "softmax", "reshape"]


def test_one_dimensional_conv_runs_as_two_dimensional() -> None:
    weights = {"w": rand(5, 3, 3, seed=4), "b": rand(5, seed=5)}
    proto = model(
        [node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1], strides=[2])],
        {"x": [1, 3, 9]},
        {"y": None},
        weights,
    )
    graph = check_against_ort(proto, {"x": rand(1, 3, 9)})
    assert kinds(graph) == ["reshape", "conv", "reshape"]
    assert graph.plans[1].weights["weight"].shape == (5, 3, 1, 3)
    assert graph.plans[1].attrs["pads"] == [0, 1, 0, 1]


def test_squeeze_unsqueeze_become_reshapes() -> None:
    axes = {"a": np.array([0, 2], np.int64), "b": np.array([0], np.int64)}
    proto = model(
        [node("Unsqueeze", ["x", "a"], ["u"]), node("Squeeze", ["u", "b"], ["y"])],
        {"x": [3, 4]},
        {"y": None},
        axes,
        opset=13,
    )
    graph = check_against_ort(proto, {"x": rand(3, 4)})
    assert kinds(graph) == ["reshape", "reshape"] and graph.outputs[0].shape == (3, 1, 4)


# -- the plan graph itself -------------------------------------------------------------------


def test_validate_and_format() -> None:
    graph = import_onnx(EXAMPLES / "resnet_block.onnx")
    assert "conv" in graph.format() and "note" not in graph.format()
    graph.plans[0].kind = "bogus"
    with pytest.raises(ValueError, match="unknown kind"):
        graph.validate()


def test_reference_checks_input_shapes() -> None:
    graph: PlanGraph = import_onnx(EXAMPLES / "mlp.onnx")
    with pytest.raises(ValueError, match="expected"):
        run_plan_graph(graph, {"x": np.zeros((2, 196), np.float32)})
