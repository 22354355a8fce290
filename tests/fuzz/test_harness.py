"""The fuzz judge itself: every outcome is recognized, from real worker processes (a stand-in
command that hangs, aborts, runs out of memory, raises, prints raw text) and from the texts
Raptor prints."""

from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path

from raptor.target import LIMITS

from .harness import Case, FuzzRun, classify, unclean_reason
from .mutators import TARGET_LIMITS


def stand_in(argv: list[str]) -> int:
    """A command line for the harness test: behaves as its last argument says."""
    what = argv[-1]
    if what == "hang":
        time.sleep(600)
    elif what == "abort":
        os.abort()
    elif what == "segv":
        ctypes.string_at(0)
    elif what == "oom":
        _ = bytearray(8 << 30)
    elif what == "raise":
        {}["missing"]
    elif what == "native":
        os.write(2, b"thread '<unnamed>' panicked at src/lib.rs:10:5:\n")
        return 1
    elif what == "files":
        out = Path(argv[-2])
        out.mkdir()
        (out / "partial.json").write_text("{")
        print("usage error", file=sys.stderr)
        return 2
    print(f"{what}: done")
    return 0


def _case(i: int, what: str) -> Case:
    return Case("selftest", what, i, {}, ("--out", "{out}", what))


def test_worker_outcomes() -> None:
    kinds = ["ok", "hang", "ok", "abort", "segv", "oom", "raise", "native", "files", "ok"]
    run = FuzzRun(jobs=2, timeout=3, mem_mb=1024, entry=f"{__name__}:stand_in")
    results = {r.case.mutator: r for r in run.run(_case(i, k) for i, k in enumerate(kinds))}
    assert {k: r.outcome for k, r in results.items()} == {
        "ok": "ok", "hang": "hang", "abort": "crash", "segv": "crash", "oom": "oom",
        "raise": "traceback", "native": "unclean", "files": "error"}
    assert results["hang"].signature.startswith("hang at ") and \
        "stand_in" in results["hang"].signature
    assert results["raise"].signature.startswith("KeyError at ")
    assert results["files"].left_files and not results["ok"].left_files


def test_texts() -> None:
    case = Case("ir", "x", 0, {}, ("verify", "f.spat"))
    solve = Case("onnx", "x", 0, {}, ("solve", "m.onnx"))
    diag = "f.spat:3:5: error: [SSA-1] use of undefined value %b\n    %s = a %b\n        ^\n"
    assert classify(case, 1, diag, None, "", "done") == (
        "error", "[SSA-N] use of undefined value %b")
    assert unclean_reason(case, 1, diag + diag) is None  # one diagnostic per problem
    interpret = Case("ir", "x", 0, {}, ("interpret", "f.spat"))
    assert unclean_reason(interpret, 1, diag + diag) is None
    assert unclean_reason(interpret, 1, diag + "(rule ((x)))\n") == "2 lines: " + \
        diag.splitlines()[0]
    head = "IR does not verify after pass 'lower':\nf.spat:1:1: error: [GCB-1] x\n"
    assert unclean_reason(solve, 1, head) == "IR does not verify after pass 'lower':"
    assert unclean_reason(solve, 2, "m.onnx: bad\nm.onnx: worse\n") == "2 lines: m.onnx: bad"
    assert unclean_reason(solve, 0, "/x/y.py:3: RuntimeWarning: overflow\n  a = b\n") == \
        "/x/y.py:3: RuntimeWarning: overflow"
    assert unclean_reason(solve, 1, "") == "no message"
    assert unclean_reason(solve, 2, "m.onnx: tuple index out of range\n") is not None
    assert unclean_reason(solve, 1, "peft: simulation failed: x\ncpsat: simulation failed: "
                                    "x\nwarning: overflow encountered in add\n") is None
    internal = ("raptor: internal error (IndexError: list index out of range); this is a bug "
                "in Raptor\n")
    assert classify(solve, 1, internal, None, "", "done")[0] == "traceback"
    assert classify(solve, 1, "raptor: out of memory; x\n", None, "", "done")[0] == "oom"
    invalid = Case("onnx", "x", 0, {}, ("solve", "m.onnx"), invalid="Graph output 'y' ...")
    assert classify(invalid, 0, "", None, "", "done")[0] == "accepted"
    assert classify(invalid, 2, "m.onnx: no outputs\n", None, "", "done")[0] == "error"


def test_mutators_know_the_target_limits() -> None:
    assert TARGET_LIMITS == LIMITS
