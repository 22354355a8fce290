"""The README tells the truth: its sample output is what the command prints today
(seconds, and the line breaks they move, aside), and the pictures it shows exist."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _make_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_docs", ROOT / "docs" / "make_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_sample_is_what_raptor_prints(tmp_path: Path) -> None:
    docs = _make_docs()
    readme = (ROOT / "README.md").read_text()
    have = docs.readme_block(readme)
    want = docs.block(docs.run(docs.SAMPLE, tmp_path))
    assert docs.same(have, want), "run: python docs/make_docs.py"
    assert "<t> s" in docs.masked(want) and "…" not in want


def test_readme_pictures_exist_and_are_the_docs_outputs() -> None:
    docs = _make_docs()
    readme = (ROOT / "README.md").read_text()
    shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert sorted(shown) == sorted(f"docs/images/{png}" for png in docs.IMAGES.values())
    for path in shown:
        assert (ROOT / path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
