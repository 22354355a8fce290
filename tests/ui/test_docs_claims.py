"""What the documents say about behaviour, checked against the code that has it."""

from __future__ import annotations

import re
from pathlib import Path

from raptor.solve import STATUSES
from raptor.solver.cpsat import DET_PER_SECOND
from raptor.sweep.spec import supported_modes

ROOT = Path(__file__).resolve().parents[2]


def test_sweep_doc_says_what_modes_run() -> None:
    text = (ROOT / "docs" / "sweep.md").read_text()
    for mode in supported_modes():
        assert not re.search(rf"mode = \[\"{mode}\"\]`? is refused", text), mode
    assert "pipeline" in supported_modes() and "not supported by this raptor" not in text


def test_readme_names_every_status_word() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    for word in STATUSES:
        assert f"`{word}`" in readme, word
    assert f"S × {DET_PER_SECOND:g} units of CP-SAT's deterministic time" in readme
    assert "130 stopped by Ctrl-C" in readme and "docs/report.schema.json" in readme


def test_time_limit_help_says_how_seconds_become_units() -> None:
    from raptor.cli import build_parser

    solve = next(a for a in build_parser()._actions if a.dest == "command").choices["solve"]
    limit = next(a for a in solve._actions if a.dest == "time_limit")
    assert limit.help is not None
    assert f"S x {DET_PER_SECOND:g} units of CP-SAT's deterministic time" in limit.help
