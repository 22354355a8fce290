"""Inputs that look valid and were accepted (or failed late) before the random-network
campaign (#29): each is now one clear line with exit 2 (a rule file's, exit 1 under
`raptor rules check`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import raptor.cli as cli
from examples.build_examples import NetBuilder
from raptor.rewrite.eggfile import shipped_rules_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _two_inputs(tmp_path: Path) -> str:
    b = NetBuilder(1)
    model = b.model("two", {"a": [1, 2, 3, 3], "b": [1, 2, 3, 3]},
                    b.node("Add", ["a", "b"], out="y"))
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    return str(path)


def _ceil_mode_2(m: onnx.ModelProto) -> None:
    m.graph.node[-1].attribute.append(helper.make_attribute("ceil_mode", 2))


def _undefined_output(m: onnx.ModelProto) -> None:
    m.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.UNDEFINED
    del m.graph.value_info[:]


def _no_output(m: onnx.ModelProto) -> None:
    del m.graph.output[:]


def _model(tmp_path: Path, last: str, edit: Callable[[onnx.ModelProto], None]) -> str:
    b = NetBuilder(1)
    x = b.conv("x", 2, 2, 3)
    y = (b.node(last, [x], out="y", kernel_shape=[2, 2], strides=[2, 2]) if "Pool" in last
         else b.node(last, [x], out="y"))
    model = b.model("m", {"x": [1, 2, 5, 5]}, y)
    edit(model)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return str(path)


@pytest.mark.parametrize(("last", "edit", "message"), [
    ("MaxPool", _ceil_mode_2, "{m}: MaxPool node 'y': attribute ceil_mode=2 must be 0 or 1"),
    ("AveragePool", _ceil_mode_2,
     "{m}: AveragePool node 'y': attribute ceil_mode=2 must be 0 or 1"),
    ("Relu", _undefined_output,
     "{m}: graph output 'y' has no element type (UNDEFINED); declare it float32"),
    ("Relu", _no_output, "{m}: the graph declares no outputs; nothing to compute"),
])
@pytest.mark.parametrize("command", [["solve", "--solver", "peft"], ["interpret", "--check"]])
def test_invalid_models_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    last: str, edit: Callable[[onnx.ModelProto], None],
                                    message: str, command: list[str]) -> None:
    """ceil_mode 2 ran as ceil_mode 1 (onnxruntime refuses it) and an UNDEFINED output was
    computed as float32 (onnxruntime cannot load the model)."""
    m = _model(tmp_path, last, edit)
    code = cli.main([command[0], m, *command[1:], "--out", str(tmp_path / "out")])
    assert (code, capsys.readouterr().err.strip()) == (2, message.format(m=m))


@pytest.mark.parametrize("write", [
    lambda p, a: np.save(p.with_suffix(".npy"), a),
    lambda p, a: np.savez(p.with_suffix(".npz"), a, a),
])
def test_unnamed_arrays_for_a_multi_input_model_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        write: Callable[[Path, np.ndarray], None]) -> None:
    """An .npy (or numpy.savez without keywords) went to the first input by position."""
    model = _two_inputs(tmp_path)
    write(tmp_path / "in", np.ones((1, 2, 3, 3), np.float32))
    path = next(tmp_path.glob("in.*"))
    code = cli.main(["solve", model, "--solver", "peft", "--inputs", str(path)])
    assert (code, capsys.readouterr().err.strip()) == (2, (
        f"{path}: array 'arr_0' is unnamed (an .npy file, or numpy.savez without keywords) "
        "but the model has 2 inputs (a, b); key each array by input name "
        "(numpy.savez(FILE, a=...)) or input_K"))


def test_unnamed_array_for_a_one_input_model_is_its_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", np.ones((1, 1, 32, 32), np.float32))
    assert cli.main(["interpret", str(EXAMPLES / "lenet.onnx"), "--inputs",
                     str(tmp_path / "x.npy")]) == 0


def test_rules_deriving_an_unknown_layout_fail_rules_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Renaming `DenseNCHW` in layout.egg passed `raptor rules check`; `raptor solve` then
    wrote IR the verifier rejected after the layout pass ("this is a compiler bug")."""
    rules = tmp_path / "rules"
    shutil.copytree(shipped_rules_dir(), rules)
    egg = rules / "layout.egg"
    egg.write_text(egg.read_text().replace("DenseNCHW", "DenseNCHX"))
    line = (f"{egg}: error: the layout rules derive layout 'DenseNCHX', which Raptor does "
            "not implement (known: DenseNCHW, NHWCRowStrip, Fragmented, NCHWRowStrip)")
    assert cli.main(["rules", "check", str(rules)]) == 1
    assert capsys.readouterr().err.strip() == line
    assert cli.main(["solve", str(EXAMPLES / "lenet.onnx"), "--solver", "peft", "--rules",
                     str(rules)]) == 2
    assert capsys.readouterr().err.strip() == line


@pytest.mark.parametrize(("op", "what"), [("MaxPool", "maximum"), ("AveragePool", "mean")])
def test_a_pool_window_over_padding_only_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], op: str, what: str) -> None:
    """A 2-tap window dilated by 2 around a 1-row input reads the two padding rows only:
    onnxruntime answers -3.4e38 (max) or NaN (mean without the pads), Raptor -inf: the
    harness saw it as `outputs differ` (net 1142)."""
    b = NetBuilder(1)
    y = b.node(op, [b.node("Relu", ["x"])], out="y", kernel_shape=[2, 1], dilations=[2, 1],
               pads=[1, 0, 1, 0], strides=[2, 1])
    path = tmp_path / "pool.onnx"
    onnx.save(b.model("pool", {"x": [1, 2, 1, 5]}, y, opset=19), path)  # dilated AveragePool
    assert cli.main(["interpret", str(path), "--check"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{path}: {op} node 'y': a window over padding only (output 0 along spatial axis 0 "
        f"of input [1, 2, 1, 5]) is not supported: its {what} is undefined")
