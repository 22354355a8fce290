"""Small builders shared by the frontend tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from raptor.frontend import PlanGraph, import_onnx, run_plan_graph

Dim = int | str


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, Sequence[Dim]],
    outputs: dict[str, Sequence[Dim] | None],
    weights: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A float32 model from nodes, input/output shapes and initializers."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()],
        [
            helper.make_tensor_value_info(k, TensorProto.FLOAT, None if v is None else list(v))
            for k, v in outputs.items()
        ],
        [numpy_helper.from_array(v, k) for k, v in (weights or {}).items()],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    # Exporters always declare output types; inference fills the ones given as None.
    return onnx.shape_inference.infer_shapes(proto)


def run_ort(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of onnxruntime, keyed by output name."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def check_against_ort(
    proto: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5
) -> PlanGraph:
    """Import, run the reference executor and compare every output with onnxruntime."""
    graph = import_onnx(proto)
    ours = run_plan_graph(graph, feeds)
    theirs = run_ort(proto, feeds)
    assert ours.keys() == theirs.keys()
    for name, expected in theirs.items():
        np.testing.assert_allclose(ours[name], expected, rtol=rtol, atol=atol, err_msg=name)
    return graph


def kinds(graph: PlanGraph) -> list[str]:
    return [plan.kind for plan in graph.plans]


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
