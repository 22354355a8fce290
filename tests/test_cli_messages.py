"""What README.md promises of every subcommand: a failure is one line on stderr, exit 2 for
usage and input errors (a bad option, a missing path, `--out` naming a file), 1 for a
compile or verification failure; rule files are reported where the mistake is."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from raptor.cli import build_parser, main
from raptor.rewrite.eggfile import shipped_rules_dir

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
             ) -> list[tuple[str, ...]]:
    """Every runnable command line prefix (`solve`, `rules check`, ...) of the parser."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [prefix]
    return [c for name, p in subs[0].choices.items() for c in commands(p, (*prefix, name))]


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


COMMANDS = commands(build_parser())


MISSING = {
    "solve": ["solve", "/nonexistent/m.onnx"],
    "export": ["export", "/nonexistent/f.spat", "--pimsim", "/nonexistent/d"],
    "verify": ["verify", "/nonexistent/f.spat"],
    "interpret": ["interpret", "/nonexistent/f.spat"],
    "inspect": ["inspect", "/nonexistent/m.onnx"],
    "rules check": ["rules", "check", "/nonexistent"],
    "target show": ["target", "show", "/nonexistent/t.toml"],
    "sweep": ["sweep", "/nonexistent/s.toml"],
}


def test_every_command_is_listed() -> None:
    assert {c[0] for c in COMMANDS} == {"solve", "export", "verify", "interpret", "inspect",
                                        "rules", "target", "sweep"}
    assert ("rules", "check") in COMMANDS and ("target", "show") in COMMANDS


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unknown_option_is_one_line_and_exit_2(command: tuple[str, ...],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([*MISSING[" ".join(command)], "--no-such-option"])
    assert e.value.code == 2
    cap = capsys.readouterr()
    line = one_line(cap.err)
    assert line.startswith(f"raptor {' '.join(command)}: error: ") and "--no-such-option" in line
    assert line.endswith(f"(see raptor {' '.join(command)} --help)") and cap.out == ""


@pytest.mark.parametrize("args", [[], ["rules"], ["target"], ["solve", "--solver", "foo", "m"]],
                         ids=lambda a: " ".join(a) or "nothing")
def test_missing_arguments_are_one_line(args: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    if not args:  # `raptor` alone: the help, as a usage error
        assert main([]) == 2
        return
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    one_line(capsys.readouterr().err)


def test_missing_paths_cover_every_command() -> None:
    assert set(MISSING) == {" ".join(c) for c in COMMANDS}


@pytest.mark.parametrize("name", sorted(MISSING))
def test_a_missing_path_is_one_line_and_exit_2(name: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(MISSING[name]) == 2
    assert "/nonexistent" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("args", [
    ["solve", str(EXAMPLES / "mlp.onnx"), "--out"],
    ["solve", str(EXAMPLES / "mlp.onnx"), "--export-pimsim"],
    ["sweep", str(EXAMPLES / "sweep.toml"), "--out"],
    ["export", "x.spat", "--pimsim"]], ids=lambda a: f"{a[0]} {a[-1]}")
def test_an_output_folder_naming_a_file_is_refused_first(
        args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    assert main([*args, str(afile)]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{args[-1]} {afile}: is a file" in line and "folder" in line
    assert afile.read_text() == "mine\n"


def test_a_missing_parenthesis_is_reported_where_its_form_opens(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """egglog reads on to the end of the file and names its last line; the line to edit is
    the one whose `(` is never closed."""
    rules = tmp_path / "rules"
    shutil.copytree(shipped_rules_dir(), rules)
    layout = rules / "layout.egg"
    lines = layout.read_text().splitlines(keepends=True)
    line = next(i for i, t in enumerate(lines) if t.startswith("(set (RowStripCost)"))
    lines[line] = lines[line].replace("-2)", "-2", 1)  # `(set (RowStripCost) -2` ; comment
    layout.write_text("".join(lines))
    assert main(["rules", "check", str(rules)]) == 1
    err = one_line(capsys.readouterr().err)
    assert err.startswith(f"{layout}:{line + 1}:1: error: ") and "never closed" in err


def test_an_internal_value_error_is_not_dressed_as_bad_input(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # a ValueError from Raptor's own code (an invariant it broke) is a bug: exit 1 and
    # "internal error", not exit 2 as if the model were at fault; bad input stays exit 2
    import raptor.solve

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("an invariant broke")

    monkeypatch.setattr(raptor.solve, "solve", broken)
    model = str(EXAMPLES / "mlp.onnx")
    assert main(["solve", model, "--solver", "peft", "--no-simulate"]) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith("raptor: internal error (ValueError: an invariant broke)")
    assert main(["solve", model, "--inputs", "/nonexistent/x.npz"]) == 2
    assert "no such file" in one_line(capsys.readouterr().err)
