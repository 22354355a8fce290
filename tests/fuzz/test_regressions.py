"""One minimal input per failure class the fuzz suite found: targets, the command line's last
line of defence, warnings, the mesh tables, the simulator's buffers, crossbar capacity, rule
files, input files, ONNX models and IR text. Each asserts the exact one-line message and exit
code, and nothing left in --out."""

from __future__ import annotations

import json
import shutil
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import raptor.cli as cli
from raptor.ir.parser import parse_module
from raptor.rewrite.eggfile import shipped_rules_dir
from raptor.sim import SimError, Simulator
from raptor.solver.mesh import Mesh, nearest_cores
from raptor.target import Target, load_target

from .mutators import make_case

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MLP = str(EXAMPLES / "mlp.onnx")
HINT = ("this is a bug in Raptor, please report it with the command and its input files "
        "(--debug shows the traceback)")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _target(tmp_path: Path, data: bytes | str) -> str:
    path = tmp_path / "t.toml"
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return str(path)


# ------------------------------------------------------------------ target files
@pytest.mark.parametrize(("data", "message"), [
    # binary bytes (was UnicodeDecodeError)
    (b"mesh = [4, 4]\n\xff\xfe\n", "{t}:2:1: target file is not UTF-8 text (byte 0xff)"),
    # a mesh of 10^12 cores (was MemoryError in solver/mesh.py)
    ("mesh = [1000000, 1000000]\n",
     "{t}: target mesh 1,000,000x1,000,000 has 1,000,000,000,000 cores; at most 4,096 are "
     "supported"),
    ("mesh = [4611686018427387904, 3]\n",
     "{t}: target mesh 4.61e18x3 has 1.38e19 cores; at most 4,096 are supported"),
    # costs that overflowed int64 in solver/peft.py and solver/mesh.py
    ("mvm_cycles = 9223372036854775807\n",
     "{t}: target key 'mvm_cycles' must be between 1 and 1,000,000, got 9223372036854775807"),
    ("hop_cycles = 100000000000000000000\n",
     "{t}: target key 'hop_cycles' must be between 1 and 1,000,000, got 100000000000000000000"),
    ("clock_ghz = 1e-300\n", "{t}: target key 'clock_ghz' must be between 0.01 and 100, got "
     "1e-300"),
    ("clock_ghz = nan\n", "{t}: target key 'clock_ghz' must be positive, got nan"),
    ("crossbar_rows = 1979-05-27\n",
     "{t}: target key 'crossbar_rows' must be an integer, got datetime.date(1979, 5, 27)"),
    ('name = "a\\nb"\n', "{t}: target key 'name' must be 1 to 64 printable characters, got "
     "'a\\nb'"),
    ('"a\\nb" = 1\n', "{t}: unknown target key(s) 'a\\nb'; known keys: mesh, name, clock_ghz, "
     "mesh_rows, mesh_cols, crossbars_per_core, crossbar_rows, crossbar_cols, weight_bits, "
     "input_bits, mvm_cycles, array_group_max, mvm_units, conv_window_max, vector_lanes, "
     "vector_op_cycles, "
     "local_memory_bytes, "
     "local_bytes_per_cycle, flit_bytes, flit_cycles, hop_cycles, shared_memory_bytes, "
     "shared_access_bytes, shared_read_cycles, shared_write_cycles, protocol, routing"),
    ("# pad\n" * 200_000, "target file {t} is larger than 1,048,576 bytes; a target is a short "
     "TOML file"),
])
def test_bad_target_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    data: bytes | str, message: str) -> None:
    t = _target(tmp_path, data)
    out = tmp_path / "out"
    code, _, err = run(["solve", MLP, "--target", t, "--out", str(out)], capsys)
    assert (code, err) == (2, message.format(t=t) + "\n")
    assert not out.exists()


