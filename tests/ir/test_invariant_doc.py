"""The normative invariant text stays in step with the code: every rule id the IR can report
is documented, and every fixture it cites exists."""

from __future__ import annotations

import re

from .spat_util import GOLDEN, INVALID, ROOT

DOC = ROOT / "invariants" / "GRAPH_COMPUTE_BATCH_INVARIANT.md"
SOURCES = ["verifier.py", "parser.py", "ops.py"]


def test_status_line_is_normative_and_points_at_agents_md() -> None:
    text = DOC.read_text()
    status = next(line for line in text.splitlines() if line.startswith("**Status"))
    assert "normative" in status and "AGENTS.md" in text.split("\n\n")[1]


def test_every_reported_rule_id_is_documented() -> None:
    doc = DOC.read_text()
    ids: set[str] = set()
    for name in SOURCES:
        ids |= set(re.findall(r'"([A-Z]+-\d+)"', (ROOT / "raptor" / "ir" / name).read_text()))
    assert {"GCB-1", "GCB-10", "BP-5", "ASM-1", "PHYS-1", "SCH-3"} <= ids
    documented = set(re.findall(r"\b[A-Z]+-\d+\b", doc))
    ranges = re.findall(r"\b([A-Z]+)-(\d+)(?:\.\.|/)(\d+)\b", doc)
    documented |= {f"{p}-{i}" for p, lo, hi in ranges for i in range(int(lo), int(hi) + 1)}
    assert ids - documented == set()


def test_cited_fixtures_exist() -> None:
    cited = set(re.findall(r"\b([a-z0-9_]+\.spat)\b", DOC.read_text()))
    assert cited
    for name in cited - {"column_pairs.spat"}:
        assert (INVALID / name).exists() or (GOLDEN / name).exists(), name
