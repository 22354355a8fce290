"""Input files and input options of `raptor solve / interpret / inspect`: supplied inputs
bound as constants, --input-shape, positional keys, the sibling MODEL.npz, and one exact
line with exit 2 for each class of bad input file, found before any layout planning."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from raptor.cli import main


def conv_model(path: Path) -> Path:
    """x [N, 3, H, W] (dynamic), weight w [4, 3, 3, 3] a graph input (export_params=False),
    bias an initializer, a Reshape whose shape operand s is an int64 graph input."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "s"], ["y"], name="flat"),
    ]
    graph = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "F"])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32) / 10, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    out = path / "m.onnx"
    onnx.save(proto, out)
    return out


def good_inputs(**extra: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((1, 3, 6, 5)).astype(np.float32),
            "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "s": np.array([1, -1], dtype=np.int64), **extra}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("note:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_inputs_bind_weights_and_shape_operands(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    model = conv_model(tmp_path)
    np.savez(tmp_path / "x.npz", **good_inputs())
    code, out, err = run(capsys, "interpret", str(model), "--inputs", str(tmp_path / "x.npz"),
                         "--check", "--out", str(tmp_path / "y.npz"))
    assert code == 0, err
    assert "note: bound as constants: w, s" in err
    assert "check against onnxruntime" in out
    with np.load(tmp_path / "y.npz") as y:
        assert y["y"].shape == (1, 4 * 6 * 5)


def test_constants_file_and_input_shape(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Weights from --constants, dynamic H and W from --input-shape, data random."""
    model = conv_model(tmp_path)
    values = good_inputs()
    np.savez(tmp_path / "c.npz", w=values["w"], s=values["s"])
    code, out, err = run(capsys, "interpret", str(model), "--constants", str(tmp_path / "c.npz"),
                         "--input-shape", "x=1x3x4x7", "--check")
    assert code == 0, err
    assert "1x112" in out and "random normal (seed 0)" in out


def test_solve_report_lists_file_and_bound_inputs(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    model = conv_model(tmp_path)
    np.savez(tmp_path / "in.npz", **good_inputs())
    code, out, err = run(capsys, "solve", str(model), "--inputs", str(tmp_path / "in.npz"),
                         "--solver", "peft", "--out", str(tmp_path / "o"))
    assert code == 0, err
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["inputs"] == str(tmp_path / "in.npz")
    assert rep["bound_inputs"] == ["w", "s"] and rep["oracle"] == "onnxruntime"
    assert rep["schedules"]["peft"]["numerics"]["ok"]
    assert "(bound as constants: w, s)" in " ".join(out.split())


def test_positional_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = conv_model(tmp_path)
    values = good_inputs()
    # arr_K (unnamed arrays) are refused for a model of several inputs (#29); input_K is
    # a deliberate position
    np.savez(tmp_path / "p.npz", input_0=values["x"], input_1=values["w"], input_2=values["s"])
    code, _, err = run(capsys, "interpret", str(model), "--inputs", str(tmp_path / "p.npz"),
                       "--check")
    assert code == 0, err


def test_sibling_npz_used_only_when_keys_are_inputs(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    model = conv_model(tmp_path)
    np.savez(tmp_path / "m.npz", **good_inputs())
    code, out, err = run(capsys, "interpret", str(model))
    assert code == 0 and f"inputs: {tmp_path / 'm.npz'}" in out.replace("\n", ""), err
    code, _, err = run(capsys, "interpret", str(model), "--no-sample-inputs")
    assert code == 2
    assert one_line(err) == (f"{model}: input 's' has element type INT64 and no value; only "
                             "float32 inputs are computed, other inputs are bound as constants: "
                             "supply it with --inputs X.npz or --constants C.npz")
    values = good_inputs()
    np.savez(tmp_path / "m.npz", image=values["x"])
    np.savez(tmp_path / "c.npz", w=values["w"], s=values["s"])
    code, out, err = run(capsys, "interpret", str(model), "--constants", str(tmp_path / "c.npz"),
                         "--input-shape", "x=1x3x5x5")
    assert code == 0, err
    assert (f"note: {tmp_path / 'm.npz'} beside the model was ignored: its arrays (image) are "
            "not graph inputs (s, w, x)") in err
    assert "random normal (seed 0)" in out


def _zip_with_header(shape: tuple[int, ...], data: bytes = b"1234",
                     descr: str = "<f4") -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False,
                                                  "shape": shape})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x.npy", header.getvalue() + data)
        w = io.BytesIO()
        np.save(w, good_inputs()["w"])
        z.writestr("w.npy", w.getvalue())
    return buf.getvalue()


def _bad_file(kind: str, path: Path) -> None:
    values = good_inputs()
    if kind == "text":
        path.write_text("1 2 3\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        np.savez(path, **values)
        path.write_bytes(path.read_bytes()[:300])
    elif kind == "huge header":
        path.write_bytes(_zip_with_header((1, 3, 100000, 100000)))
    elif kind == "header beyond data":
        path.write_bytes(_zip_with_header((1, 3, 64, 64)))
    elif kind == "pickle":
        np.savez(path, x=np.array([1, "a", None], dtype=object), allow_pickle=True)
    elif kind == "datetime":
        np.savez(path, x=np.array(["2020-01-01"], dtype="datetime64[s]"))
    elif kind == "nan":
        values["x"][0, 0, 0, 0] = np.nan
        np.savez(path, **values)
    elif kind == "shape":
        np.savez(path, **{**values, "x": np.zeros((1, 4, 6, 5), np.float32)})
    elif kind == "key":
        np.savez(path, image=values["x"], w=values["w"], s=values["s"])
    elif kind == "missing input":
        np.savez(path, w=values["w"], s=values["s"])


BAD_FILES = {
    "text": "{f}: cannot read inputs: not a NumPy .npz or .npy file (write them with "
            "numpy.savez, keyed by graph input name)",
    "empty": "{f}: cannot read inputs: an empty file (write them with numpy.savez, keyed by "
             "graph input name)",
    "truncated": "{f}: cannot read inputs: truncated or corrupt .npz (not a valid zip "
                 "archive)",
    "huge header": "{f}: array 'x' has shape [1, 3, 100000, 100000]; inputs must be non-empty "
                   "and at most 268,435,456 elements",
    "header beyond data": "{f}: array 'x' claims shape [1, 3, 64, 64] (49,152 bytes) but the "
                          "file holds 4 bytes of it (truncated or corrupt)",
    "pickle": "{f}: array 'x' has dtype object; inputs must be numeric (float32, or integers "
              "for shape operands)",
    "datetime": "{f}: array 'x' has dtype datetime64[s]; inputs must be numeric (float32, or "
                "integers for shape operands)",
    "nan": "{f}: array 'x' (input 'x') has 1 non-finite values (NaN or Inf); pass "
           "--allow-nonfinite to use them",
    "shape": "{f}: array 'x' has shape [1, 4, 6, 5] but input 'x' of {m} is [N, 3, H, W]",
    "key": "{f}: array 'image' is not a graph input (inputs: x, w, s; positional keys "
           "input_0, arr_0 ... also work)",
    "missing input": "{f}: no array for input 'x' (has: w, s)",
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
@pytest.mark.parametrize("command", ["solve", "interpret"])
def test_bad_input_file_one_line_exit_2_before_layout(
        kind: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = conv_model(tmp_path)
    bad = tmp_path / "bad.npz"
    _bad_file(kind, bad)

    def no_layout(*args: object, **kwargs: object) -> None:
        raise AssertionError("layout planning ran before the input file was checked")

    monkeypatch.setattr("raptor.passes.layout.select_layouts", no_layout)
    out_dir = tmp_path / "out"
    extra = ["--out", str(out_dir)] if command == "solve" else []
    code, out, err = run(capsys, command, str(model), "--inputs", str(bad), *extra)
    assert code == 2 and out == ""
    assert one_line(err) == BAD_FILES[kind].format(f=bad, m=model)
    assert not out_dir.exists()


def test_nonfinite_allowed_with_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     recwarn: pytest.WarningsRecorder) -> None:
    """NaN/Inf propagate like onnxruntime's (same places, at one pixel per MVM: a window's
    zero weights times Inf are NaN, docs/frontend.md), without numpy warnings."""
    model = conv_model(tmp_path)
    values = good_inputs()
    values["x"][0, 0, :3, :3], values["x"][0, 1, :3, :3] = np.inf, -np.inf
    np.savez(tmp_path / "inf.npz", **values)
    (tmp_path / "one.toml").write_text("conv_window_max = 1\n")
    args = ["--inputs", str(tmp_path / "inf.npz"), "--allow-nonfinite", "--target",
            str(tmp_path / "one.toml")]
    code, out, err = run(capsys, "interpret", str(model), *args, "--check")
    assert code == 0, err
    assert "nan" in out
    code, out, err = run(capsys, "solve", str(model), *args, "--solver", "peft", "--out",
                         str(tmp_path / "o"))
    assert code == 0, err
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_txt_and_missing_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = conv_model(tmp_path)
    txt = tmp_path / "in.txt"
    txt.write_text("0.5 0.25\n")
    code, _, err = run(capsys, "solve", str(model), "--inputs", str(txt))
    assert code == 2 and "allow_pickle" not in err
    assert one_line(err).startswith(f"{txt}: cannot read inputs: not a NumPy .npz")
    code, _, err = run(capsys, "interpret", str(model), "--inputs", str(tmp_path / "no.npz"))
    assert (code, one_line(err)) == (2, f"{tmp_path / 'no.npz'}: cannot read inputs: no such "
                                        "file")


@pytest.mark.parametrize(("shape", "message"), [
    (["x=1x3x4"], "{m}: input 'x' has rank 4 (shape [N, 3, H, W]) but the given shape 1x3x4 "
                  "has rank 3"),
    (["x=1x4x8x8"], "{m}: input 'x' has size 3 at axis 1 (shape [N, 3, H, W]), but the given "
                    "shape has 4"),
    (["y=1x3x8x8"], "{m}: a shape is given for 'y', which is not a graph input (inputs: x)"),
    ([], "{m}: input 'x' has a dynamic dimension 'H' at axis 2 (shape [N, 3, H, W]); set it "
         "with --input-shape x=1x3xHxW or supply the input with --inputs"),
])
def test_input_shape_errors(shape: list[str], message: str, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    model = conv_model(tmp_path)
    values = good_inputs()
    np.savez(tmp_path / "c.npz", w=values["w"], s=values["s"])
    args = [a for s in shape for a in ("--input-shape", s)]
    code, _, err = run(capsys, "inspect", str(model), "--constants", str(tmp_path / "c.npz"),
                       *args)
    assert (code, one_line(err)) == (2, message.format(m=model))


def test_input_shape_syntax_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", "m.onnx", "--input-shape", "x=1x?x4"])
    assert exit_.value.code == 2
    assert "expected NAME=AxBx... with positive sizes" in capsys.readouterr().err


def test_batch_above_one_compiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = conv_model(tmp_path)
    values = good_inputs()
    np.savez(tmp_path / "in.npz", **{**values, "x": np.ones((2, 3, 4, 4), np.float32),
                                     "s": np.array([2, -1])})
    code, out, err = run(capsys, "interpret", str(model), "--inputs", str(tmp_path / "in.npz"),
                         "--check")
    assert code == 0, err
    assert "2x64" in out


def test_shape_from_file_that_the_network_cannot_take(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Dynamic dims accept any size, but the error names the file the sizes came from."""
    model = conv_model(tmp_path)
    bad = tmp_path / "in.npz"
    np.savez(bad, **good_inputs(x=np.ones((1, 3, 1, 1), np.float32), s=np.array([3, -1])))
    code, _, err = run(capsys, "solve", str(model), "--inputs", str(bad))
    assert (code, one_line(err)) == (
        2, f"{model}: Reshape node 'flat': cannot reshape [1, 4, 1, 1] to [3, 1] (with the "
           f"input shapes of {bad}: x [1, 3, 1, 1])")


def test_interpret_spat_without_its_input_is_exit_2(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An input file that binds no argument of the IR's main function is the user's input
    error (exit 2, one line), distinct from a failure inside the interpreter."""
    bogus = tmp_path / "bogus.npz"
    np.savez(bogus, zzz=np.zeros(3, np.float32))
    spat = Path(__file__).parents[1] / "examples" / "column_pairs.spat"
    code, _, err = run(capsys, "interpret", str(spat), "--inputs", str(bogus))
    assert code == 2
    assert one_line(err) == f"{spat}: no input for argument %x of @main (given: zzz)"