def test_extreme_but_valid_targets_run_without_overflow(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every cost at its limit, every width at its smallest, the slowest clock and the
    largest mesh: schedules of about 10^11 ns, no int64 overflow, no P x P table."""
    slow = ("clock_ghz = 0.01\nmesh = [64, 64]\nmvm_cycles = 1000000\nvector_lanes = 1\n"
            "vector_op_cycles = 1000000\nflit_bytes = 1\nflit_cycles = 1000000\n"
            "hop_cycles = 1000000\nshared_access_bytes = 1\nshared_read_cycles = 1000000\n"
            "shared_write_cycles = 1000000\nlocal_bytes_per_cycle = 1\n")
    out = tmp_path / "out"
    code, _, err = run(["solve", MLP, "--target", _target(tmp_path, slow), "--time-limit", "1",
                        "--workers", "1", "--out", str(out), "--json"], capsys)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    assert rep["schedules"]["peft"]["estimate_ns"] > 10**11
    assert all(s["numerics"]["ok"] for s in rep["schedules"].values())


def test_mesh_tables_are_linear_in_cores() -> None:
    """No P x P matrix for large meshes; closed forms agree with the dense ones."""
    big = Mesh(Target(mesh_rows=64, mesh_cols=64))
    assert big.hops_from(4095).shape == (4096,) and int(big.hops_from(4095)[0]) == 126
    assert "hops" not in vars(big)  # the dense matrix is built only when asked for
    for rows, cols, hop in ((1, 1, 2), (3, 5, 3), (8, 8, 2), (1, 7, 1)):
        t = Target(mesh_rows=rows, mesh_cols=cols, hop_cycles=hop)
        m = Mesh(t)
        P = rows * cols
        assert m.mean_hop_cycles() == int((m.hops * hop).sum()) // max(P * (P - 1), 1)
        for p in range(P):
            assert nearest_cores(t, p, 5) == sorted(
                range(P), key=lambda q, p=p, t=t: (t.hops(p, q), q))[:5]


# ------------------------------------------------------------------ last line of defence
def _boom(exc: BaseException) -> object:
    def command(args: object) -> int:
        raise exc
    return command


class FakePanic(BaseException):
    """Like pyo3's PanicException: not an Exception."""


@pytest.mark.parametrize(("exc", "line"), [
    (IndexError("list index out of range"),
     f"raptor: internal error (IndexError: list index out of range); {HINT}"),
    (FakePanic("called `Option::unwrap()` on a `None` value\nnote: more"),
     f"raptor: internal error (FakePanic: called `Option::unwrap()` on a `None` value note: "
     f"more); {HINT}"),
    (MemoryError(), "raptor: out of memory; the input needs more memory than this machine "
     "gives the process (try a smaller model or target)"),
])
def test_unexpected_exception_is_one_line_exit_1(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str],
                                                 exc: BaseException, line: str) -> None:
    monkeypatch.setattr(cli, "cmd_target_show", _boom(exc))
    code, out, err = run(["target", "show"], capsys)
    assert (code, out, err) == (1, "", line + "\n")
    code, _, err = run(["--debug", "target", "show"], capsys)
    assert code == 1
    assert err.startswith("Traceback (most recent call last)") and err.endswith(line + "\n")


def test_internal_error_in_solve_leaves_no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("raptor.solve.report", _boom(KeyError("schedules")))
    out = tmp_path / "out"
    code, _, err = run(["solve", MLP, "--solver", "peft", "--no-simulate", "--out", str(out)],
                       capsys)
    assert (code, err) == (1, f"raptor: internal error (KeyError: 'schedules'); {HINT}\n")
    assert not out.exists()


def test_unwritable_output_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    out = tmp_path / "out"
    (out / "report.json").mkdir(parents=True)  # a directory where the report goes
    code, _, err = run(["solve", MLP, "--solver", "peft", "--no-simulate", "--out", str(out)],
                       capsys)
    assert (code, err) == (2, f"cannot write to {out}: Is a directory\n")


