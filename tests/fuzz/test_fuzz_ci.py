"""The fuzz suite's CI subset: a few hundred seeded cases over every input class, run through
the command line in forked workers (timeout and memory cap). No case may end in a traceback,
a hang, a crash or out of memory, no model onnx.checker rejects may be accepted, no message
may be unclean, and no run that failed before writing results may leave files in --out.
`python -m benchmarks.fuzz` is the same machinery at benchmark scale (docs/fuzz.md)."""

from __future__ import annotations

from collections import Counter

from .harness import FAILURES, FuzzRun, Result
from .mutators import CLASSES, cases

SEED = 0
COUNTS = {"onnx": 60, "ir": 60, "rules": 35, "target": 50, "inputs": 45}


def _describe(results: list[Result]) -> str:
    return "\n".join(f"{r.case.name} ({' '.join(r.case.argv)}): {r.outcome} {r.signature}\n"
                     f"{r.stderr[-600:]}" for r in results[:10])


def test_fuzz_ci_subset() -> None:
    results = FuzzRun(jobs=2, timeout=15, mem_mb=2048).run(
        cases(COUNTS, SEED, profile="ci"))
    assert len(results) == sum(COUNTS.values())
    bad = [r for r in results if r.outcome in (*FAILURES, "accepted", "unclean")]
    assert not bad, _describe(bad)
    left = [r for r in results if r.left_files]
    assert not left, _describe(left)
    # the mutations reach past the input checks: every class has runs that succeed and
    # runs refused with a clean message
    seen = Counter((r.case.klass, r.outcome) for r in results)
    for klass in CLASSES:
        assert seen[(klass, "ok")] and seen[(klass, "error")], (klass, seen)
