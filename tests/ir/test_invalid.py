"""Invalid fixtures: `raptor verify` rejects each with exit 1, naming its rule at line:col.

Each fixture states its findings in `// expect: LINE:COL RULE` comments (the first is the
first diagnostic); `// flags: ...` adds command-line flags.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from raptor.ir.interpreter import Interpreter
from raptor.ir.parser import ParseError, parse_file

from .spat_util import INVALID, expectations, program_text, run_cli

FIXTURES = sorted(INVALID.glob("*.spat"))
INVALID_REPRESENTATIONS = (
    "invalid_rep_logical_aggregate", "invalid_rep_storage_from_logical_shape",
    "invalid_rep_reconstruction_from_type", "invalid_rep_blueprint_arithmetic",
)


def flags(path: Path) -> list[str]:
    m = re.search(r"^// flags: (.*)$", path.read_text(), re.M)
    return m.group(1).split() if m else []


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_is_rejected_with_its_rule_and_location(
        path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    want = expectations(path)
    assert want, f"{path.name} has no // expect: line"
    code, out, err = run_cli(capsys, "verify", *flags(path), str(path))
    assert code == 1
    assert out == ""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert errors, err
    assert errors[0].startswith(want[0].render(path)), errors[0]
    for e in want:
        assert any(line.startswith(e.render(path)) for line in errors), (e, errors)


def test_every_rule_has_a_fixture_that_names_it_first() -> None:
    first = {expectations(p)[0].rule for p in FIXTURES}
    rules = {f"GCB-{i}" for i in range(1, 11)} | {f"BP-{i}" for i in range(1, 6)}
    rules |= {"ASM-1", "PHYS-1", "SLICE-3", "SCH-1", "SCH-2", "SCH-3", "SCH-4", "SSA-1"}
    assert rules - first == set()


@pytest.mark.parametrize("name", INVALID_REPRESENTATIONS)
def test_the_four_invalid_representations_have_fixtures(name: str) -> None:
    assert (INVALID / f"{name}.spat").exists()


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_printer_never_repairs_invalid_ir(path: Path) -> None:
    """Whatever parses prints back unchanged: a defect survives print∘parse."""
    try:
        module = parse_file(str(path))
    except ParseError as e:
        assert e.rule, "fixtures are syntactically valid; only semantic parse errors expected"
        return
    assert module.print() == program_text(path)


def test_assembly_is_accepted_only_before_canonicalization(
        capsys: pytest.CaptureFixture[str]) -> None:
    path = INVALID / "asm1_assembly_unverified.spat"
    code, out, err = run_cli(capsys, "verify", "--allow-assembly", str(path))
    assert (code, err) == (0, "")
    assert "ok" in out
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    (y,) = Interpreter(parse_file(str(path))).run([x])
    np.testing.assert_array_equal(y, x[:, 0::2] + x[:, 1::2])
