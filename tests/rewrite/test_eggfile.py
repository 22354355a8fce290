"""Loading and checking rule files: manifest order, directory resolution, error locations."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from egglog import bindings

from raptor.cli import main
from raptor.passes.rulecheck import check_rules
from raptor.rewrite import eggfile
from raptor.rewrite.eggfile import (
    MANIFEST,
    RULES_ENV,
    RuleError,
    load_files,
    load_program,
    resolve_rules_dir,
    run_text,
)
from raptor.rewrite.schema import LAYOUT, Schema

SHIPPED = resolve_rules_dir(None)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _program_prefix(path: Path) -> list[Path]:
    """The files loaded before and including `path` in its manifest program."""
    for names in MANIFEST.values():
        if path.name in names:
            return [path.parent / n for n in names[: names.index(path.name) + 1]]
    return [path]


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.egg")), ids=lambda p: p.name)
def test_shipped_rule_file_loads(path: Path) -> None:
    program = load_files(_program_prefix(path))
    assert program.files[-1] == path


def test_shipped_rules_check_clean() -> None:
    assert (SHIPPED / "layout.egg").is_file()
    assert check_rules(SHIPPED) == []


def test_a_rule_file_that_is_not_utf8(rules_copy: Path) -> None:
    layout = rules_copy / "layout.egg"
    layout.write_bytes(b"(relation A (i64))\n; caf\xe9\n")
    (error,) = check_rules(rules_copy)
    assert error == f"{layout}:2:6: error: not UTF-8 text"


def test_relations_the_bridge_needs_must_be_declared(rules_copy: Path) -> None:
    layout = rules_copy / "layout.egg"
    layout.write_text(layout.read_text().replace("FixedLayout", "FixedLayouts"))
    errors = check_rules(rules_copy)
    assert errors == [f"{layout}: error: FixedLayout, which Raptor reads, is not declared; "
                      "expected (relation FixedLayout (i64 Layout)) (columns: value, layout)"]
    with pytest.raises(RuleError) as info:  # what `raptor solve --rules` meets
        load_program("layout", rules_copy)
    assert str(info.value) == errors[0]


def declarations(schema: Schema, wrong: str = "", instead: str = "") -> str:
    """A rule file that declares the schema's relations and nothing else."""
    lines = ["(datatype Layout (DenseNCHW) (NHWCRowStrip))", "(datatype EntryId (Base i64))"]
    for rel in (*schema.facts, *schema.reads):
        if rel.output is None:
            lines.append(f"(relation {rel.name} ({' '.join(rel.sorts)}))")
        else:
            lines.append(f"(function {rel.name} ({' '.join(rel.sorts[:-1])}) {rel.output} "
                         ":merge new)")
    return "\n".join(lines).replace(wrong, instead) + "\n"


@pytest.mark.parametrize(("wrong", "instead", "message"), [
    ("(relation Alt (i64 i64 Layout i64))", "(relation Alt (i64 i64 Layout))",
     "Alt, which Raptor reads, is declared with sorts (i64 i64 Layout); expected (relation Alt "
     "(i64 i64 Layout i64)) (columns: plan, alt, result, cost)"),
    ("(relation Gate (i64 String))", "(relation Gate (i64 i64))",
     "Gate, which Raptor writes, is declared with sorts (i64 i64); expected"),
    ("(function MatCost (i64 Layout Layout) i64", "(function MatCost (i64 Layout Layout) String",
     "MatCost, which Raptor reads, is declared with sorts (i64 Layout Layout) -> String"),
    ("(function MatCost (i64 Layout Layout) i64 :merge new)",
     "(relation MatCost (i64 Layout Layout))", "MatCost, which Raptor reads, is declared"),
])
def test_sorts_and_kinds_must_match_the_schema(tmp_path: Path, wrong: str, instead: str,
                                               message: str) -> None:
    layout = tmp_path / "layout.egg"
    layout.write_text(declarations(LAYOUT, wrong, instead))
    with pytest.raises(RuleError, match=re.escape(message)):
        load_program("layout", tmp_path)
    layout.write_text(declarations(LAYOUT))
    load_program("layout", tmp_path)


def test_rules_that_never_saturate_stop(rules_copy: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eggfile, "MAX_ITERATIONS", 300)
    canon = rules_copy / "canonicalize.egg"
    canon.write_text(canon.read_text() + '\n(rule ((Batch b n)) ((Batch (+ b 1) n)) '
                     ':name "forever")\n')
    (error,) = check_rules(rules_copy)
    assert re.fullmatch(re.escape(f"{canon}: error: the rules did not saturate within 300 "
                                  "iterations; still firing in the last iterations: 'forever' (")
                        + r"\d+ matches\) \(a rule that derives new facts without end\?\)", error)


