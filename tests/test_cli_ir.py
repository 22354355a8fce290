"""`raptor verify` / `raptor interpret` on good, bad and garbage input: exit codes, one
clear diagnostic line (with a caret for syntax errors), never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from raptor.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "column_pairs.spat"
DIAG = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.+)$")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_diagnostic(err: str, path: Path) -> re.Match[str]:
    """The single error line of `err`; if a source line and caret follow, the caret sits
    under the reported column."""
    assert "Traceback" not in err
    lines = err.rstrip("\n").splitlines()
    assert sum(": error: " in line for line in lines) == 1, err
    m = DIAG.match(lines[0])
    assert m is not None, lines[0]
    assert m.group("file") == str(path)
    if len(lines) > 1:
        assert len(lines) == 3, err
        caret = lines[2]
        assert caret.strip() == "^"
        assert caret.index("^") - 2 == int(m.group("col")) - 1  # two-space indent
        assert lines[1].strip() != ""
    return m


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data)
    return p


# ------------------------------------------------------------------ garbage input
def test_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "empty.spat", "")
    code, out, err = cli(capsys, "verify", str(p))
    assert (code, out) == (2, "")
    assert "empty" in one_diagnostic(err, p).group("msg")


def test_comment_only_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "c.spat", "// nothing here\n\n")
    code, _, err = cli(capsys, "verify", str(p))
    assert code == 2
    one_diagnostic(err, p)


@pytest.mark.parametrize("data", [bytes(range(256)), b"\x89PNG\r\n\x1a\n\xff\xfe", b"\x00"],
                         ids=["all-bytes", "png-header", "nul"])
def test_binary_file(data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "bin.spat", data)
    code, _, err = cli(capsys, "verify", str(p))
    assert code == 2
    assert "binary" in one_diagnostic(err, p).group("msg")


@pytest.mark.parametrize("cut", [20, 130, 300, 500, len(EXAMPLE.read_text()) - 2])
def test_truncated_text(cut: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "trunc.spat", EXAMPLE.read_text()[:cut])
    code, out, err = cli(capsys, "verify", str(p))
    assert (code, out) == (2, "")
    m = one_diagnostic(err, p)
    assert len(err.splitlines()) == 3, "syntax errors show the line and a caret"
    assert 1 <= int(m.group("line")) <= EXAMPLE.read_text()[:cut].count("\n") + 1


def test_truncated_at_end_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = EXAMPLE.read_text()
    p = write(tmp_path, "trunc.spat", text[: text.rindex("}")])
    code, _, err = cli(capsys, "verify", str(p))
    assert code == 2
    assert "end of input" in one_diagnostic(err, p).group("msg")


def test_unknown_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "u.spat", EXAMPLE.read_text().replace("pim.vadd", "pim.vfrobnicate"))
    code, _, err = cli(capsys, "verify", str(p))
    assert code == 2
    m = one_diagnostic(err, p)
    assert (m.group("line"), m.group("col")) == ("6", "10")
    assert "pim.vfrobnicate" in m.group("msg")


def test_nonexistent_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "missing.spat"
    code, _, err = cli(capsys, "verify", str(p))
    assert code == 2
    assert "cannot read" in one_diagnostic(err, p).group("msg")


def test_undefined_value_is_ssa1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "ssa.spat", EXAMPLE.read_text().replace("pim.vadd %a, %b",
                                                                "pim.vadd %a, %nope"))
    code, _, err = cli(capsys, "verify", str(p))
    assert code == 1
    m = one_diagnostic(err, p)
    assert m.group("msg").startswith("[SSA-1]") and "%nope" in m.group("msg")
    assert (m.group("line"), m.group("col")) == ("6", "23")


def test_several_files_report_each_and_exit_with_the_worst(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, "bad.spat", EXAMPLE.read_text().replace("lanes(2)", "lanes(3)"))
    code, out, err = cli(capsys, "verify", str(EXAMPLE), str(bad))
    assert code == 1
    assert f"{EXAMPLE}: ok" in out
    assert "[GCB-3]" in err and str(bad) in err
    code, out, _ = cli(capsys, "verify", "-q", str(EXAMPLE))
    assert (code, out) == (0, "")


# ------------------------------------------------------------------ help
@pytest.mark.parametrize(("argv", "words"), [
    (["--help"], ["verify", "interpret", "Exit codes"]),
    (["verify", "--help"], ["GCB-1..10", "BP-1..5", "--allow-assembly"]),
    (["interpret", "--help"], ["--inputs", "--out", "--weights", "npz"]),
])
def test_help(argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *argv)
    assert (code, err) == (0, "")
    for w in words:
        assert w in out


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys)
    assert code == 2
    assert "usage: raptor" in out


# ------------------------------------------------------------------ interpret inputs
def test_interpret_column_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    code, _, err = cli(capsys, "interpret", str(EXAMPLE), "--inputs", str(tmp_path / "x.npz"),
                       "--out", str(tmp_path / "y.npz"))
    assert (code, err) == (0, "")
    with np.load(tmp_path / "y.npz") as data:
        np.testing.assert_allclose(data["result0"], x[:, 0::2] + x[:, 1::2], rtol=1e-6)


@pytest.mark.parametrize(("kind", "needle"), [
    ("text", "cannot read"), ("missing", "cannot read"), ("shape", "shape"),
    ("name", "no input for argument %x"),
])
def test_bad_inputs_npz(kind: str, needle: str, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "in.npz"
    if kind == "text":
        p.write_text("not an npz\n")
    elif kind == "shape":
        np.savez(p, x=np.zeros((3, 3)))
    elif kind == "name":
        np.savez(p, y=np.zeros((16, 4)))
    code, out, err = cli(capsys, "interpret", str(EXAMPLE), "--inputs", str(p))
    assert code == 2
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "y.npz").exists()


def test_interpret_invalid_ir_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    p = write(tmp_path, "bad.spat", EXAMPLE.read_text().replace("[1, 16, 1] [1, 1, 1]",
                                                                "[1, 16, 1] [1, 2, 1]"))
    code, out, err = cli(capsys, "interpret", str(p))
    assert code == 1 and out == ""
    assert "[GCB-9]" in err


# ------------------------------------------------------------------ the installed entry point
def test_subprocess_verify_and_interpret(tmp_path: Path) -> None:
    """Once through a real process: the module entry point, exit codes, the numbers."""
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    np.savez(tmp_path / "x.npz", x=x)
    run = [sys.executable, "-m", "raptor.cli"]
    res = subprocess.run([*run, "interpret", str(EXAMPLE), "--inputs", str(tmp_path / "x.npz"),
                          "--out", str(tmp_path / "y.npz")], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    with np.load(tmp_path / "y.npz") as data:
        np.testing.assert_array_equal(data["result0"], x[:, 0::2] + x[:, 1::2])
    garbage = write(tmp_path, "g.spat", b"\xff\xfe\x00garbage")
    res = subprocess.run([*run, "verify", str(garbage)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith(f"{garbage}:1:1: error:")
