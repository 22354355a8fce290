"""`raptor solve`, `inspect`, `interpret MODEL.onnx`, `rules check`, `target show` from the
command line: results, files written, and one clear line with the right exit code for bad
input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from raptor.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_solve_writes_report_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    out = tmp_path / "out"
    code, stdout, err = run(["solve", str(EXAMPLES / "mlp.onnx"), "--time-limit", "3",
                             "--workers", "1", "--out", str(out)], capsys)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    assert rep["model"].endswith("mlp.onnx") and rep["mode"] == "latency"
    assert rep["crossbars"] == 10 and rep["tasks"] > 0 and rep["edges"] > 0
    assert set(rep["schedules"]) == {"peft", "cpsat"}
    for name, s in rep["schedules"].items():
        assert s["estimate_ns"] >= rep["lower_bound_ns"]
        assert s["valid"] and s["cores_used"] >= 1
        assert s["simulated_ns"] >= rep["lower_bounds"]["critical_path_ns"]
        # without contention the shipped program never takes longer than the estimate
        assert rep["lower_bounds"]["critical_path_ns"] <= s["ideal_simulated_ns"] \
            <= s["estimate_ns"]
        assert s["numerics"]["ok"], s["numerics"]
        for f in (f"gantt.{name}.svg", f"scheduled.{name}.spat", f"trace.{name}.json",
                  f"outputs.{name}.npz"):
            assert (out / f).stat().st_size > 0
        with np.load(out / f"outputs.{name}.npz") as o:
            assert list(o.files) == ["gemm11"]
    assert rep["schedules"]["cpsat"]["estimate_ns"] <= rep["schedules"]["peft"]["estimate_ns"]
    assert rep["schedules"]["cpsat"]["status"].split()[0] in ("OPTIMAL", "FEASIBLE")
    assert "peft" in stdout and "cpsat" in stdout and "simulated" in stdout
    assert code == main(["verify", str(out / "scheduled.peft.spat"), "-q"])


def test_solve_json_no_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["solve", str(EXAMPLES / "lenet.onnx"), "--solver", "peft",
                           "--no-simulate", "--json", "--out", str(tmp_path)], capsys)
    assert code == 0
    rep = json.loads(stdout)
    assert list(rep["schedules"]) == ["peft"]
    assert rep["schedules"]["peft"]["simulated_ns"] is None
    assert rep["schedules"]["peft"]["ideal_simulated_ns"] is None
    assert rep["layouts"]["NHWCRowStrip"] > 0
    assert rep["rules"]["fired"]
    # LeNet's conv→relu→pool→conv chain: the spec's local search stays all dense, the exact
    # selector finds the cheaper row-strip assignment
    costs = rep["layout_costs"]
    assert costs["iterative"] == costs["disabled"] == 0 > costs["exact"]


def _model_with(node: onnx.NodeProto, shape: list[int | str]) -> onnx.ModelProto:
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


BAD: dict[str, tuple[bytes | onnx.ModelProto, str]] = {
    "not_onnx": (b"this is not a model\n", "cannot parse"),
    "truncated": (b"", "truncated"),
    "unsupported_op": (_model_with(helper.make_node("Sin", ["x"], ["y"], name="sine"),
                                   [1, 4]), "unsupported operator Sin"),
    "dynamic_dim": (_model_with(helper.make_node("Relu", ["x"], ["y"]), [1, 3, "H", 8]),
                    "dynamic dimension"),
}


@pytest.mark.parametrize("command", ["solve", "interpret", "inspect"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_models_give_one_line_exit_2(case: str, command: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    data, expect = BAD[case]
    path = tmp_path / "bad.onnx"
    if case == "truncated":
        data = (EXAMPLES / "mlp.onnx").read_bytes()[:200]
    path.write_bytes(data if isinstance(data, bytes) else data.SerializeToString())
    code, _, err = run([command, str(path), "--out" if command == "solve" else "--target",
                        str(tmp_path / "o") if command == "solve" else "default"], capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and expect in lines[0] and "Traceback" not in err


def test_model_too_large_for_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "tiny.toml"
    small.write_text("mesh = [1, 2]\ncrossbars_per_core = 2\n")
    code, _, err = run(["solve", str(EXAMPLES / "mlp.onnx"), "--target", str(small),
                        "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert "needs 10 crossbars" in err and "2 cores x 2 crossbars = 4" in err
    code, _, err = run(["inspect", str(EXAMPLES / "mlp.onnx"), "--target", str(small)], capsys)
    assert code == 1 and "needs 10 crossbars" in err


def test_bad_target_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.toml"
    bad.write_text("mesh_rows = -1\n")
    code, _, err = run(["inspect", str(EXAMPLES / "mlp.onnx"), "--target", str(bad)], capsys)
    assert code == 2 and "mesh_rows" in err
    code, _, err = run(["solve", str(tmp_path / "missing.onnx")], capsys)
    assert code == 2 and "missing.onnx" in err


def test_inspect_reports_crossbars(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["inspect", str(EXAMPLES / "mobilenet_block.onnx")], capsys)
    assert code == 0
    assert "total" in stdout and "7 of 4096 crossbars" in stdout


def test_rules_check_and_target_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    code, stdout, _ = run(["rules", "check"], capsys)
    assert code == 0 and "layout.egg" in stdout and "canonicalize.egg" in stdout
    broken = tmp_path / "rules"
    broken.mkdir()
    (broken / "layout.egg").write_text("(relation Foo (i64))\n(rule ((Foo x)) ((Bar x)) "
                                       ':name "r")\n')
    code, _, err = run(["rules", "check", str(broken)], capsys)
    assert code == 1 and "layout.egg:2:" in err
    code, stdout, _ = run(["target", "show"], capsys)
    assert code == 0 and "mvm_cycles" in stdout and "1305" in stdout


def test_help_explains_every_command() -> None:
    for cmd in ([], ["solve"], ["inspect"], ["rules", "check"], ["target", "show"]):
        proc = subprocess.run([sys.executable, "-m", "raptor.cli", *cmd, "--help"],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0 and "usage: raptor" in proc.stdout


@pytest.mark.parametrize("flag", [["--time-limit", "-1"], ["--workers", "0"],
                                  ["--solver", "foo"], ["--export-order-steps", "-1"],
                                  ["--export-order-steps", "two"]])
def test_bad_options_are_usage_errors(flag: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["solve", str(EXAMPLES / "mlp.onnx"), *flag])
    assert e.value.code == 2
