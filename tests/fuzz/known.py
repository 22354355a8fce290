"""Failure classes the fuzz suite knows about and that live in code owned elsewhere.

Each entry names the outcome, a regular expression over the result signature (see
`harness.Result.signature`), the owning area and what goes wrong. The CI subset tolerates
these so that it passes while the fixes land; the benchmark report still counts them.
An entry that no longer matches anything is harmless; delete it when its fix is merged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .harness import Result


@dataclass(frozen=True)
class Known:
    klass: str
    """Input class (regular expression)."""
    outcome: str
    """Outcome (regular expression)."""
    signature: str
    """Regular expression searched in the result signature."""
    owner: str
    what: str
    mutator: str = ".*"
    """Mutator (regular expression over `Case.mutator`)."""

    def matches(self, r: Result) -> bool:
        return (re.fullmatch(self.klass, r.case.klass) is not None
                and re.fullmatch(self.mutator, r.case.mutator) is not None
                and re.fullmatch(self.outcome, r.outcome) is not None
                and re.search(self.signature, r.signature) is not None)


FRONTEND = "frontend (onnx_import, oracle, driver, fileio)"
IR = "IR and rules (ir, rewrite, passes/lower.py)"

KNOWN: list[Known] = [
    Known("inputs", "traceback|oom", r"at raptor/(fileio|driver)\.py", FRONTEND,
          "input files: BadZipFile, TypeError (an .npy given, structured dtypes), "
          "IsADirectoryError, MemoryError (an .npy header or zip member far larger than the "
          "model's inputs) escape load_npz / model_inputs"),
    Known("inputs", "traceback", r"at raptor/ir/interpreter\.py:bind_inputs", FRONTEND,
          "non-numeric (structured) input arrays reach the interpreter: TypeError"),
    Known("onnx", "traceback", r"at raptor/frontend/oracle\.py", FRONTEND,
          "onnxruntime Fail / InvalidArgument escape run_reference"),
    Known("onnx", "traceback", r"at raptor/frontend/", FRONTEND,
          "IndexError / ValueError / TypeError in onnx_import (a node with fewer inputs or "
          "attributes than its op needs, an initializer whose data disagrees with its dims)"),
    Known("onnx", "traceback|oom|hang", r"at raptor/(passes/lower\.py|ir/)", FRONTEND,
          "attributes and shapes that ONNX shape inference rejects reach lowering: "
          "AssertionError in lower.body, ValueError in lower.conv/gemm/pool, IndexError in "
          "builder.concat, MemoryError in builder.add or minutes in ir/core.affines for "
          "attributes at 2^31, a loop over a 10^9-row input"),
    Known("rules", "hang", r"at raptor/rewrite/", IR,
          "a rule that derives without end: saturation has no iteration or time limit"),
    Known("rules", "oom", r"allocation failure in native code", IR,
          "a rule that derives without end fills the memory cap inside egglog"),
    Known("rules", "traceback", r"at raptor/rewrite/", IR,
          "KeyError in the decoders (a relation or row the rules no longer derive), "
          "UnicodeDecodeError for a rule file that is not UTF-8"),
    Known("ir", "hang|traceback|oom", r"at raptor/ir/", IR,
          "IR text with huge lane counts or sizes: the verifier loops over every lane; "
          "OverflowError in verifier._bp_slots for 2**63-sized offsets"),
    Known("target", "hang", r"", IR,
          "crossbars of 1x1 (or a few cells): lowering builds one weight tile per cell "
          "(12-27 s and millions of IR objects for LeNet, 6 s more to collect them) before "
          "the capacity check says the model does not fit; lower() needs a lower bound "
          "(weight values / cells per crossbar) checked first",
          mutator="min-all"),
]


def known(r: Result) -> str | None:
    """The description of the known class `r` falls in, or None."""
    for k in KNOWN:
        if k.matches(r):
            return f"{k.owner}: {k.what}"
    return None