# ------------------------------------------------------------------ warnings
def test_numpy_warnings_become_one_line_each(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    x = tmp_path / "x.npz"
    np.savez(x, x=np.full((16, 4), 3e38, dtype=np.float32))  # finite, but sums overflow
    code, _, err = run(["interpret", str(EXAMPLES / "column_pairs.spat"), "--inputs", str(x)],
                       capsys)
    assert code == 0
    assert err == "warning: overflow encountered in add\n"


def test_solve_records_warnings_in_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import raptor.solve

    real = raptor.solve.solve

    def noisy(*args: object, **kwargs: object) -> object:
        warnings.warn("weights\n  rounded", RuntimeWarning, stacklevel=1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(raptor.solve, "solve", noisy)
    out = tmp_path / "out"
    code, _, err = run(["solve", MLP, "--solver", "peft", "--out", str(out)], capsys)
    assert code == 0
    assert json.loads((out / "report.json").read_text())["warnings"] == ["weights rounded"]
    assert err.endswith("warning: weights rounded\n")
    assert "RuntimeWarning" not in err


# ------------------------------------------------------------------ simulator resources
def test_simulator_refuses_huge_buffers_before_allocating() -> None:
    big = "tensor<10000x10000xf32>"  # 400 MB each: under the parser's per-type bound
    module = parse_module(
        f"func.func @main(%x: {big}, %y: {big}, %z: {big}) -> {big} {{\n"
        f"  return %x : {big}\n}}\n", "huge.spat")
    with pytest.raises(SimError) as info:
        Simulator(module, Target())
    assert str(info.value) == ("huge.spat:1:11: the program's inputs and shared buffers need "
                               "more than 1,024 MiB of host memory (the simulator's limit)")


def test_target_toml_round_trip_quotes_names(tmp_path: Path) -> None:
    t = Target(name='a "quoted" \\ name é', mesh_rows=2)
    path = tmp_path / "t.toml"
    path.write_text(t.to_toml(), encoding="utf-8")
    assert load_target(str(path)) == t


# ------------------------------------------------------------------ crossbar capacity
def test_tiny_crossbars_are_refused_before_lowering(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """1x1 crossbars: the tiles are counted before any is built (was 12-27 s of lowering
    and a hang in the campaign's `min-all` targets)."""
    t = _target(tmp_path, "crossbar_rows = 1\ncrossbar_cols = 1\ncrossbars_per_core = 1\n")
    out = tmp_path / "out"
    start = time.perf_counter()
    code, _, err = run(["solve", MLP, "--target", t, "--out", str(out)], capsys)
    assert (code, err) == (1, f"{MLP}: model needs 81200 crossbars of 1x1 but target 't' has "
                              "64 cores x 1 crossbars = 64\n")
    assert time.perf_counter() - start < 5 and not out.exists()


# ------------------------------------------------------------------ rule files
def _rules(tmp_path: Path, append: str = "", drop: str = "") -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(shipped_rules_dir(), rules)
    canon = rules / "canonicalize.egg"
    text = canon.read_text()
    assert drop in text
    canon.write_text(text.replace(drop, "") + append)
    return canon


@pytest.mark.parametrize(("append", "drop", "message"), [
    # a join that feeds itself: each iteration triples (was a hang in one iteration)
    ('(rule ((Concat x dim) (ConcatIn x i o) (Entry v e b r d c k size stride)) '
     '((Entry x (Via e i) b r d c k size stride)) :name "grow")\n', "",
     "the rules did not saturate within 33,100 matches (100 per fact loaded + 20,000); still "
     "firing in the last iterations: 'grow' (29025 matches), 'slice-fixed-dim-all-or-none' "
     "(1692 matches), 'slice-cut-rising-family' (630 matches) (a rule that derives new facts "
     "without end?)"),
    # rows the decoder cannot place (were KeyError in canonicalize.py)
    ('(rule ((BatchValue v b r)) ((Identity v v)) :name "same")\n', "",
     "the rules derived Identity 3 3, but value 3 is not a materialize_layout; Raptor cannot "
     "rebuild the IR from it"),
    ("", '(rule ((Batch b n) (FragDim b r 0 e)) ((PhysDim b r 0 n)) :name "physical-slot-dim")',
     "the rules derived PhysDim dims [1, 2, 3, 4] for batch 0 result 0; its physical result "
     "has dims 0..4; Raptor cannot rebuild the IR from it"),
])
def test_rules_that_break_the_decoder_one_line_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], append: str, drop: str,
        message: str) -> None:
    canon = _rules(tmp_path, append, drop)
    code, _, err = run(["rules", "check", str(canon.parent)], capsys)
    assert (code, err) == (1, f"{canon}: error: {message}\n")


# ------------------------------------------------------------------ input files
def _npy_header(header: str) -> bytes:
    body = header.encode("latin1")
    body += b" " * (-(10 + len(body) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


@pytest.mark.parametrize(("header", "message"), [
    # a header claiming 1 GiB for the IR interpreter (was MemoryError reading the member)
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (16384, 16384), }",
     "{x}: array 'x' has shape [16384, 16384] but @main expects %x (argument 0) as "
     "tensor<16x4xf32>"),
    # code in the header (was numpy's "malformed node or string ... <ast.Call object>")
    ("{'descr': '<f4', 'fortran_order': False, 'shape': __import__('os'), }",
     "{x}: array 'x' has a malformed .npy header (not a dict of descr, fortran_order and "
     "shape; save it with numpy.save/savez)"),
])
def test_bad_spat_inputs_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         header: str, message: str) -> None:
    x = tmp_path / "x.npz"
    with zipfile.ZipFile(x, "w") as archive:
        archive.writestr("x.npy", _npy_header(header))
    code, _, err = run(["interpret", str(EXAMPLES / "column_pairs.spat"), "--inputs", str(x)],
                       capsys)
    assert (code, err) == (2, message.format(x=x) + "\n")


