"""ONNX backend node test cases, materialized from ``onnx.backend.test.case`` generators.

onnx 1.23 no longer ships the backend test data; its Python generators still build each
case (model, inputs, expected outputs) when their module is imported, seeded with 0. Raptor
stores weights on crossbars, so every input but the data tensor becomes an initializer
(weights, bias, scales, shape operands...), except for operators whose other operands are
activations by nature (Add, Sub, Mul, Concat). MatMul is run both ways.
"""

from __future__ import annotations

import copy
import functools
import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["CASE_MODULES", "OPS", "OnnxCase", "node_cases"]

#: modules of ``onnx.backend.test.case.node`` whose operators the frontend imports
CASE_MODULES = (
    "unsqueeze",
    "squeeze",
    "pad",
    "globalmaxpool",
    "elu",
    "neg",
    "min",
    "max",
    "div",
    "add",
    "averagepool",
    "batch_normalization",
    "clip",
    "concat",
    "conv",
    "convtranspose",
    "dropout",
    "flatten",
    "gemm",
    "globalaveragepool",
    "hardsigmoid",
    "hardswish",
    "identity",
    "leakyrelu",
    "matmul",
    "maxpool",
    "mul",
    "prelu",
    "reducemean",
    "relu",
    "reshape",
    "resize",
    "sigmoid",
    "slice",
    "softmax",
    "split",
    "sub",
    "swish",
    "tanh",
    "transpose",
    "upsample",
)

#: the operators those modules test
OPS = frozenset(
    {
        "Unsqueeze",
        "Squeeze",
        "Pad",
        "GlobalMaxPool",
        "Elu",
        "Neg",
        "Min",
        "Max",
        "Div",
        "Add",
        "AveragePool",
        "BatchNormalization",
        "Clip",
        "Concat",
        "Conv",
        "ConvTranspose",
        "Dropout",
        "Flatten",
        "Gemm",
        "GlobalAveragePool",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "LeakyRelu",
        "MatMul",
        "MaxPool",
        "Mul",
        "PRelu",
        "ReduceMean",
        "Relu",
        "Reshape",
        "Resize",
        "Sigmoid",
        "Slice",
        "Softmax",
        "Split",
        "Sub",
        "Swish",
        "Tanh",
        "Transpose",
        "Upsample",
    }
)
_ACTIVATION_OPERANDS = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Concat"}


@dataclass(frozen=True)
class OnnxCase:
    """One backend test case with its weight-like inputs turned into initializers."""

    name: str
    op: str
    model: onnx.ModelProto
    inputs: dict[str, Any]
    outputs: dict[str, np.ndarray]


def _freeze(
    model: onnx.ModelProto, values: list[Any], keep: int
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Turn graph inputs from position ``keep`` on into initializers; return the rest as feeds."""
    frozen = copy.deepcopy(model)
    graph = frozen.graph
    feeds: dict[str, Any] = {}
    kept = []
    for position, (value_info, value) in enumerate(zip(graph.input, values, strict=True)):
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if position < keep or not isinstance(value, np.ndarray):
            kept.append(value_info)
            feeds[value_info.name] = value
        else:
            graph.initializer.append(numpy_helper.from_array(value, value_info.name))
    del graph.input[:]
    graph.input.extend(kept)
    return frozen, feeds


@functools.cache
def node_cases() -> tuple[OnnxCase, ...]:
    """All cases of ``CASE_MODULES``, generated once per process (seeded, deterministic)."""
    node_module = importlib.import_module("onnx.backend.test.case.node")
    for module in CASE_MODULES:
        importlib.import_module(f"onnx.backend.test.case.node.{module}")
    generated = node_module._NodeTestCases
    ops = {
        case.name: case.model.graph.node[0].op_type
        for case in generated
        if len(case.model.graph.node) == 1
    }
    cases = []
    for case in generated:
        op = ops.get(case.name.split("_expanded")[0], "")
        if op not in OPS:
            continue
        (inputs, outputs), *_ = case.data_sets
        keep = len(inputs) if op in _ACTIVATION_OPERANDS else 1
        variants = [(case.name, keep)]
        if op == "MatMul":
            variants.append((f"{case.name}_activations", len(inputs)))
        expected = {
            value.name: np.asarray(array)
            for value, array in zip(case.model.graph.output, outputs, strict=True)
        }
        for name, kept in variants:
            model, feeds = _freeze(case.model, list(inputs), kept)
            cases.append(OnnxCase(name, op, model, feeds, expected))
    return tuple(cases)
