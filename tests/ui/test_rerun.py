"""The same `raptor solve` twice gives the same report.json apart from timing fields, and
the same scheduled IR."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raptor.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMING = {"seconds", "solve_seconds", "wall_time_s", "compile_time_s"}
"""Wall-clock figures: the only fields allowed to differ."""


def untimed(value: Any) -> Any:
    """`value` without its wall-clock fields (no text holds wall seconds: a status says
    how much deterministic time its search used, `status_detail`)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


@pytest.mark.parametrize("solver", ["peft", "cpsat"])
def test_same_command_twice_gives_the_same_report(solver: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = ["solve", str(EXAMPLES / "resnet_block.onnx"), "--solver", solver,
            "--time-limit", "2"]
    texts = []
    for name in ("a", "b"):
        assert main([*args, "--out", str(tmp_path / name)]) == 0
        texts.append((tmp_path / name / "report.json").read_text())
    capsys.readouterr()
    first, second = (json.loads(t) for t in texts)
    assert untimed(first) == untimed(second)
    assert list(first["rules"]["fired"]) == list(second["rules"]["fired"])  # same order
    assert (tmp_path / "a" / f"scheduled.{solver}.spat").read_text() == \
        (tmp_path / "b" / f"scheduled.{solver}.spat").read_text()
