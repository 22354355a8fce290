"""Computes that alone would not fit a core's local memory are split by lowering (issue
#23, item 2): a ConvTranspose's zero-inserted input is built as row lanes, and a row-wise op
whose rows do not fit is split into channel chunks; both nets then compile on a small target,
fit it (exit 0 needs that) and simulate to onnxruntime's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from raptor.cli import main

RNG = np.random.default_rng(0)


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.2, name)


def _save(path: Path, nodes: list[onnx.NodeProto], x: tuple[int, ...], y: tuple[int, ...],
          inits: list[onnx.TensorProto]) -> Path:
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _solve(model: Path, tmp_path: Path, memory: int, *extra: str) -> tuple[int, dict]:
    toml = tmp_path / "t.toml"
    toml.write_text(f'name = "small"\nlocal_memory_bytes = {memory}\n')
    out = tmp_path / "out"
    code = main(["solve", str(model), "--solver", "peft", "--target", str(toml),
                 "--out", str(out), *extra])
    return code, json.loads((out / "report.json").read_text())


def test_conv_transpose_zero_insertion_is_row_lanes(tmp_path: Path) -> None:
    """8×16×16 upsampled by 2: the dilated map (8×33×33, 8,712 B) is more than the 6,000 B
    a core has; in row lanes no core holds it."""
    model = _save(tmp_path / "ct.onnx", [helper.make_node(
        "ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], kernel_shape=[3, 3])],
        (1, 8, 16, 16), (1, 8, 33, 33), [_weight("w", 8, 8, 3, 3)])
    code, report = _solve(model, tmp_path, 6000)
    assert code == 0, report


def test_wide_rows_split_into_channel_chunks(tmp_path: Path) -> None:
    """A residual add of 64-channel rows 32 wide (two operands and the sum: 4 to 6 KB a
    lane) on cores of 3,000 B: channel chunks fit."""
    model = _save(tmp_path / "add.onnx", [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"])],
        (1, 64, 4, 32), (1, 64, 4, 32), [])
    code, report = _solve(model, tmp_path, 3000)
    assert code == 0, report
