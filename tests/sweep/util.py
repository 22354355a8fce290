"""Helpers for the sweep tests."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write_sweep(directory: Path, text: str, name: str = "sweep.toml") -> Path:
    """A sweep file in `directory`; `{examples}` stands for the examples folder."""
    path = directory / name
    path.write_text(text.replace("{examples}", str(EXAMPLES)), encoding="utf-8")
    return path
