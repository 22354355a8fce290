"""Helpers shared by the Spatial IR tests: fixture paths, expectations, CLI capture."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from raptor.cli import main
from raptor.ir.core import Diagnostic
from raptor.ir.module import Module
from raptor.ir.parser import parse_module
from raptor.ir.verifier import verify_module

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
INVALID = HERE / "invalid"
EXAMPLE = ROOT / "examples" / "column_pairs.spat"

_EXPECT = re.compile(r"^// expect: (\d+):(\d+) ([A-Z]+-\d+)\s*$")


@dataclass(frozen=True)
class Expect:
    """One `// expect: LINE:COL RULE` comment of an invalid fixture."""

    line: int
    col: int
    rule: str

    def render(self, path: Path) -> str:
        return f"{path}:{self.line}:{self.col}: error: [{self.rule}]"


def expectations(path: Path) -> list[Expect]:
    """The `// expect:` lines at the top of a fixture, in order (the first is reported first)."""
    out = []
    for line in path.read_text().splitlines():
        m = _EXPECT.match(line)
        if m:
            out.append(Expect(int(m.group(1)), int(m.group(2)), m.group(3)))
    return out


def program_text(path: Path) -> str:
    """The program without its leading `//` comment lines (the printer drops comments)."""
    lines = path.read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("//"):
        lines.pop(0)
    return "".join(lines)


def parse_checked(text: str, filename: str = "<test>") -> Module:
    """Parse and require a clean verification."""
    module = parse_module(text, filename)
    diags = verify_module(module)
    assert diags == [], "\n".join(str(d) for d in diags)
    return module


def rules_of(diags: list[Diagnostic]) -> list[str]:
    return [d.rule for d in diags]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `raptor ARGV...` in-process; (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse --help / usage errors
        code = int(e.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err
