"""Loading and checking rule files: manifest order, directory resolution, error locations."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raptor.rewrite.eggfile import (
    MANIFEST,
    RULES_ENV,
    RuleError,
    check_rules,
    load_files,
    load_program,
    resolve_rules_dir,
)

SHIPPED = resolve_rules_dir(None)


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


def test_panic_becomes_rule_error(tmp_path: Path) -> None:
    bad = tmp_path / "extra.egg"
    bad.write_text('(relation A (i64))\n\n  (include "no-such-file.egg")\n')
    (error,) = check_rules(tmp_path)
    assert error.startswith(f"{bad}:3:3: egglog panic:")


def test_unnamed_rule_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "extra.egg"
    bad.write_text("(relation A (i64))\n(rule ((A x)) ((A 1)))\n")
    assert check_rules(tmp_path) == [f"{bad}:2:1: error: rule has no :name"]


def test_missing_rule_file(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="cannot read rule file"):
        load_program("layout", tmp_path)
    assert check_rules(tmp_path) == []
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
