"""The compiler pipeline as named passes, shared by the CLI and the tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from raptor.frontend.onnx_import import import_onnx
from raptor.frontend.plan import PlanGraph
from raptor.ir.core import Diagnostic
from raptor.ir.module import Module
from raptor.ir.verifier import verify_module
from raptor.passes.lower import Lowered, lower, sanitize
from raptor.target import Target

PASSES = ("import", "lower")
"""Pass names accepted by `--print-ir-after` (plus `all`)."""


class VerificationFailed(Exception):
    """A pass produced IR that does not verify (a compiler bug, reported with diagnostics)."""

    def __init__(self, after: str, diagnostics: list[Diagnostic]) -> None:
        head = f"IR does not verify after pass '{after}':"
        super().__init__("\n".join([head, *(str(d) for d in diagnostics[:20])]))
        self.diagnostics = diagnostics


@dataclass
class Compiled:
    graph: PlanGraph
    lowered: Lowered
    notes: list[str] = field(default_factory=list)

    @property
    def module(self) -> Module:
        return self.lowered.module


IRHook = Callable[[str, Module], None]


def compile_model(model: str | Path, target: Target, *, print_ir: IRHook | None = None,
                  verify_each: bool = True) -> Compiled:
    """ONNX file → verified graph IR (logical-assembly form until canonicalization)."""
    graph = import_onnx(str(model))
    lowered = lower(graph, target)
    if verify_each:
        diags = verify_module(lowered.module, allow_assembly=True)
        if diags:
            raise VerificationFailed("lower", diags)
    if print_ir is not None:
        print_ir("lower", lowered.module)
    return Compiled(graph, lowered, list(graph.notes))


def model_inputs(graph: PlanGraph, model: str | Path, given: dict[str, np.ndarray] | None,
                 seed: int = 0) -> tuple[dict[str, np.ndarray], str]:
    """Inputs keyed by graph input name: given, else `<model>.npz` beside the model, else
    seeded random normals. Returns them with a description of where they came from."""
    if given is not None:
        source = "--inputs"
        data = given
    else:
        sample = Path(model).with_suffix(".npz")
        if sample.exists():
            with np.load(sample) as f:
                data = {k: np.asarray(f[k]) for k in f.files}
            source = str(sample)
        else:
            rng = np.random.default_rng(seed)
            data = {v.name: rng.standard_normal(v.shape).astype(np.float32)
                    for v in graph.inputs}
            source = f"random normal (seed {seed})"
    missing = [v.name for v in graph.inputs if v.name not in data]
    if missing:
        raise ValueError(f"inputs lack {', '.join(missing)} (have: "
                         f"{', '.join(sorted(data)) or 'nothing'})")
    out = {}
    for v in graph.inputs:
        arr = np.asarray(data[v.name], dtype=np.float32)
        if arr.shape != tuple(v.shape):
            if arr.size == int(np.prod(v.shape)):
                arr = arr.reshape(v.shape)
            else:
                raise ValueError(f"input {v.name} has shape {list(arr.shape)}, the model "
                                 f"expects {list(v.shape)}")
        out[v.name] = arr
    return out, source


def ir_inputs(graph: PlanGraph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Graph input names → IR argument names."""
    return {sanitize(v.name): inputs[v.name] for v in graph.inputs}
