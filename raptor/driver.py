"""The compiler pipeline as named passes, shared by the CLI and the tests.

import → layout → lower → canonicalize → (ComputeGraph, schedules) → materialize → simulate.
The IR verifies after every pass (`verify_each`); `print_ir` sees each pass's output.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from raptor.frontend.onnx_import import import_onnx
from raptor.frontend.plan import PlanGraph
from raptor.ir.core import Diagnostic
from raptor.ir.module import Module
from raptor.ir.verifier import verify_module
from raptor.passes.layout import LayoutChoice, select_layouts
from raptor.passes.lower import Lowered, lower, sanitize
from raptor.passes.plan_ir import plan_module
from raptor.passes.rulecheck import invalid_ir
from raptor.rewrite.canonicalize import CanonStats, canonicalize
from raptor.rewrite.eggfile import resolve_rules_dir, shipped_rules_dir
from raptor.rewrite.select import LayoutSelection
from raptor.target import Target

PASSES = ("import", "layout", "lower", "canonicalize", "materialize")
"""Pass names accepted by `--print-ir-after` (plus `all`)."""


class VerificationFailed(Exception):
    """A pass produced IR that does not verify (a compiler bug, reported with diagnostics)."""

    def __init__(self, after: str, diagnostics: list[Diagnostic]) -> None:
        head = f"IR does not verify after pass '{after}':"
        super().__init__("\n".join([head, *(str(d) for d in diagnostics[:20])]))
        self.diagnostics = diagnostics


class RulesProducedInvalidIR(VerificationFailed):
    """Canonicalization with a user's rules produced IR that does not verify: one line
    naming the rule file, the first failing rule id and the op."""

    def __init__(self, rules_dir: str | os.PathLike[str] | None,
                 diagnostics: list[Diagnostic]) -> None:
        Exception.__init__(self, invalid_ir(rules_dir, diagnostics))
        self.diagnostics = diagnostics


IRHook = Callable[[str, Module], None]


@dataclass
class CompileOptions:
    rules_dir: str | os.PathLike[str] | None = None
    layout_selector: str = "exact"  # exact | iterative | disabled
    verify_each: bool = True
    print_ir: IRHook | None = None


@dataclass
class Compiled:
    graph: PlanGraph
    selection: LayoutSelection
    layouts: LayoutChoice
    lowered: Lowered
    canon: CanonStats
    rules_dir: Path
    notes: list[str] = field(default_factory=list)

    @property
    def module(self) -> Module:
        return self.lowered.module

    @property
    def fired(self) -> dict[str, int]:
        out = dict(self.selection.fired)
        for k, n in self.canon.fired.items():
            out[k] = out.get(k, 0) + n
        return out


def _check(name: str, module: Module, opts: CompileOptions, assembly: bool = False) -> None:
    if opts.verify_each:
        diags = verify_module(module, allow_assembly=assembly)
        if diags:
            raise VerificationFailed(name, diags)
    if opts.print_ir is not None:
        opts.print_ir(name, module)


def compile_model(model: str | Path, target: Target, opts: CompileOptions | None = None
                  ) -> Compiled:
    """ONNX file → verified canonical graph IR (N x F batches + Blueprints)."""
    opts = opts or CompileOptions()
    graph = import_onnx(str(model))
    if opts.print_ir is not None or opts.verify_each:
        _check("import", plan_module(graph), opts)
    selection, layouts = select_layouts(graph, opts.layout_selector, opts.rules_dir)
    if opts.print_ir is not None or opts.verify_each:
        _check("layout", plan_module(graph, layouts), opts)
    lowered = lower(graph, target, layouts)
    _check("lower", lowered.module, opts, assembly=True)
    canon = canonicalize(lowered.module, opts.rules_dir)
    try:
        _check("canonicalize", lowered.module, opts)
    except VerificationFailed as e:
        if resolve_rules_dir(opts.rules_dir).resolve() == shipped_rules_dir().resolve():
            raise  # the shipped rules: a compiler bug, with every diagnostic
        raise RulesProducedInvalidIR(opts.rules_dir, e.diagnostics) from None
    return Compiled(graph, selection, layouts, lowered, canon,
                    resolve_rules_dir(opts.rules_dir), list(graph.notes))


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