def test_rules_that_produce_invalid_ir(rules_copy: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    canon = rules_copy / "canonicalize.egg"
    _break(canon, "((EntrySlots v (Base b r) 0 n))", "((EntrySlots v (Base b r) 0 (+ n 1)))")
    (error,) = check_rules(rules_copy)
    head = f"{canon}: error: your rules produced invalid IR: [BP-2] spat.blueprint (@main op "
    assert error.startswith(head) and "is not a valid slot of a" in error
    code = main(["solve", str(EXAMPLES / "mlp.onnx"), "--rules", str(rules_copy), "--solver",
                 "peft", "--no-simulate", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith(head), err


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(SHIPPED, target)
    return target


def _break(path: Path, old: str, new: str) -> tuple[int, int]:
    """Replace `old` by `new` in `path`; return the 1-based line and column of the edit."""
    text = path.read_text()
    offset = text.index(old)
    path.write_text(text.replace(old, new, 1))
    line = text.count("\n", 0, offset) + 1
    return line, offset - text.rfind("\n", 0, offset)


def test_syntax_error_reports_file_and_line(rules_copy: Path) -> None:
    layout = rules_copy / "layout.egg"
    _break(layout, "(relation Gate (i64 String))", "(relation Gate (i64 String)")
    errors = check_rules(rules_copy)
    assert len(errors) == 1
    assert errors[0].startswith(f"{layout}:")
    with pytest.raises(RuleError, match=r"layout\.egg:\d+:\d+: error"):
        load_program("layout", rules_copy)


@pytest.mark.parametrize(("good", "bad", "named", "with_col"), [
    ("(relation External (i64))", "(relation External (Nope))", "Nope", True),  # unknown sort
    ('(Gate p "isSupportedBiasAddValue")', '(Gates p "x")', "Gates", False),  # unbound function
])
def test_broken_rule_reports_file_line(rules_copy: Path, good: str, bad: str, named: str,
                                       with_col: bool) -> None:
    layout = rules_copy / "layout.egg"
    line, col = _break(layout, good, bad)
    (error,) = check_rules(rules_copy)
    assert error.startswith(f"{layout}:{line}:{col}: error:" if with_col else f"{layout}:{line}:")
    assert named in error


def test_panic_becomes_one_line_and_stays_off_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuleError) as info:
        run_text(bindings.EGraph(), '(relation A (i64))\n  (include "no-such-file.egg")\n',
                 "x.egg")
    assert str(info.value) == 'x.egg:2:3: egglog panic: (include "no-such-file.egg") Failed ' \
        "to read file no-such-file.egg"
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("command", ['(include "other.egg")', "(run 3)",
                                     "(run-schedule (saturate (run)))", '(input A "a.tsv")'])
def test_a_rule_file_may_not_run_or_touch_files(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "extra.egg"
    bad.write_text(f"(relation A (i64))\n\n  {command}\n")
    (error,) = check_rules(tmp_path)[-1:]
    where = f"{bad}:" if command.startswith("(run ") else f"{bad}:3:3:"  # (run N) has no span
    assert error.startswith(f"{where} error: a rule file declares relations and rules")


def test_unnamed_rule_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "extra.egg"
    bad.write_text("(relation A (i64))\n(rule ((A x)) ((A 1)))\n")
    assert check_rules(tmp_path)[-1] == f"{bad}:2:1: error: rule has no :name"


def test_missing_rule_file(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="cannot read rule file"):
        load_program("layout", tmp_path)
    assert check_rules(tmp_path) == [f"{tmp_path / 'layout.egg'}: error: missing (the layout "
                                     "rules)", f"{tmp_path / 'canonicalize.egg'}: error: "
                                     "missing (the canonicalize rules)"]
    absent = tmp_path / "absent"
    assert check_rules(absent) == [f"{absent}: error: not a rules directory"]


def test_rules_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RULES_ENV, raising=False)
    assert resolve_rules_dir(None) == SHIPPED
    assert SHIPPED.name == "rules" and SHIPPED.parent.name == "raptor"
    monkeypatch.setenv(RULES_ENV, str(tmp_path / "env"))
    assert resolve_rules_dir(None) == tmp_path / "env"
    assert resolve_rules_dir(tmp_path / "cli") == tmp_path / "cli"


def test_run_schedule_counts_by_rule_name(tmp_path: Path) -> None:
    rules = tmp_path / "extra.egg"
    rules.write_text(
        "(relation A (i64))\n(relation B (i64))\n"
        '(rule ((A x) (< x 3)) ((A (+ x 1))) :name "step")\n'
        '(rule ((A x)) ((B x)) :name "copy")\n'
    )
    program = load_files([rules])
    program.run("(A 0)")
    assert program.run_schedule() == {"step": 3, "copy": 4}
    assert program.fired == {"step": 3, "copy": 4}
