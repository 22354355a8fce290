"""The sweep file: expansion into points, what a point's hash covers, and one clear line for
each kind of bad input (exit 2 from the command line, before any cluster starts)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raptor.cli import main
from raptor.sweep.point import solve_options
from raptor.sweep.spec import SweepError, load_sweep, supported_modes

from .util import EXAMPLES, write_sweep


def test_grid_expands_models_times_combinations(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """
models = ["{examples}/mlp.onnx", "{examples}/lenet.onnx"]
[grid]
crossbars_per_core = [16, 64]
mesh = [[4, 4], [8, 8]]
solver = ["peft", "cpsat"]
[solve]
time_limit = 3
""")
    sweep = load_sweep(path)
    assert sweep.grid_keys == ["crossbars_per_core", "mesh", "solver"]
    assert len(sweep.points) == 2 * 2 * 2 * 2 == sweep.combinations
    first = sweep.points[0]
    assert first.model.label == "mlp" and dict(first.values) == {
        "crossbars_per_core": 16, "mesh": [4, 4], "solver": "peft"}
    assert first.target.crossbars_per_core == 16 and first.target.num_cores == 16
    assert first.option("time_limit") is None  # the heuristic ignores CP-SAT's options
    cp = sweep.points[1]
    assert cp.option("solver") == "cpsat" and cp.option("time_limit") == 3
    assert cp.option("workers") == 2 and cp.option("mode") == "latency"
    # one compilation per (model, target): peft and cpsat of one target share it
    assert first.compile_key == cp.compile_key != sweep.points[2].compile_key
    assert len({p.inputs_hash for p in sweep.points}) == 16
    assert len({p.compile_key for p in sweep.points}) == 8


def test_each_mode_compiles_its_own_lowering(tmp_path: Path) -> None:
    # pipeline mode lowers its own convolution windows (`CompileOptions.pipeline`), so a
    # latency point's cached compilation is not a pipeline point's
    path = write_sweep(tmp_path, """
models = ["{examples}/lenet.onnx"]
[grid]
run = [{mode = "latency", solver = "peft"}, {mode = "pipeline", solver = "pipeline"}]
""")
    latency, pipeline = load_sweep(path).points
    assert latency.compile_key != pipeline.compile_key
    assert [solve_options(p).compile.pipeline for p in (latency, pipeline)] == [False, True]


def test_linked_keys_vary_together_and_ignored_options_merge(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """
models = ["{examples}/mlp.onnx"]
[grid]
crossbar = [{crossbar_rows = 64, crossbar_cols = 64, mvm_cycles = 653},
            {crossbar_rows = 256, crossbar_cols = 256, mvm_cycles = 2610}]
