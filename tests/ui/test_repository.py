"""What the repository holds: sources, not build artefacts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_no_wheels_or_archives_are_committed() -> None:
    """A wheel at the root (pypdf's, once) is installed by nobody: packages come from the
    registries pyproject.toml names."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "*.whl", "*.tar.gz", "*.zip"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert tracked == []
