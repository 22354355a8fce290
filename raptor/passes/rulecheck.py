"""`raptor rules check`: what `raptor solve` will meet, checked on a rules directory.

Statically, every rule file of the manifest is present, parses, type-checks and declares
the relations the bridge writes and reads as `rewrite.schema` states them; any other
`.egg` file parses on its own. Then a small plan graph touching every kind the layout
rules know (convolution, pooling, SiLU, bias, residual add, concat, slice, resize, global
pooling, flatten, gemm, softmax) is planned, lowered and canonicalized with the rules,
verified and interpreted against its numpy reference: rules that load but never saturate,
leave a plan without an alternative, or rewrite the IR into something invalid or wrong
fail here as they would fail `raptor solve`.
"""

from __future__ import annotations

import os

import numpy as np

from raptor.frontend.plan import Plan, PlanGraph, PlanValue
from raptor.frontend.reference import run_plan_graph
from raptor.ir.core import Diagnostic
from raptor.ir.interpreter import Interpreter
from raptor.ir.verifier import verify_module
from raptor.passes.layout import select_layouts
from raptor.passes.lower import LoweringError, lower, sanitize
from raptor.rewrite.canonicalize import CanonicalizeError, canonicalize
from raptor.rewrite.eggfile import MANIFEST, RuleError, load_files, load_program, resolve_rules_dir
from raptor.rewrite.layout import LayoutError
from raptor.target import load_target


def invalid_ir(rules_dir: str | os.PathLike[str] | None, diags: list[Diagnostic]) -> str:
    """One line for canonical IR that does not verify after canonicalization."""
    d = diags[0]
    where = f"{d.loc}: " if d.loc else ""
    more = f" (and {len(diags) - 1} more)" if len(diags) > 1 else ""
    path = resolve_rules_dir(rules_dir) / MANIFEST["canonicalize"][-1]
    return f"{path}: error: your rules produced invalid IR: {where}[{d.rule}] {d.message}{more}"


def check_rules(rules_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The errors of a rules directory, one line each (empty: `raptor solve` can use it)."""
    directory = resolve_rules_dir(rules_dir)
    if not directory.is_dir():
        return [f"{directory}: error: not a rules directory"]
    errors: list[str] = []
    listed = {f for names in MANIFEST.values() for f in names}
    for name, names in MANIFEST.items():
        missing = [f for f in names if not (directory / f).is_file()]
        if missing:
            errors += [f"{directory / f}: error: missing (the {name} rules)" for f in missing]
            continue
        try:
            load_program(name, directory)
        except RuleError as e:
            errors.append(str(e))
    for extra in sorted(p for p in directory.glob("*.egg") if p.name not in listed):
        try:
            load_files([extra])
        except RuleError as e:
            errors.append(str(e))
    if not errors:
        try:
            _rehearse(directory)
        except (RuleError, LayoutError, LoweringError, CanonicalizeError, _Invalid) as e:
            errors.append(str(e))
    return errors


class _Invalid(Exception):
    """The rehearsal's IR does not verify or computes something else than the reference."""


def _rehearse(directory: os.PathLike[str]) -> None:
    graph = sample_graph()
    _, layouts = select_layouts(graph, "exact", directory)
    low = lower(graph, load_target("default"), layouts)
    canonicalize(low.module, directory)
    diags = verify_module(low.module)
    if diags:
        raise _Invalid(invalid_ir(directory, diags))
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(1, 2, 8, 8)
    want = run_plan_graph(graph, {"x": x})
    got = Interpreter(low.module).run({sanitize("x"): x})
    for v, g in zip(graph.outputs, got, strict=True):
        if not np.allclose(g, want[v.name], rtol=1e-4, atol=1e-5):
            raise _Invalid(f"{directory}: error: with these rules the sample network computes "
                           f"output {v.name} wrongly (max error "
                           f"{float(np.abs(g - want[v.name]).max()):.3g})")


def sample_graph() -> PlanGraph:
    """x (1,2,8,8) → conv 3x3 → relu → maxpool → silu → bias → + residual → concat →
    (resize → global pool → flatten → gemm → softmax) and (slice → relu)."""
    def w(*shape: int) -> np.ndarray:
        n = int(np.prod(shape))
        return np.sin(np.arange(n, dtype=np.float32)).reshape(shape)

    pool = {"kernel": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0], "dilations": [1, 1],
            "ceil_mode": 0}
    plans = [
        Plan("conv", "conv", ["x"], ["c"], {"strides": [1, 1], "pads": [1, 1, 1, 1],
                                            "dilations": [1, 1], "group": 1},
             {"weight": w(4, 2, 3, 3), "bias": w(4)}),
        Plan("relu", "relu", ["c"], ["r"]),
        Plan("maxpool", "pool", ["r"], ["p"], pool),
        Plan("silu", "silu", ["p"], ["s"]),
        Plan("bias_add", "bias", ["s"], ["b"], weights={"bias": w(4)}),
        Plan("add", "add", ["b", "p"], ["a"]),
        Plan("concat", "cat", ["a", "s"], ["k"], {"axis": 1}),
        Plan("resize_nearest", "up", ["k"], ["u"], {
            "sizes": [8, 8], "scales": [2.0, 2.0], "coordinate_transformation_mode":
            "asymmetric", "nearest_mode": "floor"}),
        Plan("global_avgpool", "gap", ["u"], ["g"]),
        Plan("flatten", "flat", ["g"], ["f"], {"axis": 1}),
        Plan("gemm", "fc", ["f"], ["m"], weights={"weight": w(8, 3), "bias": w(3)}),
        Plan("softmax", "soft", ["m"], ["y"], {"axis": 1}),
        Plan("slice", "cut", ["k"], ["sl"], {"starts": [0, 2, 0, 0], "ends": [1, 6, 4, 4],
                                            "steps": [1, 1, 1, 1]}),
        Plan("relu", "relu2", ["sl"], ["z"]),
    ]
    shapes = {"x": (1, 2, 8, 8), "c": (1, 4, 8, 8), "r": (1, 4, 8, 8), "p": (1, 4, 4, 4),
              "s": (1, 4, 4, 4), "b": (1, 4, 4, 4), "a": (1, 4, 4, 4), "k": (1, 8, 4, 4),
              "u": (1, 8, 8, 8), "g": (1, 8, 1, 1), "f": (1, 8), "m": (1, 3), "y": (1, 3),
              "sl": (1, 4, 4, 4), "z": (1, 4, 4, 4)}
    values = {n: PlanValue(n, s) for n, s in shapes.items()}
    graph = PlanGraph("rules-check", [values["x"]], [values["y"], values["z"]], values, plans, 17)
    graph.validate()
    return graph