# ------------------------------------------------------------------ ONNX models
def _mlp(tmp_path: Path, edit: Callable[[onnx.ModelProto], None]) -> str:
    model = onnx.load(MLP)
    edit(model)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return str(path)


def _reverse_nodes(model: onnx.ModelProto) -> None:
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _long_initializer(model: onnx.ModelProto) -> None:
    init = model.graph.initializer[0]
    init.raw_data = init.raw_data * 2


@pytest.mark.parametrize(("edit", "message"), [
    # onnx.checker's sentence broken over three lines (was a heading ending in "node:")
    (_reverse_nodes, "{m}: invalid ONNX model (onnx.checker): Nodes in a graph must be "
     "topologically sorted, however input 'relu8' of node: name: gemm11 OpType: Gemm is not "
     "output of any previous nodes."),
    # more data than the dims hold (the checker passes it; was numpy's "cannot reshape")
    (_long_initializer, "{m}: initializer 'w1' (FLOAT, dims [200, 196]) needs 156,800 bytes "
     "(39,200 x 4) but holds 313,600"),
])
def test_bad_models_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    edit: Callable[[onnx.ModelProto], None], message: str
                                    ) -> None:
    m = _mlp(tmp_path, edit)
    out = tmp_path / "out"
    code, _, err = run(["solve", m, "--out", str(out)], capsys)
    assert (code, err) == (2, message.format(m=m) + "\n")
    assert not out.exists()


# ------------------------------------------------------------------ IR text
def test_lane_count_beyond_the_slices_is_a_diagnostic(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """A scheduled batch whose lanes index past its operands (was numpy's "cannot
    reshape" from the interpreter)."""
    golden = Path(__file__).resolve().parents[1] / "ir" / "golden" / "scheduled.spat"
    spat = tmp_path / "case.spat"
    spat.write_text(golden.read_text().replace("lanes(2)", "lanes(65536)"))
    code, _, err = run(["interpret", str(spat)], capsys)
    assert code == 1
    assert [ln for ln in err.splitlines() if ": error: " in ln] == [
        f"{spat}:20:12: error: [SLICE-3] slice out of bounds for some lane: dimension 1 "
        "reaches [0, 131070] outside 0..3",
        f"{spat}:21:7: error: [SLICE-3] insertion out of bounds for some lane: dimension 1 "
        "reaches [0, 65535] outside 0..1"]


# ------------------------------------------------------------------ campaign cases
@pytest.mark.parametrize(("case", "code", "message"), [
    # a publication whose sizes do not match its source (was numpy's "cannot reshape")
    ("ir#1422", 1, "{dir}/case.spat:6:5: error: [SLICE-2] published tensor<16x1xf32> does not "
     "match the region sizes [16, 0] of tensor<16x2xf32>"),
    # a Conv fed two constants (was the reference evaluator's "tuple index out of range")
    ("onnx#1437", 2, "{dir}/model.onnx: Conv node '/stem/stem.0/Conv': cannot fold this "
     "all-constant node: ONNX's reference implementation cannot evaluate it with inputs of "
     "shapes [16, 3, 3, 3], [16]"),
    # onnxruntime fails on the reference run: a note, and no raw native log line on stderr
    ("onnx#305", 0, "note: batch dimension 'batch' of input 'x' bound to 1 (--input-shape "
     "sets another size)"),
    # Concat of shapes that differ off its axis (was invalid IR after lowering, two lines)
    ("onnx#322", 2, "{dir}/model.onnx: Concat node '/Concat': input shapes [1, 8, 16, 7], "
     "[1, 8, 16, 8] differ outside axis 1"),
])
def test_last_campaign_cases_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                      case: str, code: int, message: str) -> None:
    """The campaign's last unclean cases (seed 1), rebuilt from their seeds; `capfd` sees
    what native code writes to file descriptor 2."""
    klass, index = case.split("#")
    made = make_case(klass, 1, int(index))
    for name, data in made.files.items():
        (tmp_path / name).write_bytes(data)
    argv = [a.format(dir=tmp_path, out=tmp_path / "out") for a in made.argv]
    assert cli.main(argv) == code
    assert capfd.readouterr().err == message.format(dir=tmp_path) + "\n"
