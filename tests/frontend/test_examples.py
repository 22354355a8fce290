"""The committed example models import to the expected plans and match onnxruntime."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest

from .util import check_against_ort, kinds

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

EXPECTED_KINDS = {
    "mlp": ["gemm", "relu", "gemm", "relu", "gemm"],
    "lenet": [
        *["conv", "relu", "maxpool"] * 2,
        *["flatten", "gemm", "relu", "gemm", "relu", "gemm"],
    ],
    # Both BatchNormalizations fold into their convolutions.
    "resnet_block": ["conv", "relu", "conv", "add", "relu"],
    "mobilenet_block": ["conv", "clip", "conv", "clip", "conv", "add"],
    # x * Sigmoid(x) in either operand order becomes one silu.
    "yolo_neck": [
        *["conv", "silu", "maxpool", "maxpool", "maxpool", "concat", "conv", "silu"],
        *["resize_nearest", "concat", "conv", "silu"],
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_KINDS))
def test_example_matches_onnxruntime(name: str) -> None:
    proto = onnx.load(EXAMPLES / f"{name}.onnx")
    feeds = dict(np.load(EXAMPLES / f"{name}.npz"))
    assert set(feeds) == {value.name for value in proto.graph.input}
    graph = check_against_ort(proto, feeds, rtol=1e-4, atol=1e-5)
    assert kinds(graph) == EXPECTED_KINDS[name]


def test_mobilenet_depthwise_keeps_groups() -> None:
    graph = check_against_ort(
        onnx.load(EXAMPLES / "mobilenet_block.onnx"),
        dict(np.load(EXAMPLES / "mobilenet_block.npz")),
    )
    depthwise = graph.plans[2]
    assert depthwise.attrs["group"] == 64 and depthwise.weights["weight"].shape == (64, 1, 3, 3)
    assert graph.plans[1].attrs == {"min": 0.0, "max": 6.0}


def test_committed_examples_are_current() -> None:
    """The builder still produces the committed graphs (same ops, initializer names, shapes)."""
    spec = importlib.util.spec_from_file_location("build_examples", EXAMPLES / "build_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, build in module.EXAMPLES.items():
        committed = onnx.load(EXAMPLES / f"{name}.onnx")
        rebuilt = build()
        assert [n.op_type for n in rebuilt.graph.node] == [n.op_type for n in committed.graph.node]
        assert [(t.name, list(t.dims)) for t in rebuilt.graph.initializer] == [
            (t.name, list(t.dims)) for t in committed.graph.initializer
        ]


TORCH_KINDS = {
    # TorchScript: torch.chunk becomes Shape/Gather/Div/Slice arithmetic, folded to two slices.
    "torch_cnn_torchscript": [
        *["conv", "relu", "slice", "slice", "conv", "conv", "silu", "resize_nearest"],
        *["concat", "maxpool", "global_avgpool", "flatten", "gemm"],
    ],
    # Dynamo: Split on channels, ReduceMean over H,W and Reshape instead of Flatten.
    "torch_cnn_dynamo": [
        *["conv", "relu", "split", "conv", "conv", "silu", "resize_nearest"],
        *["concat", "maxpool", "global_avgpool", "reshape", "gemm"],
    ],
}


@pytest.mark.parametrize("name", sorted(TORCH_KINDS))
def test_torch_exports_match_onnxruntime(name: str) -> None:
    """Files written by examples/export_torch.py (committed, so torch is not needed here)."""
    proto = onnx.load(EXAMPLES / f"{name}.onnx")
    graph = check_against_ort(proto, dict(np.load(EXAMPLES / "torch_cnn.npz")))
    assert kinds(graph) == TORCH_KINDS[name]
    assert graph.notes == ["batch dimension 'batch' of input 'x' bound to 1 (--input-shape sets "
                           "another size)"]