time_limit = [1, 5]
""")
    sweep = load_sweep(path)
    assert sweep.grid_keys == ["crossbar_rows", "crossbar_cols", "mvm_cycles", "time_limit"]
    # PEFT (the default solver) does not read time_limit: 4 combinations, 2 points
    assert sweep.combinations == 4 and len(sweep.points) == 2
    assert "2 distinct points" in sweep.notes[0]
    shapes = [(p.target.crossbar_rows, p.target.crossbar_cols, p.target.mvm_cycles)
              for p in sweep.points]
    assert shapes == [(64, 64, 653), (256, 256, 2610)]
    assert dict(sweep.points[0].values)["time_limit"] is None


def test_hash_follows_inputs(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    shutil.copy(EXAMPLES / "mlp.onnx", model)
    text = 'models = ["m.onnx"]\n[grid]\nsolver = ["cpsat"]\ntime_limit = [2]\n'
    path = write_sweep(tmp_path, text)
    base = load_sweep(path).points[0].inputs_hash
    assert load_sweep(path).points[0].inputs_hash == base  # stable
    write_sweep(tmp_path, text.replace("[2]", "[3]"))
    assert load_sweep(path).points[0].inputs_hash != base  # an option
    write_sweep(tmp_path, text)
    shutil.copy(EXAMPLES / "mlp.npz", tmp_path / "m.npz")
    with_inputs = load_sweep(path).points[0]
    assert with_inputs.inputs_hash != base  # the default inputs beside the model
    model.write_bytes(model.read_bytes() + b"\0")
    changed = load_sweep(path).points[0]
    assert changed.inputs_hash != with_inputs.inputs_hash  # the model's bytes
    assert changed.compile_key != with_inputs.compile_key


@pytest.mark.parametrize(("text", "message"), [
    ('models = ["{examples}/mlp.onnx"]\nbogus = 1\n', "unknown key(s) bogus"),
    ('models = ["{examples}/nothing*.onnx"]\n', "examples/nothing*.onnx'"),
    ('models = ["nets/*.onnx"]\n', "no model matches 'nets/*.onnx' (relative to"),
    ('models = []\n', "models must be a list of paths or globs"),
    ('target = "default"\n', "no models"),
    ('models = ["{examples}/mlp.npz"]\n', "is not an .onnx model file"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nbogus_key = [1]\n', "unknown grid key 'bogus_key'"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\ncrossbars_per_core = [0]\n',
     "must be positive, got 0"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nmesh = [4, 4]\n',
     "mesh = [[4, 4], [8, 8]]"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\ncrossbars_per_core = 16\n',
     "takes a list of values"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\ncrossbars_per_core = []\n', "has no values"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nsolver = ["peft", "peft"]\n', "twice"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nsolver = ["both"]\n', "must be one of"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nsolver = ["pipeline"]\n',
     "does not schedule mode latency"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\ntime_limit = [-1]\n', "positive number"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nmesh_rows = [2]\n[solve]\nmesh_rows = 2\n',
     "in both [grid] and [solve]"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nx = [{crossbar_rows = 64}, {mvm_cycles = 1}]\n',
     "every table must set the same keys"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nx = [{crossbar_rows = 64}]\n'
     'crossbar_rows = [32]\n', "is also set by the linked group 'x'"),
    ('models = ["{examples}/mlp.onnx"]\n[solve]\nworkers = 1.5\n', "positive integer"),
    ('models = ["{examples}/mlp.onnx"]\ntarget = "missing.toml"\n', "cannot read target file"),
    ('models = ["{examples}/mlp.onnx"]\n[solve]\nrules = "no-such-dir"\n', "does not exist"),
    ('models = ["{examples}/mlp.onnx"\n', "cannot parse sweep file"),
    ('models = ["{examples}/mlp.onnx"]\n[grid]\nmesh = [[1, 1]]\ncrossbars_per_core = [1]\n'
     'vector_lanes = [0]\n', "point (mesh=[1, 1], crossbars_per_core=1, vector_lanes=0)"),
])
def test_bad_sweep_files_are_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    path = write_sweep(tmp_path, text)
    with pytest.raises(SweepError, match=None) as info:
        load_sweep(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    cap = capsys.readouterr()
    assert cap.err.strip().endswith(str(info.value).split(": ", 1)[-1])
    assert len(cap.err.strip().splitlines()) == 1 and "Traceback" not in cap.err
    assert not (tmp_path / "out").exists()  # nothing ran


def test_cli_usage_errors_and_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    path = write_sweep(tmp_path, 'models = ["{examples}/mlp.onnx"]\n[grid]\n'
                       'crossbars_per_core = [16, 64]\n')
    assert main(["sweep", str(path), "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"]) == 2
    assert "--workers sizes the local cluster" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read sweep file" in capsys.readouterr().err
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "2 points" in out and out.count("mlp") >= 2
    assert not (tmp_path / "o").exists()


def test_pipeline_mode_follows_what_solve_supports(tmp_path: Path) -> None:
    """Refused with a clear line until `raptor.solve` has pipeline mode (issue 10), then a
    grid over modes pairs each with its own solvers."""
    path = write_sweep(tmp_path, 'models = ["{examples}/mlp.onnx"]\n[grid]\n'
                       'mode = ["latency", "pipeline"]\nsolver = ["cpsat"]\n')
    if "pipeline" not in supported_modes():
        with pytest.raises(SweepError, match="mode = 'pipeline': 'pipeline' is not supported "
                           "by this raptor's solve yet \\(supported: latency\\)"):
            load_sweep(path)
    else:
        sweep = load_sweep(path)
        assert [p.option("mode") for p in sweep.points] == ["latency", "pipeline"]
